"""Datasets of model inputs: a source's images through a view, as whole batches of (images, labels).

``ImageDataset`` (map-style) returns a whole batch from ``__getitems__`` (torch's DataLoader calls it with a batch's
indices); pair it with ``collate_fn=keep_batch``. In-memory sources are gathered and resampled in a few tensor
operations; files are decoded one by one, and one that cannot be decoded is replaced by the next image of the
dataset, recorded, and counted against ``max_bad_fraction``. (A Hugging Face stream: ``hugging_face.py``.)
"""

from __future__ import annotations

from typing import Any, Literal, Optional

import torch
from PIL import Image
from torch.utils.data import Dataset

from mpp.config import DataError
from mpp.data.image_source import BatchSource, FileSource, ImageSource, UndecodableImage
from mpp.data.transforms import ImageView, match_channels

Split = Literal["train", "holdout", "test"]  # "holdout": data.holdout_fraction of the training split, seeded


def keep_batch(batch: Any) -> Any:
    """The DataLoader's ``collate_fn`` for datasets whose ``__getitems__`` already returns a whole batch."""
    return batch


def seeded_generator(*key: Any) -> torch.Generator:
    # hash() of a tuple of ints is the same in every process and run (no string hashing involved).
    return torch.Generator().manual_seed(hash(key) % 2**63)


def too_many_failures(failed: int, total: int, max_fraction: float, description: str, example: str) -> DataError:
    return DataError(
        f"{failed} of {total} images of {description} could not be decoded (e.g. {example}), more than "
        f"data.max_bad_fraction={max_fraction}; repair or remove the broken files, or raise data.max_bad_fraction"
    )


class ImageDataset(Dataset):
    """(images, labels) batches: (b c s s) float in [0, 1] with ``channels`` channels, (b) int64 labels."""

    def __init__(
        self,
        source: ImageSource,
        view: ImageView,
        channels: int,
        indices: Optional[torch.Tensor] = None,
        seed: int = 0,
        max_bad_fraction: float = 0.0,
    ):
        self.source, self.view, self.channels = source, view, channels
        self.indices = torch.arange(len(source)) if indices is None else indices
        if len(self.indices) == 0:
            raise DataError(f"{source.description}: the selection holds no images")
        self.seed, self.epoch, self.max_bad_fraction = seed, 0, max_bad_fraction
        # One flag per source image, in shared memory: loader workers (other processes) set them, the trainer reads.
        self.undecodable = torch.zeros(len(source) if isinstance(source, FileSource) else 0, dtype=torch.bool)
        self.undecodable.share_memory_()

    @property
    def description(self) -> str:
        return f"{self.source.description}; {len(self)} selected; {self.view.description}"

    @property
    def labels(self) -> torch.Tensor:
        return self.source.labels[self.indices]

    @property
    def num_classes(self) -> int:
        return self.source.num_classes

    def subset(self, positions: torch.Tensor, view: Optional[ImageView] = None) -> ImageDataset:
        """The images at ``positions`` of this dataset, through ``view`` (default: this dataset's)."""
        return ImageDataset(self.source, view or self.view, self.channels, self.indices[positions], self.seed,
                            self.max_bad_fraction)

    def set_epoch(self, epoch: int) -> None:
        """Views are drawn from (seed, epoch, indices): each epoch augments afresh, reproducibly."""
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.indices)

    def __getitems__(self, positions: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        index = self.indices[torch.as_tensor(positions, dtype=torch.long)]
        generator = seeded_generator(self.seed, self.epoch, *index.tolist())
        if isinstance(self.source, BatchSource):
            images = self.view(self.source.images(index), generator)
            labels = self.source.labels[index]
        else:  # files of any size: decoded and resampled one at a time
            decoded = [self.read(position) for position in positions]
            images = self.view.of_pil_images([image for image, _ in decoded], generator)
            labels = torch.tensor([label for _, label in decoded])
        return match_channels(images, self.channels), labels

    def __getitem__(self, position: int) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels = self.__getitems__([position])
        return images[0], labels[0]

    def read(self, position: int) -> tuple[Image.Image, int]:
        """The image at ``position`` or, where it cannot be decoded, the next one that can; with its label."""
        for offset in range(len(self)):
            index = int(self.indices[(position + offset) % len(self)])
            try:
                return self.source.read(index), int(self.source.labels[index])
            except UndecodableImage as error:
                self.undecodable[index] = True
                failed = int(self.undecodable.sum())
                if failed > self.max_bad_fraction * len(self):
                    raise too_many_failures(failed, len(self), self.max_bad_fraction, self.source.description,
                                            f"{self.source.name(index)}: {error}") from None
        raise AssertionError("unreachable: the loop raises once every image has failed")

    def skipped_count(self) -> int:
        return int(self.undecodable.sum())

    def undecodable_files(self) -> list[str]:
        return [self.source.name(int(index)) for index in self.undecodable.nonzero()[:, 0]]
