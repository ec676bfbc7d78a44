"""The data layer every recipe reads through, chosen by ``data.source``.

A source (``sources.py``; one module per format) gives one split's raw images and labels; a view
(``transforms.py``) turns them into model inputs; ``ImageDataset`` (``image_dataset.py``) puts the two together
over a seeded selection (``subsets.py``), and ``build_loader`` loads it. Images come out as float (b c h w) in
[0, 1], unnormalised: MPP targets come from the raw pixels of the augmented image, the model normalises its input.
"""

from __future__ import annotations

import itertools
import os
from typing import Iterator, Literal

import torch
from accelerate import Accelerator
from accelerate.data_loader import prepare_data_loader
from torch.utils.data import DataLoader, Dataset

from mpp.config import DataConfig, DataError, parse_source
from mpp.data.hugging_face import class_names, image_and_label_columns, load_split, undecoded
from mpp.data.image_dataset import ImageDataset, StreamingImageDataset, keep_batch
from mpp.data.sources import open_source
from mpp.data.subsets import holdout_split, shots_per_class
from mpp.data.transforms import ImageView

Split = Literal["train", "holdout", "test"]  # "holdout": data.holdout_fraction of the training split, seeded


def image_view(cfg: DataConfig, image_size: int, augment: bool) -> ImageView:
    return ImageView(image_size, augment, cfg.crop_scale, cfg.crop_ratio, cfg.hflip, cfg.eval_crop_fraction)


def build_dataset(
    cfg: DataConfig,
    split: Split,
    image_size: int,
    channels: int,
    augment: bool,
    seed: int = 0,
    process_index: int = 0,
    num_processes: int = 1,
) -> Dataset:
    """(images, labels) batches of ``split`` at ``image_size``, with the pre-training view when ``augment``.

    ``seed`` draws the views; ``process_index`` / ``num_processes`` matter only to a stream, which is split between
    processes here (map-style data is split into distinct batches by ``prepare_loader``).
    """
    view = image_view(cfg, image_size, augment)
    if cfg.streaming:
        return build_stream(cfg, split, view, channels, seed, process_index, num_processes)
    source = open_source(cfg, "test" if split == "test" else "train", image_size)
    indices = None
    if split != "test":
        kept, held_out = holdout_split(len(source), cfg.holdout_fraction, cfg.subset_seed)
        if split == "holdout":
            if not cfg.holdout_fraction:
                raise DataError("the holdout split needs data.holdout_fraction > 0 (e.g. 0.02)")
            indices = held_out
        else:
            indices = kept
            if cfg.shots_per_class:
                indices = kept[shots_per_class(source.labels[kept], cfg.shots_per_class, cfg.subset_seed)]
    return ImageDataset(source, view, channels, indices, seed, cfg.max_bad_fraction)


def build_stream(
    cfg: DataConfig, split: Split, view: ImageView, channels: int, seed: int, process_index: int, num_processes: int
) -> StreamingImageDataset:
    from datasets.distributed import split_dataset_by_node

    kind, name = parse_source(cfg.source)
    if kind != "hf":
        raise DataError(f"data.streaming applies to hf: sources; {cfg.source} is read from local files already")
    if split == "holdout" or cfg.holdout_fraction or cfg.shots_per_class:
        raise DataError("a stream is read once, in order: data.holdout_fraction and data.shots_per_class need "
                        "data.streaming=false")
    stream = load_split(name, cfg, cfg.eval_split if split == "test" else cfg.train_split)
    if stream.features is None:
        raise DataError(f"hf:{name}: the stream does not declare its columns; give data.streaming=false")
    image_column, label_column = image_and_label_columns(stream.features, cfg, name)
    stream = undecoded(stream.select_columns([image_column] + ([label_column] if label_column else [])), image_column)
    stream = split_dataset_by_node(stream, rank=process_index, world_size=num_processes)
    return StreamingImageDataset(stream, image_column, label_column, view, channels, seed,
                                 cfg.shuffle_buffer if view.augment else 0, cfg.max_bad_fraction,
                                 f"hf:{name} stream ({split})", len(class_names(stream.features, label_column, None)))


def sample_images(dataset: Dataset, count: int, seed: int, batch_size: int = 256) -> Iterator[torch.Tensor]:
    """Image batches of a seeded random sample of ``count`` images (all of them if fewer); a stream's first ones."""
    if isinstance(dataset, StreamingImageDataset):
        images = (image for image, _ in itertools.islice(dataset, count))
        while batch := list(itertools.islice(images, batch_size)):
            yield torch.stack(batch)
        return
    positions = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:count].tolist()
    for start in range(0, len(positions), batch_size):
        yield dataset.__getitems__(positions[start:start + batch_size])[0]


def default_num_workers(device_type: str, local_processes: int) -> int:
    """On a CPU the training step wants every core, and in-memory sources load in the main process faster than
    workers could hand batches over; elsewhere, all cores of this process's share but one."""
    if device_type == "cpu":
        return 0
    return max(1, len(os.sched_getaffinity(0)) // local_processes - 1)


def build_loader(
    dataset: Dataset,
    batch_size: int,
    cfg: DataConfig,
    train: bool,
    device_type: str = "cpu",
    local_processes: int = 1,
) -> DataLoader:
    """Training: shuffled, whole batches only (every step sees as many images). Evaluation: in order, all images."""
    streaming = isinstance(dataset, StreamingImageDataset)
    if train and not streaming and len(dataset) < batch_size:
        raise DataError(
            f"the training set has {len(dataset)} images, fewer than one batch of {batch_size}; "
            "lower train.micro_batch_size or train.global_batch_size"
        )
    workers = default_num_workers(device_type, local_processes) if cfg.num_workers is None else cfg.num_workers
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=train and not streaming,
        drop_last=train,
        collate_fn=None if streaming else keep_batch,
        num_workers=workers,
        pin_memory=device_type == "cuda" if cfg.pin_memory is None else cfg.pin_memory,
        prefetch_factor=cfg.prefetch_factor if workers else None,
        # Workers restart each epoch and so receive the dataset's new epoch (its views depend on it).
        persistent_workers=False,
    )


def prepare_loader(accelerator: Accelerator, loader: DataLoader) -> DataLoader:
    """Hand the loader to accelerate: with several processes, each gets distinct batches of every epoch. A stream
    already holds this process's share only (``build_dataset``), so it is just moved to the device."""
    if isinstance(loader.dataset, StreamingImageDataset):
        return prepare_data_loader(loader, device=accelerator.device, num_processes=1, process_index=0,
                                   put_on_device=True, dispatch_batches=False)
    return accelerator.prepare(loader)


__all__ = ["DataError", "Split", "build_dataset", "build_loader", "default_num_workers", "image_view",
           "open_source", "prepare_loader", "sample_images"]
