"""Does loading keep up with training? Decoded and augmented images per second for every source, at several worker
counts, next to the training step's images per second for the same preset.

    python -m mpp.benchmark.loading [--config recipes/configs/<preset>.yaml] [--workers 0 1 2 4] [--json FILE]

Sources whose data this machine lacks are written first to a temporary folder in their real format, from the
embedded shapes: CIFAR pickles (raw pixels), a folder of JPEG files, and the same JPEGs as a Hugging Face dataset
(saved to disk, as parquet, and streamed). Fashion-MNIST is read from the Debian package when it is installed.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import itertools
import json
import pickle
import tempfile
import time
import warnings
from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import DataLoader

from mpp.benchmark.training_step import DEFAULT_PRESET, measure
from mpp.config import DataConfig, MPPRunConfig, build_config
from mpp.data.fashion_mnist import DEFAULT_DIR as FASHION_MNIST_DIR
from mpp.data.loading import build_dataset, build_loader
from mpp.data.shapes import ShapesSource
from mpp.models.encoder import create_encoder

FILE_IMAGES = 2048  # images written for the file-based sources
FILE_IMAGE_SIZE = 128  # their side in pixels: decoding costs more than for 32x32 arrays, as with real photos


def shapes_uint8(count: int, size: int) -> torch.Tensor:
    return (ShapesSource("train", size).images(torch.arange(count)) * 255).round().to(torch.uint8)


def jpeg_bytes(images: torch.Tensor) -> list[bytes]:
    encoded = []
    for image in images:  # once, while preparing the data: not part of what is measured
        buffer = io.BytesIO()
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(buffer, format="JPEG", quality=90)
        encoded.append(buffer.getvalue())
    return encoded


def write_sources(root: Path) -> dict[str, DataConfig]:
    """Every source, as a DataConfig; the ones this machine lacks written under ``root`` in their real format."""
    import datasets

    sources = {"shapes": DataConfig(source="shapes")}
    if (FASHION_MNIST_DIR / "train-labels-idx1-ubyte.gz").is_file():
        sources["fashion-mnist"] = DataConfig(source="fashion-mnist")

    pixels = shapes_uint8(10_000, 32)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for i in range(1, 6):
        batch = {b"data": pixels.reshape(len(pixels), -1)[(i - 1) * 2000:i * 2000].numpy(), b"labels": [0] * 2000}
        (folder / f"data_batch_{i}").write_bytes(pickle.dumps(batch))
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"shape"]}))
    sources["cifar10 (32x32 pickles)"] = DataConfig(source=f"cifar10:{root}")

    encoded = jpeg_bytes(shapes_uint8(FILE_IMAGES, FILE_IMAGE_SIZE))
    for i, data in enumerate(encoded):
        path = root / "folder" / f"class_{i % 8}" / f"{i:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    sources[f"folder ({FILE_IMAGE_SIZE}px JPEG)"] = DataConfig(source=f"folder:{root / 'folder'}")

    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=8)})
    table = datasets.Dataset.from_dict(
        {"image": [{"bytes": data, "path": None} for data in encoded], "label": [i % 8 for i in range(FILE_IMAGES)]},
        features,
    )
    table.save_to_disk(str(root / "saved"), num_shards=8)
    (root / "parquet").mkdir()
    for shard in range(8):
        table.shard(8, shard).to_parquet(str(root / "parquet" / f"train-{shard}.parquet"))
    cache = str(root / "hf-cache")
    sources[f"hf: saved ({FILE_IMAGE_SIZE}px JPEG)"] = DataConfig(source=f"hf:{root / 'saved'}")
    sources[f"hf: parquet ({FILE_IMAGE_SIZE}px JPEG)"] = DataConfig(source=f"hf:{root / 'parquet'}",
                                                                    hf_cache_dir=cache)
    # Streamed from the saved copy: a streamed parquet folder pauses 5 s at the end of every pass (datasets waits
    # for arrow's reader threads), which would dominate a few seconds of measurement.
    sources[f"hf: saved, streamed ({FILE_IMAGE_SIZE}px JPEG)"] = DataConfig(
        source=f"hf:{root / 'saved'}", streaming=True, shuffle_buffer=1000
    )
    return sources


def images_per_second(loader: DataLoader, batch_size: int, seconds: float) -> float:
    """Images per second over ``seconds`` of loading, epoch after epoch; the first batch (worker start-up) is not
    timed, each later epoch's start-up is."""
    batches = (batch for epoch in itertools.count() for batch in loader)
    next(batches)
    start, images = time.perf_counter(), 0
    for _ in batches:
        images += batch_size
        if time.perf_counter() - start > seconds:
            break
    return images / (time.perf_counter() - start)


def loader_throughput(data: DataConfig, image_size: int, batch_size: int, workers: int, seconds: float) -> float:
    cfg = dataclasses.replace(data, num_workers=workers)
    dataset = build_dataset(cfg, "train", image_size, channels=3, augment=True)
    return images_per_second(build_loader(dataset, batch_size, cfg, train=True), batch_size, seconds)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m mpp.benchmark.loading", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=DEFAULT_PRESET,
                        help=f"preset giving image size and batch (default: {DEFAULT_PRESET})")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4])
    parser.add_argument("--seconds", type=float, default=3.0, help="loading time measured per cell")
    parser.add_argument("--json", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    # More workers than cores is part of what is measured here; torch's warning about it is noise.
    warnings.filterwarnings("ignore", message="This DataLoader will create")

    run = build_config(MPPRunConfig, args.config)
    encoder = create_encoder(run.model)
    image_size, batch = encoder.patch_embed.img_size[0], run.train.micro_batch_size or run.train.global_batch_size
    results: dict = {"preset": str(args.config), "image_size": image_size, "batch_size": batch,
                     "cpu_threads": torch.get_num_threads(), "loading": {}}
    print(f"loader benchmark: {args.config.name}, {image_size}x{image_size} views, batch {batch}, "
          f"{torch.get_num_threads()} torch threads")
    columns = [f"{w} worker{'s' * (w > 1)}" if w else "main process" for w in args.workers]
    print("| source | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(args.workers))
    with tempfile.TemporaryDirectory(prefix="mpp-loader-benchmark-") as root:
        for name, data in write_sources(Path(root)).items():
            rates = {workers: loader_throughput(data, image_size, batch, workers, args.seconds)
                     for workers in args.workers}
            results["loading"][name] = rates
            print(f"| {name} | " + " | ".join(f"{rate:,.0f}" for rate in rates.values()) + " |", flush=True)
    results["training_images_per_second"] = measure("mpp", str(args.config), batch, "fp32", steps=10, repeats=3,
                                                    warmup=1, compile_model=False)["images_per_second"]
    print(f"training step ({args.config.name}, MPP, batch {batch}): "
          f"{results['training_images_per_second']:,.0f} images/s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
