"""Does loading keep up with training? Decoded and augmented images per second for every source, at several worker
counts, next to the training step's images per second for the same preset.

    python -m mpp.benchmark.loader_speed [--config <preset>] [--workers 0 1 2 4] [--json FILE]
                                    [--imagenet-images 256] [--rounds 3] [--only-imagenet]

Sources whose data this machine lacks are written first to a temporary folder in their real format, from the
embedded shapes: CIFAR pickles (raw pixels), a folder of JPEG files, and the same JPEGs as a Hugging Face dataset
(saved to disk, as parquet, and streamed). Fashion-MNIST is read from the Debian package when it is installed.

Then ImageNet-like files: JPEGs with ImageNet's statistics (the longer side 400-500 pixels, ImageNet's common aspect
ratios, quality 90, photo-like content of about 110 KB), read through the pre-training view at 224 pixels by each
path, in interleaved rounds (the medians are reported; afterwards, each stage of the first two paths, timed):
- ``baseline``: the file path as it was: each file decoded whole by PIL, cut and resized by PIL, the batch converted
  to float and mirrored;
- ``library``: the package's file path: each JPEG decoded at the coarsest scale its crop allows (by torchvision's
  decoder at full scale), cut and resized by torch's uint8 kernel, mirrored, and handed on as uint8;
- ``prepared``: the files written once by ``python -m mpp.data.prepare`` (shorter side 256), read as ``hf:<dir>``;
- ``gpu-decode``: ``data.decode=gpu`` (nvJPEG), where CUDA is available.
Images per second per core divides by the cores the loading occupies: one in the main process (held to one torch
thread for these rows), else one per worker (torch gives each one thread), at most the machine's. ``--json FILE``
writes every row: source, path, workers, images per second (and per core).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import itertools
import json
import multiprocessing
import os
import pickle
import statistics
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from mpp.benchmark.training_step import DEFAULT_PRESET, measure
from mpp.config.building import build_config, preset_path
from mpp.config.data import DataConfig
from mpp.config.runs import MPPRunConfig
from mpp.data.fashion_mnist import DEFAULT_DIR as FASHION_MNIST_DIR
from mpp.data.image_dataset import ImageDataset, ImageView, image_sizes, mirrored, resized_crop_of_pixels
from mpp.data.image_source import decode, decoded_jpeg, open_image
from mpp.data.loading import build_dataset, build_loader, check_batch_fits
from mpp.data.prepare import Settings, prepare
from mpp.data.shapes import ShapesSource
from mpp.images import KeyedDraws, keys_of
from mpp.models.encoder import encoder_structure

# The names meant for use outside the package (study/, tools/ and users)
__all__ = [
    "imagenet_like_jpeg", "synthetic_jpegs", "write_labelled_jpegs",
]

FILE_IMAGES = 2048  # images written for the file-based sources
FILE_IMAGE_SIZE = 128  # their side in pixels: decoding costs more than for 32x32 arrays, as with real photos
IMAGENET_ASPECTS = (4 / 3, 4 / 3, 4 / 3, 3 / 4, 3 / 2, 2 / 3, 1.0, 5 / 4, 16 / 9)  # width / height, as ImageNet's
IMAGENET_VIEW, IMAGENET_BATCH = 224, 64
IMAGENET_PATHS = ("baseline", "library", "prepared", "gpu-decode")  # imagenet_like_paths's, in its order
# Each epoch reads the ImageNet-like files this many times over: loader workers restart every epoch, and an epoch
# of a few batches would weigh their start-up far above its share in an ImageNet epoch of 20,000 batches.
IMAGENET_EPOCH_REPEATS = 16


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


def seeded_jpeg(encode: Callable[[torch.Generator], bytes], seed: int) -> bytes:
    return encode(torch.Generator().manual_seed(seed))


def synthetic_jpegs(count: int, encode: Callable[[torch.Generator], bytes], seed: int = 0) -> list[bytes]:
    """``count`` JPEGs, the i-th ``encode``'s from a generator seeded ``seed + i``, made over every core where there
    are thousands (a benchmark's run writes 14,848 at a few milliseconds each; a process costs seconds to start).
    Each process starts afresh (spawned: a forked torch can hang), on one thread."""
    processes = min(len(os.sched_getaffinity(0)), count // 1024)
    if processes <= 1:
        return [seeded_jpeg(encode, seed + index) for index in range(count)]
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"),
                             initializer=torch.set_num_threads, initargs=(1,)) as pool:
        return list(pool.map(seeded_jpeg, itertools.repeat(encode, count), range(seed, seed + count), chunksize=64))


def write_labelled_jpegs(folder: Path, files: list[bytes], classes: int) -> None:
    """``files`` as a labelled folder: ``folder/class_<i % classes>/<i>.jpg``."""
    for index, data in enumerate(files):
        path = folder / f"class_{index % classes}" / f"{index:06d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def imagenet_like_jpeg(generator: torch.Generator) -> bytes:
    """A photo-like JPEG with ImageNet's size statistics: the longer side 400-500 pixels, one of ImageNet's common
    aspect ratios, detail at every scale (octaves of smooth noise, as natural images' falling spectrum), quality 90."""
    aspect = IMAGENET_ASPECTS[int(torch.randint(len(IMAGENET_ASPECTS), (), generator=generator))]
    longer = int(torch.randint(400, 501, (), generator=generator))
    width, height = (longer, round(longer / aspect)) if aspect >= 1 else (round(longer * aspect), longer)
    pixels = torch.zeros(1, 3, height, width)
    for octave in range(8):  # 4x3 cells up to 512x384: each octave finer and a little fainter
        cells = torch.rand(1, 3, 3 * 2**octave, 4 * 2**octave, generator=generator) - 0.5
        pixels += 0.9**octave * torch.nn.functional.interpolate(cells, size=(height, width), mode="bilinear")
    pixels = (0.5 + 0.28 * pixels / pixels.std()).clamp(0, 1)  # a photo's contrast, about 110 KB at quality 90
    encoded = io.BytesIO()
    Image.fromarray((pixels[0] * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()).save(encoded, format="JPEG",
                                                                                               quality=90)
    return encoded.getvalue()


class BaselineFileDataset(ImageDataset):
    """The file path as it was before draft decoding (the ``baseline`` row): each file decoded whole, each view cut
    and resized by PIL, then stacked, converted to float and mirrored as a float batch."""

    def views_of_files(self, positions: list[int], epochs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        opened = [self.open(position) for position in positions]
        images = [decode(image, self.source.mode) for _, _, _, image in opened]
        boxes, flips = self.view.draw(*image_sizes(images), self.opened_draws(opened, epochs))
        views = baseline_views(images, boxes.tolist(), self.view.size)
        return baseline_batch(views, flips), torch.tensor([index for _, index, _, _ in opened])


def baseline_views(images: list[Image.Image], boxes: list[list[float]], size: int) -> list[Image.Image]:
    return [image.resize((size, size), Image.Resampling.BILINEAR, box=box)
            for image, box in zip(images, boxes, strict=True)]


def baseline_batch(views: list[Image.Image], flips: torch.Tensor) -> torch.Tensor:
    pixels = torch.from_numpy(np.stack([np.asarray(view) for view in views])).view(len(views), *views[0].size, -1)
    return mirrored(pixels.permute(0, 3, 1, 2).float() / 255, flips)


def stage_milliseconds(files: list[bytes], size: int, passes: int = 3) -> dict[str, float]:
    """Milliseconds per image of each stage of the baseline and library paths, on the same files and boxes, in one
    thread (the fastest of ``passes``)."""
    view = ImageView(size, augment=True)
    boxes, flips = view.draw(*image_sizes([open_image(file) for file in files]),
                             KeyedDraws(keys_of(0, torch.arange(len(files)))))
    boxes = boxes.tolist()
    whole = [decode(open_image(file), "RGB") for file in files]
    pixels = [decoded_jpeg(file, "RGB") for file in files]
    pil_views = baseline_views(whole, boxes, size)
    torch_views = [resized_crop_of_pixels(image, box, size) for image, box in zip(pixels, boxes, strict=True)]
    stages = {
        "open (header only)": lambda: [open_image(file) for file in files],
        "decode whole, PIL (baseline)": lambda: [decode(open_image(file), "RGB") for file in files],
        "decode whole, torchvision (library)": lambda: [decoded_jpeg(file, "RGB") for file in files],
        "cut and resize, PIL (baseline)": lambda: baseline_views(whole, boxes, size),
        "cut and resize, torch uint8 (library)": lambda: [resized_crop_of_pixels(image, box, size)
                                                          for image, box in zip(pixels, boxes, strict=True)],
        "float batch, mirrored (baseline)": lambda: baseline_batch(pil_views, flips),
        "uint8 batch, mirrored (library)": lambda: view.batch_of(torch_views, flips),
    }
    with torch_threads(1):
        return {name: min(timed(stage) for _ in range(passes)) * 1000 / len(files) for name, stage in stages.items()}


def timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def imagenet_like_paths(root: Path, files: list[bytes]) -> dict[str, tuple[Dataset, DataConfig]]:
    """Each path's dataset (224-pixel pre-training views) over the same ImageNet-like files, written under root."""
    write_labelled_jpegs(root / "imagenet-like", files, classes=10)
    print(f"ImageNet-like files: {len(files)} JPEGs, {statistics.mean(map(len, files)) / 1000:.0f} KB on average")
    folder = DataConfig(source=f"folder:{root / 'imagenet-like'}")
    prepare(Settings(folder.source, (), 256, 90, 1000), root / "prepared", ["train"], workers=1)
    prepared = DataConfig(source=f"hf:{root / 'prepared'}", hf_cache_dir=str(root / "hf-cache"))
    repeated = torch.arange(len(files)).repeat(IMAGENET_EPOCH_REPEATS)
    library = build_dataset(folder, "train", IMAGENET_VIEW, channels=3, augment=True).subset(repeated)
    paths = {
        "baseline": (BaselineFileDataset(library.source, library.view, 3, library.indices), folder),
        "library": (library, folder),
        "prepared": (build_dataset(prepared, "train", IMAGENET_VIEW, channels=3, augment=True).subset(repeated),
                     prepared),
    }
    if torch.cuda.is_available():
        gpu = dataclasses.replace(folder, decode="gpu")
        paths["gpu-decode"] = (build_dataset(gpu, "train", IMAGENET_VIEW, channels=3, augment=True).subset(repeated),
                               gpu)
    return paths


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


def loader_throughput(dataset: Dataset, data: DataConfig, batch_size: int, workers: int, seconds: float) -> float:
    cfg = dataclasses.replace(data, num_workers=None if data.decode == "gpu" else workers)
    check_batch_fits(dataset, batch_size)  # a loader of no whole batch would be read forever, timing nothing
    device_type = "cuda" if torch.cuda.is_available() else "cpu"  # the loader settings training would use
    return images_per_second(build_loader(dataset, batch_size, cfg, train=True, device_type=device_type), batch_size,
                             seconds)


@contextlib.contextmanager
def torch_threads(count: int):
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def cores_used(workers: int) -> int:
    return min(max(1, workers), len(os.sched_getaffinity(0)))


def row(source: str, path: str, workers: int, rate: float) -> dict:
    return {"source": source, "path": path, "workers": workers, "images_per_second": round(rate, 1),
            "images_per_second_per_core": round(rate / cores_used(workers), 1)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m mpp.benchmark.loader_speed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=preset_path, default=DEFAULT_PRESET,
                        help=f"preset giving image size and batch (default: {DEFAULT_PRESET})")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4])
    parser.add_argument("--seconds", type=float, default=3.0, help="loading time measured per cell")
    parser.add_argument("--json", type=Path, help="also write the table here")
    parser.add_argument("--imagenet-images", type=int, default=256, help="ImageNet-like JPEGs written (default 256)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the ImageNet-like paths")
    parser.add_argument("--only-imagenet", action="store_true", help="skip the preset's sources")
    parser.add_argument("--paths", nargs="+", choices=IMAGENET_PATHS, default=list(IMAGENET_PATHS),
                        help="the ImageNet-like paths measured (default: all; gpu-decode only where CUDA is)")
    args = parser.parse_args(argv)
    # More workers than cores is part of what is measured here; torch's warning about it is noise.
    warnings.filterwarnings("ignore", message="This DataLoader will create")

    run = build_config(MPPRunConfig, args.config)
    encoder = encoder_structure(run.model)
    image_size, batch = encoder.patch_embed.img_size[0], run.train.micro_batch_size or run.train.global_batch_size
    results: dict = {"preset": str(args.config), "image_size": image_size, "batch_size": batch,
                     "cpu_threads": torch.get_num_threads(), "cores": len(os.sched_getaffinity(0)), "rows": []}
    columns = [f"{w} worker{'s' * (w > 1)}" if w else "main process" for w in args.workers]
    with tempfile.TemporaryDirectory(prefix="mpp-loader-benchmark-") as root:
        if not args.only_imagenet:
            print(f"loader benchmark: {args.config.name}, {image_size}x{image_size} views, batch {batch}, "
                  f"{torch.get_num_threads()} torch threads; images/s")
            print("| source | " + " | ".join(columns) + " |")
            print("|---|" + "---:|" * len(args.workers))
            for name, data in write_sources(Path(root)).items():
                rates = {}
                for workers in args.workers:
                    dataset = build_dataset(data, "train", image_size, channels=3, augment=True)
                    rates[workers] = loader_throughput(dataset, data, batch, workers, args.seconds)
                    results["rows"].append(row(name, "library", workers, rates[workers]))
                print(f"| {name} | " + " | ".join(f"{rate:,.0f}" for rate in rates.values()) + " |", flush=True)
            results["training_images_per_second"] = measure(
                "mpp", str(args.config), batch, "fp32", steps=10, repeats=3, warmup=1, compile_model=False
            )["images_per_second"]
            print(f"training step ({args.config.name}, MPP, batch {batch}): "
                  f"{results['training_images_per_second']:,.0f} images/s")

        files = synthetic_jpegs(args.imagenet_images, imagenet_like_jpeg)
        paths = {name: path for name, path in imagenet_like_paths(Path(root), files).items() if name in args.paths}
        rates = {(path, workers): [] for path in paths for workers in args.workers}
        for _ in range(args.rounds):  # interleaved: the machine's drift falls on every path alike
            for (path, workers), measured in rates.items():
                dataset, data = paths[path]
                if data.decode == "gpu" and workers:
                    continue
                with torch_threads(1 if workers == 0 else torch.get_num_threads()):  # one core, as in a worker
                    measured.append(loader_throughput(dataset, data, IMAGENET_BATCH, workers, args.seconds))
        print(f"\nImageNet-like JPEGs, {IMAGENET_VIEW}x{IMAGENET_VIEW} pre-training views, batch {IMAGENET_BATCH}, "
              f"median of {args.rounds} rounds; images/s (per core)")
        print("| path | " + " | ".join(columns) + " |")
        print("|---|" + "---:|" * len(args.workers))
        for path in paths:
            cells = []
            for workers in args.workers:
                if not rates[path, workers]:
                    cells.append("")
                    continue
                rate = statistics.median(rates[path, workers])
                results["rows"].append(row("imagenet-like", path, workers, rate))
                cells.append(f"{rate:,.0f} ({rate / cores_used(workers):,.0f})")
            print(f"| {path} | " + " | ".join(cells) + " |", flush=True)
        results["stage_milliseconds"] = stage_milliseconds(files, IMAGENET_VIEW)
        print("\nwhere the time goes, milliseconds per image in one thread:")
        for stage, milliseconds in results["stage_milliseconds"].items():
            print(f"  {stage}: {milliseconds:.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
