"""How fast MPP trains against its ceiling and its peer: training images per second, peak memory and model FLOPs
utilisation of one training step (forward, backward, clipping, fused AdamW) on synthetic images.

    python -m mpp.benchmark [--config recipes/configs/<mpp preset>.yaml] [--batch N] [--precision bf16] [--json FILE]

Rows, all on the preset's encoder, image size and batch:
- supervised: the same timm ViT with a classification head (1,000 classes). Every patch goes through the encoder, as
  in MPP, so this is MPP's ceiling: corruption, targets and the prediction head should cost almost nothing on top.
- mpp: this package's MaskedPatchPredictor.
- vit-pytorch: the peer's MPP class on its own ViT of the same size, set to the paper's scheme (50% of patches, of
  those 80% [mask], 10% a random patch, 10% unchanged). Measured when ``vit_pytorch`` is importable:
  ``pip install vit-pytorch==1.16.0``, the newest release whose MPP still runs with its ViT (from 1.16.1 its ViT's
  [class] token is 2-D and MPP's ``repeat`` fails).

Each row is measured in a fresh process, so its peak memory is its own: CUDA's peak allocation on a GPU, the
process's peak resident set on a CPU (which includes the ~0.5 GB of the imported libraries). Throughput is the
median of ``--repeats`` timings of ``--steps`` steps, after ``--warmup`` steps. FLOPs per image are 3x the forward
pass's (backward costs twice the forward), as counted by torch's FlopCounterMode: every matmul and convolution,
attention's included. Utilisation divides the achieved FLOP rate by the device's dense bf16 peak where it is known.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from mpp.config import ClassifierConfig, MPPRunConfig, build_config
from mpp.encoder import create_encoder
from mpp.optimizer import create_optimizer

DEFAULT_PRESET = Path(__file__).parents[1] / "recipes" / "configs" / "mpp_tiny_cpu.yaml"
PEER_VERSION = "1.16.0"
ROWS = ("supervised", "mpp", "vit-pytorch")
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
    if row == "vit-pytorch":
        return PeerMPP(peer_mpp(run))
    from mpp.classifier import ImageClassifier
    from mpp.masked_patch_prediction import MaskedPatchPredictor

    encoder = create_encoder(run.model)
    if row == "mpp":
        return MaskedPatchPredictor(encoder, run.mpp, run.data.mean, run.data.std)
    return ImageClassifier(encoder, 1000, ClassifierConfig(), run.data.mean, run.data.std)


def peer_mpp(run: MPPRunConfig) -> torch.nn.Module:
    """vit-pytorch's MPP on its ViT, sized as the preset's timm encoder, corrupting as the paper does."""
    from vit_pytorch import ViT
    from vit_pytorch.mpp import MPP

    encoder = create_encoder(run.model)  # only to read its sizes
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


def timed(step: Callable[[], None], steps: int, repeats: int, warmup: int, device: torch.device) -> float:
    """Median seconds per step over ``repeats`` timings of ``steps`` steps."""
    synchronise = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        step()
    synchronise()
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        synchronise()
        timings.append((time.perf_counter() - start) / steps)
    return statistics.median(timings)


def measure(row: str, preset: str, batch: int, precision: str, steps: int, repeats: int, warmup: int,
            compile_model: bool) -> dict[str, Any]:
    """One row, in the calling process: images/s, peak memory, FLOPs per image."""
    run = build_config(MPPRunConfig, preset)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = build_model(row, run).to(device).train()
    size = create_encoder(run.model).patch_embed.img_size  # the preset's, or its architecture's default
    images = torch.rand(batch, run.model.in_chans, *size, device=device)
    labels = torch.randint(0, 1000, (batch,), device=device)
    flops = forward_flops(model, images, labels)
    optimizer = create_optimizer(model, run.train)  # the recipes' fused AdamW, weight-decay groups included
    trained = torch.compile(model) if compile_model else model
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")

    def step() -> None:
        with autocast:
            loss = loss_of(trained(images, labels))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    seconds = timed(step, steps, repeats, warmup, device)
    peak = (torch.cuda.max_memory_allocated() if device.type == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return {"images_per_second": batch / seconds, "peak_memory_bytes": peak,
            "training_flops_per_image": 3 * flops / batch, "device": device_name(device)}


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"


def peak_flops(name: str) -> float | None:
    return next((peak for key, peak in PEAK_BF16_FLOPS.items() if key in name), None)


def _measure_in_child(queue: multiprocessing.Queue, args: tuple) -> None:
    queue.put(measure(*args))


def measure_in_fresh_process(*args: Any) -> dict[str, Any]:
    """``measure(*args)`` in a new process, so that its peak memory is its own."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_measure_in_child, args=(queue, args))
    child.start()
    result = queue.get()
    child.join()
    return result


def peer_available() -> bool:
    try:
        import vit_pytorch  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=DEFAULT_PRESET, help="MPP preset: encoder, image size")
    parser.add_argument("--batch", type=int, help="images per step (default: the preset's micro or global batch)")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--steps", type=int, default=10, help="steps per timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings; the median is reported")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--compile", action="store_true", help="torch.compile each model")
    parser.add_argument("--json", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    run = build_config(MPPRunConfig, args.config)
    batch = args.batch or run.train.micro_batch_size or run.train.global_batch_size
    rows = [row for row in ROWS if row != "vit-pytorch" or peer_available()]
    results: dict[str, Any] = {"preset": str(args.config), "batch_size": batch, "precision": args.precision,
                               "compile": args.compile, "rows": {}}
    for row in rows:
        results["rows"][row] = measure_in_fresh_process(row, str(args.config), batch, args.precision, args.steps,
                                                        args.repeats, args.warmup, args.compile)
    device = results["device"] = results["rows"]["mpp"]["device"]
    peak = peak_flops(device)
    for row, result in results["rows"].items():
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
    encoder = create_encoder(run.model)
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
             else f"; vit-pytorch not installed (pip install vit-pytorch=={PEER_VERSION})"))


if __name__ == "__main__":
    main()
