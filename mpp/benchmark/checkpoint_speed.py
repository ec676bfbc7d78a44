"""What verifying a checkpoint costs next to loading it, at the size of a preset's checkpoint.

    python -m mpp.benchmark.checkpoint_speed [--config mpp_vit_b16_paper] [--repeats 3] [--dir DIR]
                                       [--cold]

The state is synthetic: the preset's MPP model and its AdamW moments, filled with random values (a checkpoint of a
trained model is the same size). It is saved once with ``save_checkpoint``, then verified (``checkpoint_damage``:
every file's size and CRC-32) and loaded (``load_checkpoint``) in turn, ``--repeats`` times each; the medians are
printed. Both read the files the save just wrote, from the page cache: the worst case for verifying, whose reading is
all its work. ``--cold`` (root, Linux) also times a resume from the disk itself, the page cache dropped before each:
loading alone, then verifying and loading (the files verifying reads are in the cache when loading reads them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from accelerate import Accelerator

from mpp.benchmark import preset_encoder_and_batch
from mpp.config.building import preset_path
from mpp.config.runs import MPPRunConfig
from mpp.models.encoder import create_encoder
from mpp.models.masked_patch_prediction import MaskedPatchPredictor
from mpp.training.checkpoint import checkpoint_bytes, checkpoint_damage, load_checkpoint, save_checkpoint

DEFAULT_PRESET = "mpp_vit_b16_paper"


def synthetic_training_state(run: MPPRunConfig) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The preset's model and an AdamW whose moments are all there, as after the first step."""
    model = MaskedPatchPredictor(create_encoder(run.model), run.mpp, mean=run.data.mean, std=run.data.std)
    optimizer = torch.optim.AdamW(model.parameters(), lr=run.train.lr)
    for parameter in model.parameters():
        parameter.grad = torch.randn_like(parameter)
    optimizer.step()
    return model, optimizer


def drop_page_cache() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def median_seconds(action, repeats: int, cold: bool = False) -> float:
    times = []
    for _ in range(repeats):
        if cold:
            drop_page_cache()
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=preset_path, default=DEFAULT_PRESET)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", help="where to write the checkpoint (default: a temporary folder)")
    parser.add_argument("--cold", action="store_true", help="also time a resume from the disk (drops the page cache)")
    args = parser.parse_args(argv)

    run = preset_encoder_and_batch(args.config)
    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(*synthetic_training_state(run))
    with tempfile.TemporaryDirectory(dir=args.dir) as run_dir:
        start = time.perf_counter()
        checkpoint = save_checkpoint(accelerator, Path(run_dir), 1, run, keep=1)
        save = time.perf_counter() - start
        verify = median_seconds(lambda: checkpoint_damage(checkpoint), args.repeats)
        load = median_seconds(lambda: load_checkpoint(accelerator, checkpoint), args.repeats)
        size = checkpoint_bytes(checkpoint)
        figures = {"checkpoint_mib": size / 2**20, "save_s": save, "verify_s": verify, "load_s": load,
                   "verify_over_load": verify / load}
        print(f"{args.config}: {run.model.name}, checkpoint {size / 2**20:,.0f} MiB (model and AdamW moments)")
        print(f"  from the page cache: save (with checksums) {save:.2f} s;  verify {verify:.3f} s;  load {load:.3f} s;"
              f"  verify / load {verify / load:.2f}  (medians of {args.repeats})")
        if args.cold:
            def load() -> None:
                load_checkpoint(accelerator, checkpoint)

            def verify_and_load() -> None:
                checkpoint_damage(checkpoint)
                load()

            cold_load = median_seconds(load, args.repeats, cold=True)
            cold_both = median_seconds(verify_and_load, args.repeats, cold=True)
            figures.update(cold_load_s=cold_load, cold_verify_and_load_s=cold_both)
            print(f"  from the disk: load {cold_load:.3f} s;  verify and load {cold_both:.3f} s;  verifying adds "
                  f"{(cold_both - cold_load) / cold_load:.0%}")
    return figures


if __name__ == "__main__":
    main()
