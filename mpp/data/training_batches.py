"""A training run's batches from the step it starts at: the one thing the training loop reads from the data.

``training_batches`` builds the run's loader, hands it to accelerate and returns an endless iterator of (images,
labels, random_keys) batches on the device, the batches a run that never stopped would read from that step on. The loop
consumes it and never sees a sampler or a dataset; the iterator also reports the images the data skipped.

Map-style data is read by one loader iterator for the whole run (``mpp.data.batch_order``): its workers start once,
and a resumed run draws the positions of the batches it skips without loading them. A stream (``data.streaming=true``)
has no positions to draw: its shuffle and views are set per epoch in the main process, so it is read by one loader
iterator a pass (its workers start again at every epoch), and a resumed run reads and decodes the batches it skips.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator, Optional

from accelerate import Accelerator
from torch.utils.data import DataLoader, Dataset

from mpp.config.data import DataConfig, parse_source
from mpp.data.hugging_face import StreamingImageDataset
from mpp.data.image_dataset import ImageDataset
from mpp.data.batch_order import BatchPlan
from mpp.data.image_source import FileSource
from mpp.data.loading import build_training_loader, move_to_device, report_skipped
from mpp.run.session import local_processes


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
