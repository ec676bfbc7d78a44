"""Where one training step's time goes: ``torch.profiler`` over the benchmark's step (``training_step.py``).

    python -m mpp.benchmark.step_profile [--config <mpp preset>] [--row mpp] [--batch N]
                                         [--precision bf16] [--compile] [--steps 5] [--json FILE]

After the warm-up (and the compile), ``--steps`` steps run under the profiler. It prints the operators that took the
most device time (kernels on a GPU, CPU time on a CPU) and the share of each kind of work: matrix products,
attention, normalisation, element-wise work and the optimizer. ``device_busy`` is the kernels' time over the
steps' wall time: near 1, the step is bound by the device's arithmetic and memory; well below, by launching work
from the host.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Iterable

from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from mpp.benchmark.training_step import DEFAULT_PRESET, ROWS, TrainingStep
from mpp.config.building import preset_path

# An operator's kind, by the first of these words in its name (lower case); the rest is element-wise work.
# The optimizer first: its fused kernels' names hold "mm" ("AdamMath").
KINDS = {"optimizer": ("adam", "foreach", "multi_tensor"), "attention": ("attention", "flash", "sdpa", "fmha"),
         "matrix products": ("gemm", "matmul", "mm", "linear", "nvjet", "cutlass", "xmma"),
         "normalisation": ("layer_norm", "layernorm", "norm")}


# CUPTI's record of the host waiting on a full launch queue, listed among the device's events: not a kernel, and
# the device's work meanwhile is counted in the kernels.
NOT_DEVICE_WORK = frozenset({"Command Buffer Full"})


def kind_of(name: str) -> str:
    lowered = name.lower()
    return next((kind for kind, words in KINDS.items() if any(word in lowered for word in words)), "element-wise")


def self_seconds(events: Iterable[Any], on_gpu: bool) -> dict[str, float]:
    """Each operator's own time in ``events`` (``profiler.key_averages()``): on a GPU the kernels' alone, since the
    host operator that launched a kernel reports the kernel's time again as its own device time (counting both
    doubled the total); on a CPU each operator's self CPU time."""
    times: dict[str, float] = {}
    for event in events:
        if on_gpu and (event.device_type != DeviceType.CUDA or event.key in NOT_DEVICE_WORK):
            continue
        seconds = (event.self_device_time_total if on_gpu else event.self_cpu_time_total) / 1e6
        if seconds > 0:
            times[event.key] = times.get(event.key, 0.0) + seconds
    return times


def profile_step(step: TrainingStep, steps: int) -> dict[str, Any]:
    """``steps`` of ``step`` under the profiler: each operator's self time on the device, by kind, and how busy the
    device was."""
    on_gpu = step.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as profiler:
        started = time.perf_counter()
        for _ in range(steps):
            step.step()
        step.synchronise()
        wall = time.perf_counter() - started
    times = self_seconds(profiler.key_averages(), on_gpu)
    total = sum(times.values())
    by_kind: dict[str, float] = {}
    for name, seconds in times.items():
        by_kind[kind_of(name)] = by_kind.get(kind_of(name), 0.0) + seconds
    top = sorted(times.items(), key=lambda item: -item[1])[:20]
    return {"steps": steps, "wall_seconds_per_step": wall / steps, "device_seconds_per_step": total / steps,
            "device_busy": total / wall if on_gpu else None,
            "share_by_kind": {kind: seconds / total for kind, seconds in sorted(by_kind.items(), key=lambda i: -i[1])},
            "top_operators": [{"name": name, "share": seconds / total, "milliseconds_per_step": 1e3 * seconds / steps}
                              for name, seconds in top]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m mpp.benchmark.step_profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=preset_path, default=DEFAULT_PRESET, help="MPP preset: encoder, image size")
    parser.add_argument("--row", choices=[row for row in ROWS if row != "vit-pytorch"], default="mpp")
    parser.add_argument("--batch", type=int, default=8, help="images per step")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--steps", type=int, default=5, help="profiled steps")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    step = TrainingStep(args.row, str(args.config), args.batch, args.precision, args.warmup, args.compile)
    results = {"row": args.row, "preset": str(args.config), "batch_size": args.batch, "precision": args.precision,
               "compile": args.compile, **step.summary(), **profile_step(step, args.steps)}
    busy = results["device_busy"]
    print(f"{args.row}, batch {args.batch}, {args.precision}, compile {args.compile}; {results['device']}: "
          f"{1e3 * results['wall_seconds_per_step']:.1f} ms per step, operators "
          f"{1e3 * results['device_seconds_per_step']:.1f} ms" + (f", device busy {busy:.0%}" if busy else ""))
    for kind, share in results["share_by_kind"].items():
        print(f"  {kind:<16} {share:6.1%}")
    for operator in results["top_operators"]:
        print(f"  {operator['share']:6.1%} {operator['milliseconds_per_step']:8.2f} ms  {operator['name'][:100]}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
