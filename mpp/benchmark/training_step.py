"""How fast MPP trains against its ceiling and its peer: training images per second, peak memory and model FLOPs
utilisation of one training step (forward, backward, clipping, fused AdamW) on synthetic images.

    python -m mpp.benchmark [--config <mpp preset>] [--batch N] [--precision bf16]
                            [--grad-checkpointing] [--json FILE]

Rows, all on the preset's encoder, image size and batch:
- supervised: the same timm ViT with a classification head (1,000 classes). Every patch goes through the encoder, as
  in MPP, so this is MPP's ceiling: corruption, targets and the prediction head should cost almost nothing on top.
- mpp: this package's MaskedPatchPredictor.
- vit-pytorch: the peer's MPP class on its own ViT of the same size, set to the paper's scheme (50% of patches, of
  those 80% [mask], 10% a random patch, 10% unchanged). Measured when ``vit_pytorch`` is importable:
  ``pip install vit-pytorch==1.16.0``, the newest release whose MPP still runs with its ViT (from 1.16.1 its ViT's
  [class] token is 2-D and MPP's ``repeat`` fails).
- with ``--grad-checkpointing``, also supervised and mpp with ``model.grad_checkpointing=true``: the memory that
  recomputing each block's activations in the backward pass saves, and the time it costs.

Each row runs in a process of its own, so its peak memory is its own: CUDA's peak allocation on a GPU, the
process's peak resident set on a CPU (which includes the ~0.5 GB of the imported libraries). The processes live
side by side (on a GPU their memory adds up: choose ``--batch`` to fit three) and take turns: after ``--warmup``
steps each, every row times ``--steps`` steps, then the next row does, ``--repeats`` times round. Throughput is the
median of a row's timings; interleaving them puts a drift in the machine's speed on every row alike.

FLOPs per image are 3x the forward pass's (backward costs twice the forward), as counted by torch's
FlopCounterMode: every matmul and convolution, attention's included. Utilisation divides the achieved FLOP rate by
the device's dense bf16 peak where it is known.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import re
import resource
import statistics
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from mpp.benchmark import preset_encoder_and_batch
from mpp.config.building import preset_path
from mpp.config.model import ClassifierConfig
from mpp.config.runs import MPPRunConfig
from mpp.models.encoder import create_encoder, encoder_structure
from mpp.training.optimizer import create_optimizer

__all__ = ["measure_interleaved"]  # what study/, tools/ and users may import from here

DEFAULT_PRESET = "mpp_tiny_cpu"
PEER_VERSION = "1.16.0"
ROWS = ("supervised", "mpp", "vit-pytorch")
CHECKPOINTED = " + grad checkpointing"  # a row's model with model.grad_checkpointing=true (--grad-checkpointing)
PEAK_BF16_FLOPS = {"H100": 989.4e12, "H200": 989.4e12, "A100": 312e12}  # dense, SXM; matched in the device name


class PeerMPP(torch.nn.Module):
    """vit-pytorch's MPP called as this package's models are: ``(images, labels)``, labels unused."""

    def __init__(self, mpp: torch.nn.Module):
        super().__init__()
        self.mpp = mpp

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.mpp(images)


def build_model(row: str, run: MPPRunConfig) -> torch.nn.Module:
    """The model a row trains: ``model(images, labels)`` on raw (b c h w) images in [0, 1] gives the loss (or an
    output holding it)."""
    if row.endswith(CHECKPOINTED):
        run = dataclasses.replace(run, model=dataclasses.replace(run.model, grad_checkpointing=True))
        row = row.removesuffix(CHECKPOINTED)
    if row == "vit-pytorch":
        return PeerMPP(peer_mpp(run))
    from mpp.models.classifier import ImageClassifier
    from mpp.models.masked_patch_prediction import MaskedPatchPredictor

    if row not in ROWS:
        raise ValueError(f"no benchmark row {row!r}: the rows are {', '.join(ROWS)}")
    encoder = create_encoder(run.model)
    if row == "mpp":
        return MaskedPatchPredictor(encoder, run.mpp, run.data.mean, run.data.std)
    return ImageClassifier(encoder, 1000, ClassifierConfig(), run.data.mean, run.data.std)


def peer_mpp(run: MPPRunConfig) -> torch.nn.Module:
    """vit-pytorch's MPP on its ViT, sized as the preset's timm encoder, corrupting as the paper does."""
    from vit_pytorch import ViT
    from vit_pytorch.mpp import MPP

    encoder = encoder_structure(run.model)
    dim, heads = encoder.embed_dim, encoder.blocks[0].attn.num_heads
    patch, size = encoder.patch_embed.patch_size[0], encoder.patch_embed.img_size[0]
    vit = ViT(image_size=size, patch_size=patch, num_classes=1000, dim=dim, depth=len(encoder.blocks), heads=heads,
              mlp_dim=encoder.blocks[0].mlp.fc1.out_features, channels=run.model.in_chans, dim_head=dim // heads)
    # vit-pytorch draws [mask] with replace_prob, then a random patch for random_patch_prob / (1 - replace_prob) of
    # the rest: 0.8 and 0.1 give the paper's 80 / 10 / 10 split of the corrupted patches.
    return MPP(transformer=vit, patch_size=patch, dim=dim, output_channel_bits=run.mpp.colour_bits,
               channels=run.model.in_chans, max_pixel_val=1.0, mask_prob=run.mpp.corruption_rate,
               replace_prob=run.mpp.mask_fraction, random_patch_prob=run.mpp.random_fraction)


def loss_of(output: Any) -> torch.Tensor:
    return output if isinstance(output, torch.Tensor) else output.loss


def forward_flops(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> int:
    """FLOPs of one forward pass over ``images``, as torch counts them. Attention runs on its math backend here,
    whose matmuls the counter sees on every device (it does not count the CPU's fused kernel)."""
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        model(images, labels)
    return counter.get_total_flops()


class TrainingStep:
    """One row's training step on synthetic images, built and warmed up in the calling process."""

    def __init__(self, row: str, preset: str, batch: int, precision: str, warmup: int, compile_model: bool) -> None:
        run = preset_encoder_and_batch(preset)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.batch = batch
        torch.manual_seed(0)
        model = build_model(row, run).to(self.device).train()
        size = encoder_structure(run.model).patch_embed.img_size  # the preset's, or its architecture's default
        images = torch.rand(batch, run.model.in_chans, *size, device=self.device)
        labels = torch.randint(0, 1000, (batch,), device=self.device)
        self.flops_per_image = 3 * forward_flops(model, images, labels) / batch
        optimizer = create_optimizer(model, run.train, self.device)  # the recipes' (fused here), decay groups and all
        trained = torch.compile(model) if compile_model else model
        autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=precision == "bf16")

        def step() -> None:
            with autocast:
                loss = loss_of(trained(images, labels))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        self.step = step
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        for _ in range(warmup):
            step()
        self.synchronise()

    def synchronise(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def seconds_per_step(self, steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        self.synchronise()
        return (time.perf_counter() - start) / steps

    def summary(self) -> dict[str, Any]:
        """Peak memory so far, FLOPs per image and the device."""
        peak = torch.cuda.max_memory_allocated() if self.device.type == "cuda" else peak_resident_bytes()
        return {"peak_memory_bytes": peak, "training_flops_per_image": self.flops_per_image,
                "device": device_name(self.device)}


def measure(row: str, preset: str, batch: int, precision: str, steps: int, repeats: int, warmup: int,
            compile_model: bool) -> dict[str, Any]:
    """One row, in the calling process: images/s (median of the repeats), peak memory, FLOPs per image."""
    step = TrainingStep(row, preset, batch, precision, warmup, compile_model)
    seconds = statistics.median(step.seconds_per_step(steps) for _ in range(repeats))
    return {"images_per_second": batch / seconds, **step.summary()}


def peak_resident_bytes() -> int:
    """This process's own peak resident set. Linux's ``VmHWM``: ``ru_maxrss`` keeps the peak of the process image
    that exec replaced, so a row started by a large parent process would report the parent's memory."""
    status = Path("/proc/self/status")
    if status.is_file():
        found = re.search(r"^VmHWM:\s+(\d+) kB", status.read_text(), re.M)
        if found:
            return int(found.group(1)) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"


def peak_flops(name: str) -> float | None:
    return next((peak for key, peak in PEAK_BF16_FLOPS.items() if key in name), None)


def _serve_row(connection: Connection, args: tuple) -> None:
    """A row's own process: build and warm up, then time ``steps`` steps each time the parent sends a number, and
    answer ``None`` with the summary."""
    step = TrainingStep(*args)
    connection.send("ready")
    while (steps := connection.recv()) is not None:
        connection.send(step.seconds_per_step(steps))
    connection.send(step.summary())


def measure_interleaved(rows: list[str], args: tuple, batch: int, steps: int, repeats: int) -> dict[str, Any]:
    """Every row in a process of its own, so that its peak memory is its own, timed in turn: repeat r of every row
    runs before repeat r + 1 of any, so a drift in the machine's speed (a shared host, clocks) reaches all rows alike
    instead of whichever ran last. ``args``: TrainingStep's arguments after the row."""
    context = multiprocessing.get_context("spawn")
    connections, processes = {}, []
    for row in rows:
        connections[row], child = context.Pipe()
        processes.append(context.Process(target=_serve_row, args=(child, (row, *args))))
        processes[-1].start()
        child.close()  # the row's end is its own: if the row dies, reading from it ends instead of waiting forever
    try:
        return timed_in_turn(connections, batch, steps, repeats)
    finally:  # a row that failed leaves the others waiting for orders: end them, or the benchmark never exits
        for process in processes:
            if process.is_alive():
                process.kill()
            process.join()


def timed_in_turn(connections: dict[str, Connection], batch: int, steps: int, repeats: int) -> dict[str, Any]:
    for row, connection in connections.items():  # all built and warmed up before the first timing
        try:
            connection.recv()
        except EOFError:
            raise RuntimeError(f"the {row!r} row's process ended before it was ready (see its traceback above)"
                               ) from None
    timings: dict[str, list[float]] = {row: [] for row in connections}
    for _ in range(repeats):
        for row, connection in connections.items():
            connection.send(steps)
            timings[row].append(connection.recv())
    results = {}
    for row, connection in connections.items():
        connection.send(None)
        results[row] = {"images_per_second": batch / statistics.median(timings[row]), **connection.recv(),
                        "seconds_per_step": timings[row]}
    return results


def peer_available() -> bool:
    try:
        import vit_pytorch  # noqa: F401
    except ImportError:
        return False
    return True


PEER_DOES_NOT_COMPILE = ("its MPP finds the patches to corrupt with nonzero, whose output's shape depends on the "
                         "data, and torch.compile fails on it (DynamicOutputShapeException: aten.nonzero; torch 2.11 "
                         "on an H200)")


def rows_to_measure(compile_model: bool, grad_checkpointing: bool) -> tuple[list[str], str | None]:
    """The rows, and why the peer's is not among them (None when it is)."""
    if compile_model:
        peer_absent: str | None = PEER_DOES_NOT_COMPILE
    else:
        peer_absent = None if peer_available() else f"not installed (pip install vit-pytorch=={PEER_VERSION})"
    rows = [row for row in ROWS if row != "vit-pytorch" or peer_absent is None]
    return rows + [row + CHECKPOINTED for row in ("supervised", "mpp") if grad_checkpointing], peer_absent


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m mpp.benchmark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=preset_path, default=DEFAULT_PRESET,
                        help=f"MPP preset: encoder, image size (default: {DEFAULT_PRESET})")
    parser.add_argument("--batch", type=int, help="images per step (default: the preset's micro or global batch)")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--steps", type=int, default=10, help="steps per timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings; the median is reported")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--compile", action="store_true", help="torch.compile each model")
    parser.add_argument("--grad-checkpointing", action="store_true",
                        help="also the supervised and MPP rows with model.grad_checkpointing=true")
    parser.add_argument("--json", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    run = preset_encoder_and_batch(args.config)
    batch = args.batch or run.train.micro_batch_size or run.train.global_batch_size
    rows, peer_absent = rows_to_measure(args.compile, args.grad_checkpointing)
    measured = measure_interleaved(rows, (str(args.config), batch, args.precision, args.warmup, args.compile), batch,
                                   args.steps, args.repeats)
    results: dict[str, Any] = {"preset": str(args.config), "batch_size": batch, "precision": args.precision,
                               "compile": args.compile, "rows": measured, "peer_not_measured": peer_absent}
    device = results["device"] = results["rows"]["mpp"]["device"]
    peak = peak_flops(device)
    for result in results["rows"].values():
        achieved = result["images_per_second"] * result["training_flops_per_image"]
        result["model_flops_utilisation"] = achieved / peak if peak and args.precision == "bf16" else None
    speed = {row: result["images_per_second"] for row, result in results["rows"].items()}
    results["mpp_over_supervised"] = speed["mpp"] / speed["supervised"]
    results["mpp_over_vit_pytorch"] = speed["mpp"] / speed["vit-pytorch"] if "vit-pytorch" in speed else None
    print_table(results, run)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


def print_table(results: dict[str, Any], run: MPPRunConfig) -> None:
    encoder = encoder_structure(run.model)
    print(f"{run.model.name}: width {encoder.embed_dim}, depth {len(encoder.blocks)}, "
          f"{encoder.patch_embed.img_size[0]} px, patch {encoder.patch_embed.patch_size[0]}; batch "
          f"{results['batch_size']}, {results['precision']}, compile {results['compile']}; {results['device']}")
    print("| step | images/s | peak memory (MiB) | GFLOPs per image | MFU |")
    print("|---|---:|---:|---:|---:|")
    for row, result in results["rows"].items():
        mfu = result["model_flops_utilisation"]
        print(f"| {row} | {result['images_per_second']:,.1f} | {result['peak_memory_bytes'] / 2**20:,.0f} | "
              f"{result['training_flops_per_image'] / 1e9:.3f} | {'' if mfu is None else f'{mfu:.1%}'} |")
    print(f"MPP / supervised: {results['mpp_over_supervised']:.3f}"
          + (f"; MPP / vit-pytorch: {results['mpp_over_vit_pytorch']:.2f}" if results["mpp_over_vit_pytorch"]
             else f"; vit-pytorch not measured: {results['peer_not_measured']}"))

