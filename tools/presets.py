"""Every preset in one table: what it is for, its encoder and size, its steps and data, what one optimizer step costs
on this machine, and the figure it reaches (or the paper's, that it aims at).

    python -m tools.presets [--configs recipes/configs] [--out docs/presets.md] [--max-tokens 4096]
                                    [--estimate-batch 8] [--only <preset> ...]

Run it from the repository root. For each training preset (mpp_*, supervised_*, finetune_*) one training step of its
encoder (forward, backward, clipping, the preset's optimizer; fp32, synthetic images) is timed in a process of its own,
as ``python -m mpp.benchmark`` does: the MPP model for mpp_* presets, the classifier for the others. A preset's pass
(its micro batch, else its global batch) is timed whole when it holds at most ``--max-tokens`` patches in all (64
images of 64 patches); a larger one is timed on ``--estimate-batch`` images and its step time scaled up by images
(an estimate, marked so), its peak memory that of the smaller pass. The figure each reaches is the preset's own
``# Reaches:`` comment; the reproductions' (``study/configs/reproduce_*``)
figures come from their ``results/<experiment>/results.json``. With ``--out``, the page is written whole.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from mpp.benchmark.training_step import measure_interleaved
from mpp.config.building import build_config
from mpp.config.runs import FewShotRunConfig, FinetuneRunConfig, MPPRunConfig, SupervisedRunConfig
from mpp.experiments.config import ComparisonConfig
from mpp.models.encoder import count_parameters, encoder_structure
from mpp.run import write_whole
from study.reproduction_config import ReproductionConfig
from study.reproduction_tables import headline

RECIPES = {"mpp": MPPRunConfig, "supervised": SupervisedRunConfig, "finetune": FinetuneRunConfig,
           "eval": FewShotRunConfig}
PURPOSE = {"mpp": "MPP pre-training", "supervised": "supervised pre-training", "finetune": "fine-tuning",
           "eval": "frozen evaluation"}
STAND_IN_DATA = "data.source=shapes"  # for presets that leave data.source to the user: only the encoder is built


@dataclass
class PresetRow:
    name: str
    purpose: str
    encoder: str
    parameters: str
    image: str
    steps: str
    data: str
    step_time: str
    peak_memory: str
    reaches: str


def header_field(text: str, name: str) -> str:
    """A preset's ``# <name>: ...`` comment (``Reaches``, ``For``), its continuation lines (``#   ...``) joined."""
    found = re.search(rf"^# {name}: (.*(?:\n#   .*)*)", text, re.M)
    return re.sub(r"\s*\n#\s+", " ", found.group(1)).strip() if found else "not stated"


def encoder_description(run: Any) -> tuple[str, str, str]:
    encoder = encoder_structure(run.model)
    heads = encoder.blocks[0].attn.num_heads
    size, patch = encoder.patch_embed.img_size[0], encoder.patch_embed.patch_size[0]
    return (f"{run.model.name}: width {encoder.embed_dim}, {len(encoder.blocks)} blocks, {heads} heads",
            f"{count_parameters(encoder) / 1e6:.2f}M", f"{size} px, {patch}x{patch} patches")


def data_description(preset_text: str, run: Any) -> str:
    if 'source: ""' in preset_text:
        return "yours (`data.source`, required)"
    shots = f", {run.data.shots_per_class} per class" if run.data.shots_per_class else ""
    return f"`{run.data.source}`{shots}"


def time_step(preset: Path, recipe: str, run: Any, max_tokens: int, estimate_batch: int, repeats: int
              ) -> tuple[str, str]:
    """(time per optimizer step, peak memory) of the preset's training step here, measured or scaled up by images."""
    pass_images = run.train.micro_batch_size or run.train.global_batch_size
    patches = encoder_structure(run.model).patch_embed.num_patches
    batch = pass_images if pass_images * patches <= max_tokens else min(pass_images, estimate_batch)
    # The benchmark's step reads an MPP preset: the encoder, optimizer and normalisation of this one are handed over.
    settings = yaml.safe_load(preset.read_text())
    handed = {section: settings[section] for section in ("model", "train") if section in settings}
    handed["data"] = {key: value for key, value in settings.get("data", {}).items() if key in ("mean", "std")}
    with tempfile.TemporaryDirectory() as folder:
        step_preset = Path(folder) / "step.yaml"
        step_preset.write_text(yaml.safe_dump(handed))
        row = "mpp" if recipe == "mpp" else "supervised"
        measured = measure_interleaved([row], (str(step_preset), batch, "fp32", 1, False), batch, steps=1,
                                       repeats=repeats)[row]
    seconds_per_image = statistics.median(measured["seconds_per_step"]) / batch
    step_seconds = seconds_per_image * run.train.global_batch_size
    scaled = batch < run.train.global_batch_size
    estimate = f" (estimate: {batch} images timed)" if batch < pass_images else ""
    accumulated = f", {run.train.global_batch_size // pass_images} passes" if scaled and not estimate else ""
    return (f"{format_seconds(step_seconds)}{accumulated}{estimate}",
            f"{measured['peak_memory_bytes'] / 2**30:.1f} GiB" + (f" at {batch} images" if estimate else ""))


def format_seconds(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"


def preset_row(preset: Path, max_tokens: int, estimate_batch: int, repeats: int, timed: bool = True) -> PresetRow:
    recipe = preset.stem.split("_")[0]
    text = preset.read_text()
    run = build_config(RECIPES[recipe], preset, [STAND_IN_DATA] if 'source: ""' in text else [])
    encoder, parameters, image = encoder_description(run)
    steps, step_time, peak = "-", "-", "-"
    if recipe != "eval":
        length = f"{run.train.steps:,}" if run.train.steps else f"{run.train.epochs:,g} epochs"
        steps = f"{length} x {run.train.global_batch_size:,}"
    if recipe != "eval" and timed:
        step_time, peak = time_step(preset, recipe, run, max_tokens, estimate_batch, repeats)
        print(f"{preset.name}: {step_time} per step, peak {peak}", flush=True)
    return PresetRow(preset.name, PURPOSE[recipe], encoder, parameters, image, steps, data_description(text, run),
                     step_time, peak, header_field(text, "Reaches"))


EXPERIMENTS = {"reproduce": ReproductionConfig, "compare": ComparisonConfig}  # presets of whole experiments
STUDY_CONFIGS = Path("study/configs")  # the reproductions' presets, beside the package's


def is_experiment(preset: Path) -> bool:
    return preset.stem.split("_")[0] in EXPERIMENTS


def mean_and_sd(values: list[float]) -> str:
    return f"{100 * statistics.fmean(values):.1f} ± {100 * statistics.stdev(values):.1f}%"


def experiment_row(preset: Path, published: Path = Path("results")) -> str:
    """The experiment's row: what its published results (``published``/<its output_dir's name>) measured."""
    kind = preset.stem.split("_")[0]
    run = build_config(EXPERIMENTS[kind], preset)
    results = published / Path(run.output_dir).name / "results.json"
    purpose = header_field(preset.read_text(), "For")
    if not results.is_file():
        return f"| `{preset.name}` | {purpose} | {len(run.seeds)} | not run | - |"
    measured = json.loads(results.read_text())
    figure = headline(measured)  # balanced accuracy where recorded: the figure the claims read
    summary = (f"fine-tuned test {'balanced ' * (figure == 'finetune_balanced_accuracy')}accuracy, mean ± SD over "
               "the seeds: " + "; ".join(f"{row['label']}: {mean_and_sd(row[figure])}"
                                         for key, row in measured["rows"].items()
                                         if key in ("scratch", "mpp-colour-50", "supervised")))
    return (f"| `{preset.name}` | {purpose} | {len(measured['seeds'])} | "
            f"{measured['wall_seconds'] / 60:.0f} min | {summary} ([`{results}`](../{results})) |")


def page(rows: list[PresetRow], reproductions: list[str], command: str) -> str:
    machine = (f"a {os.cpu_count()}-core CPU ({torch.get_num_threads()} threads; load average {os.getloadavg()[0]:.1f} "
               "as the page was written)")
    table = "\n".join(f"| `{row.name}` | {row.purpose} | {row.encoder} | {row.parameters} | {row.image} | {row.steps} "
                      f"| {row.data} | {row.step_time} | {row.peak_memory} | {row.reaches} |" for row in rows)
    return f"""# Presets

Every preset in `recipes/configs/`, for `--config`, and the study's reproductions in `study/configs/`. This page is
written by `{command}` (from the repository root), here on {machine}, on {time.strftime('%Y-%m-%d')}: \
each training preset's step is timed on synthetic images in fp32, whatever
precision the preset asks of a GPU (see [GPU status](performance.md#gpu-status): nothing here is measured on a GPU).
A step whose pass holds more images than the command times is scaled up from the images it timed: an estimate, and
marked so. Peak memory is the timing process's peak resident set (about 0.5 GiB of it the libraries). "Reaches" is
the figure each preset gives, with the page or file it comes from; the paper presets name the paper's figure they aim
at.

## Training and evaluation presets

| Preset | For | Encoder | Parameters | Image | Steps x batch | Data | Time per step here | Peak memory | Reaches |
| --- | --- | --- | ---: | --- | ---: | --- | ---: | ---: | --- |
{table}

## Reproductions

`python -m study.reproduce --config study/configs/reproduce_<preset>` runs a grid of the presets above over
seeds ([Results](results.md)), and `python recipes/compare.py --config
recipes/configs/compare_<preset>` compares MPP with scratch trained as long, random weights and raw pixels on your
own images ([Your own images](own-images.md)); the wall time is that of the whole experiment on this project's 2-core
machine, from its `results.json`. No load average was recorded; [Results](results.md) says, where it is known,
whether an experiment had the machine alone or shared it.

| Preset | What it is | Seeds | Wall time | What it measured |
| --- | --- | ---: | ---: | --- |
{chr(10).join(reproductions)}
"""


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog="python -m tools.presets", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", type=Path, default=Path("recipes/configs"), help="the presets' folder")
    parser.add_argument("--out", type=Path, help="write the page here (e.g. docs/presets.md)")
    parser.add_argument("--max-tokens", type=int, default=4096,
                        help="a pass of up to this many patches (images x patches) is timed whole (default 4096)")
    parser.add_argument("--estimate-batch", type=int, default=8, help="images timed of a larger pass (default 8)")
    parser.add_argument("--repeats", type=int, default=2, help="timed steps per preset, after one untimed")
    parser.add_argument("--only", nargs="*", default=(),
                        help="time only these presets (stems), e.g. mpp_tiny_cpu; the others are listed untimed")
    args = parser.parse_args(argv)
    presets = sorted(args.configs.glob("*.yaml"))
    rows = [preset_row(preset, args.max_tokens, args.estimate_batch, args.repeats,
                       timed=not args.only or preset.stem in args.only)
            for preset in presets if not is_experiment(preset)]
    experiments = sorted([*presets, *STUDY_CONFIGS.glob("reproduce_*.yaml")], key=lambda preset: preset.name)
    reproductions = [experiment_row(preset) for preset in experiments if is_experiment(preset)]
    command = "python -m tools.presets --out docs/presets.md"
    text = page(rows, reproductions, command)
    if args.out:
        write_whole(args.out, lambda partial: partial.write_text(text))
    print(text)
    return text


if __name__ == "__main__":
    main()
