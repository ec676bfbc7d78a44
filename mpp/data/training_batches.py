"""A training run's batches: the one thing the training loop reads from the data.

``training_batches`` builds the run's loader, hands it to accelerate and returns an endless iterator of (images,
labels, random_keys) batches on the device, from the step the run starts at: the batches a run that never stopped
would read from that step on. The loop consumes it and never sees a sampler or a dataset; the iterator also reports
the images the data skipped. In the order a run meets them here: the batch plan (how a global batch splits over
processes and accumulation steps), the check that the data holds one, the order of the images, the loader, the
iterator.

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
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from accelerate import Accelerator
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler

from mpp.config.data import DataConfig, parse_source
from mpp.config.training import TrainConfig
from mpp.data.hugging_face import StreamingImageDataset
from mpp.data.image_dataset import EpochPosition, ImageDataset, keep_batch
from mpp.data.image_source import FileSource
from mpp.data.loading import build_loader, loader_workers, move_to_device, report_skipped
from mpp.errors import ConfigError, DataError
from mpp.private_apis import process_share_of_batches, seedable_shuffle
from mpp.run import local_processes

__all__ = ["check_batch_fits", "steps_per_epoch"]  # what study/, tools/ and users may import from here


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
