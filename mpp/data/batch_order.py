"""The order a training run reads its images in: this process's batches, epoch after epoch, without end.

One loader iterator then serves the whole run: its workers start once and load the next epoch's first batches
while the last ones of the epoch train, where a loader started afresh each epoch would drain its pipeline and start
its workers again at every epoch's end (every few seconds on a folder of 10,000 images). The views depend on the
epoch (``mpp.data.image_dataset``), so every sampled position carries its epoch to the workers: ``(epoch,
position)``.

The order is the one accelerate gives a shuffled loader with a seedable sampler (``use_seedable_sampler``, as the
session makes it): the positions of epoch e shuffled by a generator seeded with ``seed + e``, cut into whole batches,
and the batches dealt out to the processes in turn. It is built here from accelerate's own samplers, so that the
two cannot drift apart (a test compares them over several epochs). An epoch ends after its last whole optimizer
step (``steps_per_epoch``): the few images left over, fewer than one global batch, wait for the next epoch's shuffle.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterator

from torch.utils.data import BatchSampler, Sampler

from mpp.config.training import TrainConfig
from mpp.errors import ConfigError
from mpp.private_apis import process_share_of_batches, seedable_shuffle

__all__ = ["steps_per_epoch"]  # what study/, tools/ and users may import from here

EpochPosition = tuple[int, int]  # (epoch, position in the dataset)


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


class EndlessEpochBatches(Sampler[list[EpochPosition]]):
    """This process's (``process_index``'s) batches of ``plan.micro_batch_size`` positions of a dataset of ``size``
    images, each position paired with its epoch, epoch after epoch; from batch ``start`` of the run on (a resumed run
    reads what it would have). An epoch is its ``steps_per_epoch`` optimizer steps of ``plan.global_batch_size``, at
    least one (``mpp.data.loading.check_batch_fits`` refuses data smaller than that)."""

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
