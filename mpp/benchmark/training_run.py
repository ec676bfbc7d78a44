"""How close a whole pre-training run comes to its step: the real recipe, on prepared images, against the step alone.

    python -m mpp.benchmark.training_run [--config <mpp preset>] [--batch N] [--precision bf16]
        [--compile] [--epoch-steps 8 500] [--steps N] [--workers N] [--repeats N] [--work DIR] [--json FILE]

For each ``--epoch-steps`` E it writes E x batch images (smooth noise, JPEG, about 1.15 times the preset's image
size), prepares them (``python -m mpp.data.prepare``), then runs ``accelerate launch recipes/mpp.py`` on them for
``--steps`` steps, the monitors off, and reads the run's images/s and the share of its time spent waiting for data
from its metrics.json (both over the steps after the first). Beside them: the step benchmark's MPP images/s
(``python -m mpp.benchmark``) at the same batch, precision and compilation. The runs of the epoch sizes take turns
``--repeats`` times; each figure is the median of its runs.

Two things show: what the loop loses to its data (the data-waiting share, and the run against the step), and what
an epoch's end costs (a small dataset's epochs against a large one's).
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

import torch
from PIL import Image

from mpp.benchmark import preset_encoder_and_batch
from mpp.benchmark.loader_speed import synthetic_jpegs, write_labelled_jpegs
from mpp.benchmark.training_step import DEFAULT_PRESET, measure_interleaved
from mpp.config.building import preset_path

NO_MONITORS = ("monitor.few_shot_every=0", "monitor.mosaic_every=0", "monitor.final_few_shot_draws=0")


def noise_jpeg(generator: torch.Generator, size: int) -> bytes:
    """A ``size``-pixel square of smooth colour noise, as JPEG: content that decodes and compresses like a picture."""
    coarse = torch.rand(1, 3, 4, 4, generator=generator)
    fine = torch.rand(1, 3, size // 4, size // 4, generator=generator) * 0.2
    pixels = torch.nn.functional.interpolate(coarse, size=size, mode="bilinear") + torch.nn.functional.interpolate(
        fine, size=size, mode="nearest")
    encoded = io.BytesIO()
    Image.fromarray((pixels[0].clamp(0, 1) * 255).to(torch.uint8).permute(1, 2, 0).numpy()).save(
        encoded, format="JPEG", quality=90)
    return encoded.getvalue()


def prepared_images(work: Path, count: int, size: int) -> Path:
    """``count`` images in two class folders under ``work``, prepared once (kept for the next invocation)."""
    prepared = work / f"prepared-{count}-{size}"
    if (prepared / "prepared.json").is_file():
        return prepared
    folder = work / f"jpegs-{count}-{size}"
    write_labelled_jpegs(folder, synthetic_jpegs(count, functools.partial(noise_jpeg, size=size), seed=count), 2)
    shard_size = max(64, -(-count // len(os.sched_getaffinity(0))))  # a shard per core: all of them prepare
    subprocess.run([sys.executable, "-m", "mpp.data.prepare", f"folder:{folder}", str(prepared), "--splits", "train",
                    "--short-side", str(size), "--shard-size", str(shard_size)], check=True, stdout=subprocess.DEVNULL)
    return prepared


def recipe_run(config: Path, prepared: Path, run_dir: Path, args: argparse.Namespace, batch: int) -> dict[str, Any]:
    """One pre-training run of ``args.steps`` steps on ``prepared``: its metrics.json."""
    overrides = [f"data.source=hf:{prepared}", f"data.hf_cache_dir={prepared / 'hf-cache'}", f"output_dir={run_dir}",
                 "overwrite=true", f"train.steps={args.steps}", "train.epochs=null", f"train.global_batch_size={batch}",
                 f"train.micro_batch_size={batch}", f"train.log_every={args.steps}",
                 f"train.checkpoint_every={args.steps}", f"train.mixed_precision="
                 f"{'bf16' if args.precision == 'bf16' else 'no'}", f"train.compile={str(args.compile).lower()}",
                 *NO_MONITORS, *([f"data.num_workers={args.workers}"] if args.workers is not None else [])]
    command = [sys.executable, "-m", "accelerate.commands.launch", "-m", "mpp", "pretrain", "--config", str(config),
               *overrides]
    finished = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              # the checkout first, then packages carried to a machine without an index
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))})
    if finished.returncode != 0:  # why, where a GPU's minutes were spent on it: the end of the run's own output
        raise SystemExit(f"the run failed (exit {finished.returncode}): {' '.join(command)}\n"
                         + "\n".join(finished.stderr.splitlines()[-30:]))
    return json.loads((run_dir / "metrics.json").read_text())


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m mpp.benchmark.training_run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=preset_path, default=DEFAULT_PRESET,
                        help=f"MPP preset (default: {DEFAULT_PRESET})")
    parser.add_argument("--batch", type=int, help="images per step (default: the preset's micro or global batch)")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (run and step alike)")
    parser.add_argument("--epoch-steps", type=int, nargs="+", default=[8, 500],
                        help="dataset sizes, in steps of one batch per epoch (default: 8 500)")
    parser.add_argument("--steps", type=int, default=200, help="training steps per run")
    parser.add_argument("--workers", type=int, help="data.num_workers of the runs (default: the package's)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each size, taking turns; the median counts")
    parser.add_argument("--work", type=Path, help="where the images and runs go (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    run = preset_encoder_and_batch(args.config)
    batch = args.batch or run.train.micro_batch_size or run.train.global_batch_size
    size = round(run.model.img_size * 1.15) if run.model.img_size else 256
    work = args.work or Path(tempfile.mkdtemp(prefix="training-run-"))
    work.mkdir(parents=True, exist_ok=True)
    data = {steps: prepared_images(work, steps * batch, size) for steps in args.epoch_steps}
    runs: dict[int, list[dict[str, Any]]] = {steps: [] for steps in args.epoch_steps}
    for _ in range(args.repeats):
        for steps, prepared in data.items():
            runs[steps].append(recipe_run(args.config, prepared, work / f"run-{steps}", args, batch))
    step = measure_interleaved(["mpp"], (str(args.config), batch, args.precision, 3, args.compile), batch, 10,
                               5)["mpp"]["images_per_second"]
    results: dict[str, Any] = {
        "preset": str(args.config), "batch_size": batch, "precision": args.precision, "compile": args.compile,
        "steps_per_run": args.steps, "workers": args.workers, "step_images_per_second": step,
        "runs": {str(steps): {
            "images": steps * batch,
            "images_per_second": statistics.median(r["images_per_second"] for r in rows),
            "data_wait_share": statistics.median(r.get("data_wait_share") or 0.0 for r in rows),
            "each": [round(r["images_per_second"], 1) for r in rows],
        } for steps, rows in runs.items()},
    }
    print(f"{args.config}: batch {batch}, {args.precision}, compile {args.compile}, {args.steps} steps a run, "
          f"data.num_workers={'default' if args.workers is None else args.workers}; median of {args.repeats}")
    print("| data | images/s | of the step's | waiting for data | each run |")
    print("|---|---:|---:|---:|---|")
    print(f"| the step alone (`python -m mpp.benchmark`) | {step:,.1f} | 1.00 | | |")
    for steps, figures in results["runs"].items():
        print(f"| {figures['images']:,} images: an epoch of {steps} steps | {figures['images_per_second']:,.1f} | "
              f"{figures['images_per_second'] / step:.2f} | {figures['data_wait_share']:.1%} | "
              f"{', '.join(map(str, figures['each']))} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
