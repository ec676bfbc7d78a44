"""From ``data.source`` to batches: the reader of each source kind, a split of the data as a dataset of model inputs
(its seeded slices included), the loader of one pass over it (evaluation), and a training run's batches, the one thing
the training loop reads from the data. Images come out as float (b c h w) in [0, 1] or uint8, unnormalised: MPP targets
come from the raw pixels of the augmented image, the model normalises its input.

The readers: ``mpp.config.data.SOURCE_KINDS`` declares what ``data.source`` may say (each kind, whether it takes a
location, its usage line); ``READERS`` here opens each. A new format is a module with its reader, one line in each of
the two. The seeded slices of a training set: a hold-out part for tuning (the paper tunes on 1-10% of the training set,
App. B.1.1) and k examples per class (few-shot evaluation and low-label fine-tuning).

``training_batches`` builds the run's loader, hands it to accelerate and returns an endless iterator of (images,
labels, random_keys) batches on the device, from the step the run starts at: the batches a run that never stopped
would read from that step on. The loop consumes it and never sees a sampler or a dataset; the iterator also reports
the images the data skipped. In the order a run meets them in the module's last part: the batch plan (how a global
batch splits over processes and accumulation steps), the check that the data holds one, the order of the images, the
loader, the iterator.

The order of map-style data: one loader iterator serves the whole run (``EndlessEpochBatches``), so its workers start
once and load the next epoch's first batches while the last ones of the epoch train, where a loader started afresh
each epoch would drain its pipeline and start its workers again at every epoch's end (every few seconds on a folder of
10,000 images). The views depend on the epoch (``mpp.data.image_dataset``), so every sampled position carries its
epoch to the workers: ``(epoch, position)``. The order is the one accelerate gives a shuffled loader with a seedable
sampler (``use_seedable_sampler``, as the session makes it): the positions of epoch e shuffled by a generator seeded
with ``seed + e``, cut into whole batches, and the batches dealt out to the processes in turn. It is built from
accelerate's own samplers, so that the two cannot drift apart (a test compares them over several epochs). An epoch
ends after its last whole optimizer step (``steps_per_epoch``): the few images left over, fewer than one global
batch, wait for the next epoch's shuffle. A resumed run draws the positions of the batches it skips without loading
them.

A stream (``data.streaming=true``) has no positions to draw: its shuffle and views are set per epoch in the main
process, so it is read by one loader iterator a pass (its workers start again at every epoch), and a resumed run reads
and decodes the batches it skips.
"""

from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal, Optional, Sequence

import torch
from accelerate import Accelerator
from accelerate.data_loader import prepare_data_loader
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler

from mpp.config.data import DataConfig, parse_source
from mpp.config.training import TrainConfig
from mpp.data.augmentation import ImageAugmentation
from mpp.data.cifar import cifar_source
from mpp.data.fashion_mnist import fashion_mnist_source
from mpp.data.hugging_face import HuggingFaceSource, StreamingImageDataset, build_stream
from mpp.data.image_dataset import EpochPosition, ImageDataset, SkipsUndecodableImages, Split, image_view, keep_batch
from mpp.data.image_folder import ImageFolderSource
from mpp.data.image_source import FileSource, ImageSource, skip_summary
from mpp.data.openclipart import openclipart_pool_source, openclipart_source
from mpp.data.shapes import ShapesSource
from mpp.errors import ConfigError, DataError
from mpp.private_apis import forget_prepared_loader, process_share_of_batches, seedable_shuffle
from mpp.run import local_processes

# what study/, tools/ and users may import from here
__all__ = [
    "build_dataset", "sample_images", "check_batch_fits", "steps_per_epoch",
]

logger = logging.getLogger(__name__)

# The readers: every data.source kind, and the stored split it opens.
StoredSplit = Literal["train", "test"]


def image_folder_split(location: str, cfg: DataConfig, split: StoredSplit) -> ImageFolderSource:
    """The training folder, or the evaluation folder (``data.eval_folder``) with the training folder's classes."""
    if split == "train":
        return ImageFolderSource(location)
    if not cfg.eval_folder:
        raise DataError(f"data.source={cfg.source} has no evaluation split: set data.eval_folder=<dir> to a folder "
                        "with the same class sub-folders, or hold out part of the training folder with "
                        "data.holdout_fraction")
    return ImageFolderSource(cfg.eval_folder, classes_from=location)


# kind -> reader(location, data config, split, image size): the stored split, untransformed.
READERS: dict[str, Callable[[str, DataConfig, StoredSplit, int], ImageSource]] = {
    "shapes": lambda location, cfg, split, size: ShapesSource(split, size),  # rendered at the model's resolution
    "fashion-mnist": lambda location, cfg, split, size: fashion_mnist_source(location, split),
    "openclipart": lambda location, cfg, split, size: openclipart_source(location, split, size, cfg.split_seed),
    "openclipart-pool": lambda location, cfg, split, size: openclipart_pool_source(location, split, size,
                                                                                   cfg.split_seed),
    "cifar10": lambda location, cfg, split, size: cifar_source("cifar10", location, split),
    "cifar100": lambda location, cfg, split, size: cifar_source("cifar100", location, split),
    "folder": lambda location, cfg, split, size: image_folder_split(location, cfg, split),
    "hf": lambda location, cfg, split, size: HuggingFaceSource(location, cfg, cfg.train_split if split == "train"
                                                               else cfg.eval_split),
}


def open_source(cfg: DataConfig, split: StoredSplit, image_size: int) -> ImageSource:
    """The stored split ``split`` of ``cfg.source``, untransformed."""
    kind, location = parse_source(cfg.source)
    return READERS[kind](location, cfg, split, image_size)


# Seeded slices of a training set: the hold-out part (App. B.1.1) and k shots per class.
def holdout_split(size: int, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices 0..size-1 split at random into (kept, held out), ``fraction`` of them held out; both sorted."""
    order = torch.randperm(size, generator=torch.Generator().manual_seed(seed))
    held_out = round(size * fraction)
    if fraction > 0 and not 0 < held_out < size:
        raise DataError(f"holding out {fraction} of {size} images leaves one side empty; choose a fraction "
                        f"between {1 / size:.2g} and {1 - 1 / size:.4g}")
    return order[held_out:].sort().values, order[:held_out].sort().values


def class_label(label: int, class_names: Sequence[str]) -> str:
    """``class 3 (jackets)``: a class as the user knows it (its folder or label name) and as the data numbers it."""
    return f"class {label} ({class_names[label]})" if label < len(class_names) else f"class {label}"


def shots_per_class(labels: torch.Tensor, shots: int, seed: int, asked_by: str = "data.shots_per_class",
                    class_names: Sequence[str] = (), settable: bool = True) -> torch.Tensor:
    """Positions of ``shots`` randomly chosen examples of every class in ``labels``; sorted. ``asked_by`` names the
    setting that asks for them and ``class_names`` the classes, for the error when there are too few; where
    ``settable``, the error says the value of ``asked_by`` that fits the data."""
    if (labels < 0).any():
        raise DataError(f"{asked_by} needs labels, and this data has unlabelled images")
    counts = torch.bincount(labels)
    short = [(label, int(count)) for label, count in enumerate(counts.tolist()) if 0 < count < shots]
    if short:
        fewest = min(count for _, count in short)
        raise DataError(f"{asked_by} needs {shots} examples of every class, but classes have fewer: "
                        + ", ".join(f"{class_label(label, class_names)}: {count}" for label, count in short[:10])
                        + (f"; set {asked_by}={fewest} (or fewer) to fit them all" if settable else ""))
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    by_class = torch.sort(labels[order], stable=True)
    first_of_class = torch.cumsum(counts, 0) - counts
    rank_in_class = torch.arange(len(labels)) - first_of_class[by_class.values]  # 0, 1, ... within each class
    return order[by_class.indices[rank_in_class < shots]].sort().values


def disjoint_per_class(labels: torch.Tensor, counts: list[int], seed: int, asked_by: str,
                       class_names: Sequence[str] = ()) -> list[torch.Tensor]:
    """Positions in ``labels`` of disjoint random slices, ``counts[i]`` examples of every class in slice i (e.g.
    shots, a hold-out slice to tune on, test images); each sorted."""
    rest, slices = torch.arange(len(labels)), []
    for count in counts:
        chosen = shots_per_class(labels[rest], count, seed, f"{asked_by} (with {sum(counts)} per class in all)",
                                 class_names, settable=False)
        slices.append(rest[chosen])
        keep = torch.ones(len(rest), dtype=torch.bool)
        keep[chosen] = False
        rest = rest[keep]
    return slices


# A split as a dataset, and the loader of one pass over it (evaluation).
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
    run reads ``training_batches``' instead. Evaluation: in order, all images."""
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


# A training run's batches: the plan, the check, the epoch order, the loader, the iterator the loop reads.
@dataclass(frozen=True)
class BatchPlan:
    """How one optimizer step's global batch splits over processes and accumulation steps: made once per run
    (``plan_batches``), read by the loop, the loader and the batch order alike."""

    global_batch_size: int
    micro_batch_size: int  # per process, per forward pass
    num_processes: int
    accumulation_steps: int


def plan_batches(cfg: TrainConfig, num_processes: int) -> BatchPlan:
    micro = cfg.micro_batch_size or cfg.global_batch_size // num_processes
    per_pass = micro * num_processes
    if micro < 1 or cfg.global_batch_size % per_pass:
        raise ConfigError(
            f"train.global_batch_size={cfg.global_batch_size} is not a whole number of passes of "
            f"train.micro_batch_size={micro} on each of {num_processes} processes; make the global batch a "
            f"multiple of micro_batch_size x processes"
        )
    return BatchPlan(cfg.global_batch_size, micro, num_processes, cfg.global_batch_size // per_pass)


def steps_per_epoch(images: int, global_batch_size: int) -> int:
    """Optimizer steps in one epoch of ``images`` training images: whole global batches only. The one definition of
    an epoch, read by the batch order, the schedule in epochs, the plan line and the experiments."""
    return images // global_batch_size


def check_batch_fits(dataset: Dataset, batch_size: int, described: str = "the training set") -> None:
    """Raises a DataError where a map-style training set (``described`` so in the message) holds less than one
    global batch: an epoch of it would hold no step. Saying first what is wrong with its files where none can be
    decoded. The one check of it, made before a run writes anything (the Trainer, a sweep's split); the loaders take
    what it let through."""
    if isinstance(dataset, StreamingImageDataset) or steps_per_epoch(len(dataset), batch_size):
        return
    failed = dataset.undecodable_now() if isinstance(dataset, ImageDataset) else []
    if failed and len(failed) == len(dataset):  # what is wrong with the data first: no batch size helps
        raise DataError(f"none of the {len(dataset)} images of {dataset.source.description} can be decoded "
                        f"(e.g. {'; '.join(failed[:3])}); check that data.source points at image files")
    raise DataError(
        f"{described} has {len(dataset):,} images"
        + (f" ({len(failed)} of them cannot be decoded, e.g. {failed[0]})" if failed else "")
        + f", fewer than one global batch of {batch_size:,}, so no step can be made of them; set "
        f"train.global_batch_size to {len(dataset):,} or less (a multiple of train.micro_batch_size x processes)"
    )


class EndlessEpochBatches(Sampler[list[EpochPosition]]):
    """This process's (``process_index``'s) batches of ``plan.micro_batch_size`` positions of a dataset of ``size``
    images, each position paired with its epoch, epoch after epoch; from batch ``start`` of the run on (a resumed run
    reads what it would have). An epoch is its ``steps_per_epoch`` optimizer steps of ``plan.global_batch_size``, at
    least one (``check_batch_fits`` refuses data smaller than that)."""

    def __init__(self, size: int, plan: BatchPlan, seed: int, process_index: int = 0, start: int = 0) -> None:
        self.shuffled = seedable_shuffle(size, seed)
        batches = BatchSampler(self.shuffled, plan.micro_batch_size, drop_last=True)
        self.batches = (process_share_of_batches(batches, plan.num_processes, process_index)
                        if plan.num_processes > 1 else batches)
        self.start = start
        # Processes take the shuffled batches in turn, so each process's first ones make the epoch's whole steps.
        self.batches_per_epoch = plan.accumulation_steps * steps_per_epoch(size, plan.global_batch_size)

    def __iter__(self) -> Iterator[list[EpochPosition]]:
        epoch, skip = divmod(self.start, self.batches_per_epoch)
        while True:
            self.shuffled.set_epoch(epoch)  # only positions are drawn: skipping a resumed epoch's batches is cheap
            for batch in itertools.islice(self.batches, skip, self.batches_per_epoch):
                yield [(epoch, position) for position in batch]
            epoch, skip = epoch + 1, 0


def build_training_loader(
    dataset: Dataset,
    plan: BatchPlan,
    cfg: DataConfig,
    seed: int,
    process_index: int = 0,
    device_type: str = "cpu",
    local_processes: int = 1,
    start: int = 0,
) -> DataLoader:
    """A training run's loader of this process's share of ``plan``'s batches, from pass ``start`` of the run
    (``plan.accumulation_steps`` passes an optimizer step): for map-style data, its batches epoch after epoch without
    end (``EndlessEpochBatches``), read by one iterator whose workers live for the whole run; a stream is read one
    epoch a pass (``build_loader``)."""
    if isinstance(dataset, StreamingImageDataset):
        return build_loader(dataset, plan.micro_batch_size, cfg, train=True, device_type=device_type,
                            local_processes=local_processes)
    order = EndlessEpochBatches(len(dataset), plan, seed, process_index, start)
    return DataLoader(dataset, batch_sampler=order, collate_fn=keep_batch,
                      **loader_workers(cfg, device_type, local_processes))


class TrainingBatches:
    """This process's batches of a training run, epoch after epoch without end, from pass ``start`` of the run (one
    optimizer step is ``accumulation_steps`` passes), read as ``data`` says; ``close`` ends the loader's workers."""

    def __init__(self, accelerator: Accelerator, dataset: Dataset, loader: DataLoader, start: int,
                 data: Optional[DataConfig] = None, workers: int = 0) -> None:
        # workers: the loader's worker processes, read before accelerate's prepare wraps it (an XLA device loader
        # has no num_workers)
        self.accelerator, self.dataset, self.data, self.workers = accelerator, dataset, data, workers
        self.batches = self.endless(loader, start)

    def endless(self, loader: DataLoader, start: int) -> Iterator[Any]:
        while not isinstance(self.dataset, StreamingImageDataset):
            yield from loader  # a run's is endless already, from its sampler's start; any other is read again
        epoch, skip = 0, start
        while True:
            self.dataset.set_epoch(epoch)  # the stream's shuffle and its views are functions of (seed, epoch)
            batches = iter(loader)
            skip -= sum(1 for _ in itertools.islice(batches, skip))
            yield from batches
            epoch += 1

    def __iter__(self) -> TrainingBatches:
        return self

    def __next__(self) -> Any:
        return next(self.batches)

    def close(self) -> None:
        self.batches.close()

    def loading_advice(self) -> str:
        """What would load this run's images faster, for a loop that waits for them: files decoded once (prepared,
        or a folder's decode cache), then more loader workers."""
        advice = []
        if self.data is not None and isinstance(self.dataset, ImageDataset) and isinstance(self.dataset.source,
                                                                                           FileSource):
            advice.append(f"prepare the images once, resized (`python -m mpp.data.prepare {self.data.source} <out dir>"
                          "`, then data.source=hf:<out dir>)")
            if parse_source(self.data.source)[0] == "folder" and not self.data.decode_cache:
                advice.append("keep them decoded between epochs, at the size the views need (data.decode_cache=true)")
        advice.append(f"load in more worker processes (data.num_workers, {self.workers} now) where cores are free")
        return "; or ".join(advice)

    def skipped_images(self) -> int:
        """Images that could not be decoded and were skipped, over all processes; logged with why, and a few of their
        names. Every process calls it (a reduction)."""
        return report_skipped(self.accelerator, self.dataset, "training images")


def training_batches(accelerator: Accelerator, dataset: Dataset, plan: BatchPlan, cfg: DataConfig, seed: int,
                     start_step: int = 0) -> TrainingBatches:
    """The batches of ``plan.micro_batch_size`` images a run reads from optimizer step ``start_step`` on, on this
    process (its share of every step), on the device."""
    start = start_step * plan.accumulation_steps
    loader = build_training_loader(dataset, plan, cfg, seed, accelerator.process_index, accelerator.device.type,
                                   local_processes(accelerator), start)
    return TrainingBatches(accelerator, dataset, move_to_device(accelerator, loader), start, cfg, loader.num_workers)
