"""From ``data.source`` to batches: a split of the data as a dataset of model inputs, and the loader that feeds a
training step or an evaluation. Images come out as float (b c h w) in [0, 1], unnormalised: MPP targets come from
the raw pixels of the augmented image, the model normalises its input."""

from __future__ import annotations

import itertools
import logging
import os
from typing import Any, Iterator, Optional

import torch
from accelerate import Accelerator
from accelerate.data_loader import prepare_data_loader
from torch.utils.data import DataLoader, Dataset

from mpp.config.data import DataConfig
from mpp.data.augmentation import ImageAugmentation
from mpp.data.hugging_face import StreamingImageDataset, build_stream
from mpp.data.image_dataset import ImageDataset, SkipsUndecodableImages, Split, image_view, keep_batch
from mpp.data.image_folder import ImageFolderSource
from mpp.data.image_source import FileSource, skip_summary
from mpp.data.sources import open_source
from mpp.data.subsets import holdout_split, shots_per_class
from mpp.errors import DataError
from mpp.private_apis import forget_prepared_loader

# The names meant for use outside the package (study/, tools/ and users)
__all__ = ["build_dataset", "sample_images"]

logger = logging.getLogger(__name__)


def build_dataset(
    cfg: DataConfig,
    split: Split,
    image_size: int,
    channels: int,
    augment: bool,
    seed: int = 0,
    process_index: int = 0,
    num_processes: int = 1,
    per_image: Optional[ImageAugmentation] = None,
) -> Dataset:
    """(images, labels, random_keys) batches of ``split`` at ``image_size``, with the pre-training view when
    ``augment`` (and ``per_image`` after it: a classifier's ``augment.*``).

    ``seed`` draws the views; ``process_index`` / ``num_processes`` matter only to a stream, which is split between
    processes here (map-style data is split into distinct batches by its loader: ``build_training_loader``).
    """
    view = image_view(cfg, image_size, augment, per_image)
    if cfg.decode == "gpu" and not torch.cuda.is_available():
        raise DataError("data.decode=gpu decodes JPEGs with nvJPEG on a CUDA GPU, and this machine has none "
                        "(torch.cuda.is_available() is false); use data.decode=cpu")
    if cfg.streaming:
        if cfg.decode == "gpu":
            raise DataError("data.decode=gpu reads files map-style; set data.streaming=false, or data.decode=cpu")
        return build_stream(cfg, split, view, channels, seed, process_index, num_processes)
    source = open_source(cfg, "test" if split == "test" else "train", image_size)
    if cfg.decode_cache and not isinstance(source, ImageFolderSource):
        raise DataError(f"data.decode_cache keeps the decoded images of a folder: source, and {cfg.source} is not one "
                        "(clip art is cached already; other files can be prepared once: python -m mpp.data.prepare)")
    if cfg.decode_cache and cfg.decode == "gpu":
        raise DataError("data.decode_cache keeps images decoded on the CPU; drop it with data.decode=gpu")
    if cfg.decode == "gpu" and not isinstance(source, FileSource):
        raise DataError(f"data.decode=gpu decodes image files (folder:, hf:); {cfg.source} is held in memory "
                        "already: use data.decode=cpu")
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
                indices = kept[shots_per_class(source.labels[kept], cfg.shots_per_class, cfg.subset_seed,
                                                class_names=source.class_names)]
    return ImageDataset(source, view, channels, indices, seed, cfg.max_bad_fraction,
                        "cuda" if cfg.decode == "gpu" else None, cfg.decode_cache)


def warn_if_tested_on_training_images(train_set: Dataset, test_set: Dataset) -> None:
    """Warns when test images are training images, a slip that makes every figure meaningless: the same source and
    split read twice (hf: data.eval_split naming the training split), or the same files reached by two paths
    (data.eval_folder naming the training folder, or one inside it)."""
    if not (isinstance(train_set, ImageDataset) and isinstance(test_set, ImageDataset)):
        return
    if train_set.source.description == test_set.source.description:
        shared = len(set(train_set.indices.tolist()) & set(test_set.indices.tolist()))
    elif isinstance(train_set.source, FileSource) and isinstance(test_set.source, FileSource):
        shared = len(resolved_files(train_set) & resolved_files(test_set))
    else:
        return
    if shared:
        logger.warning("%d of the %d test images are training images (training: %s; test: %s): every test figure "
                       "measures memory, not generalisation; test on other images (data.eval_folder, "
                       "data.eval_split, or a hold-out slice: data.holdout_fraction)", shared, len(test_set),
                       train_set.source.description, test_set.source.description)


def resolved_files(dataset: ImageDataset) -> set[str]:
    """The real paths of the dataset's images that are files on this machine (a folder's; most hf rows have none)."""
    names = (dataset.source.name(index) for index in dataset.indices.tolist())
    return {os.path.realpath(name) for name in names if os.path.isfile(name)}


def sample_images(dataset: Dataset, count: int, seed: int, batch_size: int = 256) -> Iterator[torch.Tensor]:
    """Image batches of a seeded random sample of ``count`` images (all of them if fewer); a stream's first ones."""
    if isinstance(dataset, StreamingImageDataset):
        images = (image for image, _, _ in itertools.islice(dataset, count))
        while batch := list(itertools.islice(images, batch_size)):
            yield torch.stack(batch)
        return
    positions = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:count].tolist()
    for start in range(0, len(positions), batch_size):
        yield dataset.__getitems__(positions[start:start + batch_size])[0]


def report_skipped(accelerator: Accelerator, dataset: Dataset, what: str) -> int:
    """The images of ``dataset`` skipped as undecodable, over all processes, and one warning line saying why (with a
    few of this process's names, and the fix). Every process calls it (a reduction)."""
    skipped = dataset.skipped() if isinstance(dataset, SkipsUndecodableImages) else []  # in memory: nothing to skip
    total = int(accelerator.reduce(torch.tensor(len(skipped), device=accelerator.device), "sum"))
    if total:
        logger.warning("%s: %s", what, skip_summary(skipped, total))
    return total


def default_num_workers(device_type: str, local_processes: int) -> int:
    """On a CPU the training step wants every core, and in-memory sources load in the main process faster than
    workers could hand batches over; elsewhere, all cores of this process's share but one."""
    if device_type == "cpu":
        return 0
    return max(1, len(os.sched_getaffinity(0)) // local_processes - 1)


def leave_the_process_group(worker_id: int) -> None:
    """Each loader worker's start: its own process group. A scheduler's SIGTERM (and Ctrl-C's SIGINT) goes to the
    job's whole process group, and a worker it ended would stop the training process (torch raises on a worker
    killed by a signal) before it saves its checkpoint (``mpp.training.checkpoint``). Signals sent to the worker
    itself still reach it: the training process ends its workers itself, at the latest at its exit (ignoring SIGTERM
    instead would outlive that, and hang the exit)."""
    os.setpgid(0, 0)


def check_classes_to_learn(dataset: Dataset) -> None:
    """Raises a DataError where the data a classifier learns has a single class: there is nothing to tell apart."""
    if dataset.num_classes == 1:
        raise DataError(f"{dataset.description} has a single class, and a classifier needs two or more to tell apart; "
                        "give data.source a folder with one sub-folder per class")


def loader_workers(cfg: DataConfig, device_type: str, local_processes: int) -> dict[str, Any]:
    """The DataLoader's worker settings: how many, pinned memory, how far ahead each loads."""
    if cfg.decode == "gpu":  # decoded in the main process, straight into GPU memory: nothing to hand over or pin
        workers, pin_memory = 0, False
    else:
        workers = default_num_workers(device_type, local_processes) if cfg.num_workers is None else cfg.num_workers
        pin_memory = device_type == "cuda" if cfg.pin_memory is None else cfg.pin_memory
    return dict(num_workers=workers, pin_memory=pin_memory, prefetch_factor=cfg.prefetch_factor if workers else None,
                worker_init_fn=leave_the_process_group)


def build_loader(
    dataset: Dataset,
    batch_size: int,
    cfg: DataConfig,
    train: bool,
    device_type: str = "cpu",
    local_processes: int = 1,
) -> DataLoader:
    """One pass over the data. Training: shuffled, whole batches only (every step sees as many images); a training
    run reads ``mpp.data.training_batches``' instead. Evaluation: in order, all images."""
    streaming = isinstance(dataset, StreamingImageDataset)
    return DataLoader(dataset, batch_size=batch_size, shuffle=train and not streaming, drop_last=train,
                      collate_fn=None if streaming else keep_batch, **loader_workers(cfg, device_type, local_processes))


def prepare_loader(accelerator: Accelerator, loader: DataLoader) -> DataLoader:
    """Hand an evaluation loader to accelerate: with several processes, each gets distinct batches. A stream holds
    this process's share only already (``build_dataset``), so it is just moved to the device."""
    if isinstance(loader.dataset, StreamingImageDataset):
        return move_to_device(accelerator, loader)
    prepared = accelerator.prepare(loader)
    # accelerate checkpoints nothing of a map-style loader (a sampler's state only for a sharded stream): a run's
    # position is its step and its order the seed. So it need not keep the loader for save_state, where on XLA it
    # would fail: accelerate 1.15's checkpointing reads a `dataset` its own XLA loader wrapper does not have.
    forget_prepared_loader(accelerator, prepared)
    return prepared


def move_to_device(accelerator: Accelerator, loader: DataLoader) -> DataLoader:
    """A loader of this process's share of the data, prepared by accelerate only to put its batches on the device."""
    return prepare_data_loader(loader, device=accelerator.device, num_processes=1, process_index=0,
                               put_on_device=True, dispatch_batches=False,
                               non_blocking=accelerator.dataloader_config.non_blocking)
