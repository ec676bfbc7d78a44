"""Datasets of model inputs: a source's images through a view, as whole batches of (images, labels, random_keys).

``ImageDataset`` (map-style) returns a whole batch from ``__getitems__`` (torch's DataLoader calls it with a batch's
indices); pair it with ``collate_fn=keep_batch``. In-memory sources are gathered and resampled in a few tensor
operations, into float views in [0, 1]; files are decoded one by one, into uint8 views, and one that cannot be
decoded is replaced by the next image of the dataset, recorded, and counted against ``max_bad_fraction``. (A
Hugging Face stream: ``hugging_face.py``.)
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Protocol, Sequence, Union, runtime_checkable

import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision.io import decode_jpeg

from mpp.data.decode_cache import DecodeCache
from mpp.data.image_source import (
    READ_MODES,
    UNDECODABLE_KINDS,
    BatchSource,
    FileSource,
    ImageSource,
    ReducedImage,
    UndecodableImage,
    decode,
    jpeg_data,
    open_image,
)
from mpp.data.transforms import ImageView, image_sizes, match_channels, mirrored, resized_crops
from mpp.errors import DataError
from mpp.images import Key, KeyedDraws, keys_of

JPEG_END = b"\xff\xd9"  # a JPEG file's last marker (EOI)
EpochPosition = tuple[int, int]  # (epoch, position in the dataset), as a training run samples them
Split = Literal["train", "holdout", "test"]  # "holdout": data.holdout_fraction of the training split, seeded


def epochs_and_positions(positions: Sequence[Union[int, EpochPosition]]) -> tuple[torch.Tensor, list[int]]:
    """(b) epochs and the b positions of a batch's positions: ``(epoch, position)`` pairs, as a training run samples
    them (``mpp.data.training_batches``), or plain positions, read as epoch 0 (evaluation, sampling)."""
    if positions and isinstance(positions[0], tuple):
        epochs, plain = zip(*positions, strict=True)
        return torch.tensor(epochs, dtype=torch.long), list(plain)
    return torch.zeros(len(positions), dtype=torch.long), list(positions)


def keep_batch(batch: Any) -> Any:
    """The DataLoader's ``collate_fn`` for datasets whose ``__getitems__`` already returns a whole batch."""
    return batch


def too_many_failures(failed: int, total: int, max_fraction: float, description: str, example: str) -> DataError:
    return DataError(
        f"{failed} of {total} images of {description} could not be decoded (e.g. {example}), more than "
        f"data.max_bad_fraction={max_fraction}; repair or remove the broken files, or raise data.max_bad_fraction"
    )


@runtime_checkable
class SkipsUndecodableImages(Protocol):
    """A dataset that skips the images it cannot decode (up to ``data.max_bad_fraction``) and reports them: how many
    this process skipped, the names of those it can name, and each one's name ("" where it has none) and why (a kind
    of ``mpp.data.image_source.WHY_UNDECODABLE``)."""

    def skipped_count(self) -> int: ...

    def undecodable_files(self) -> list[str]: ...

    def skipped(self) -> list[tuple[str, str]]: ...


class ImageDataset(Dataset):
    """(images, labels, random_keys) batches: (b c s s) images with ``channels`` channels, float in [0, 1] (in-memory
    sources) or uint8 (files), which the models take alike; (b) int64 labels; (b) int64 random keys, each image's
    ``keys_of(seed, epoch, index)``. Its view was drawn from its key, and a model that draws per image (MPP's
    corruption) draws from it too: each draw is the image's own, whichever process, pass or resumed run reads it.
    The epoch comes with each sampled position (``__getitems__``), so loader workers need not be told of a new one."""

    def __init__(
        self,
        source: ImageSource,
        view: ImageView,
        channels: int,
        indices: Optional[torch.Tensor] = None,
        seed: int = 0,
        max_bad_fraction: float = 0.0,
        decode_device: Optional[str] = None,
        decode_cache: bool = False,
    ):
        self.source, self.view, self.channels, self.decode_device = source, view, channels, decode_device
        # Files kept decoded at the size this view needs (data.decode_cache), where the source's images are files
        self.decode_cache = DecodeCache(view.detail_short_side(), source.mode) if decode_cache else None
        self.indices = torch.arange(len(source)) if indices is None else indices
        if len(self.indices) == 0:
            raise DataError(f"{source.description}: the selection holds no images")
        self.seed, self.max_bad_fraction = seed, max_bad_fraction
        # Per source image, why it was skipped (0: it was not; k: UNDECODABLE_KINDS[k - 1]), in shared memory: loader
        # workers (other processes) set them, the trainer reads.
        self.undecodable = torch.zeros(len(source) if isinstance(source, FileSource) else 0, dtype=torch.uint8)
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

    @property
    def class_names(self) -> tuple[str, ...]:
        return self.source.class_names

    def subset(self, positions: torch.Tensor, view: Optional[ImageView] = None) -> ImageDataset:
        """The images at ``positions`` of this dataset, through ``view`` (default: this dataset's)."""
        return ImageDataset(self.source, view or self.view, self.channels, self.indices[positions], self.seed,
                            self.max_bad_fraction, self.decode_device, self.decode_cache is not None)

    def keys_for(self, index: torch.Tensor, epoch: Key = 0) -> torch.Tensor:
        """The (b) keys of the images at these (b) source indices in ``epoch`` (one, or (b)): views are drawn from
        (seed, epoch, index), so each epoch augments afresh, reproducibly."""
        return keys_of(self.seed, epoch, index)

    def draws_for(self, index: torch.Tensor, epoch: Key = 0) -> KeyedDraws:
        """The draws of the views of the images at these (b) source indices: each image's, whatever its batch."""
        return KeyedDraws(self.keys_for(index, epoch))

    def __len__(self) -> int:
        return len(self.indices)

    def __getitems__(self, positions: Sequence[Union[int, EpochPosition]]
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The batch at ``positions``: ``(epoch, position)`` pairs, or plain positions (epoch 0)."""
        epochs, positions = epochs_and_positions(positions)
        index = self.indices[torch.as_tensor(positions, dtype=torch.long)]
        if isinstance(self.source, BatchSource):
            images = self.view(self.source.images(index), self.draws_for(index, epochs))
        elif self.decode_device:
            images, index = self.views_decoded_on(self.decode_device, positions, epochs)
        else:
            images, index = self.views_of_files(positions, epochs)
        keys = self.keys_for(index, epochs)
        return self.view.augmented(match_channels(images, self.channels), keys), self.source.labels[index], keys

    def __getitem__(self, position: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return tuple(part[0] for part in self.__getitems__([position]))

    def views_of_files(self, positions: list[int], epochs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Files of any size: opened (headers only), boxes drawn for the batch (the (b) ``epochs``), then each decoded
        for its box and resampled. A file that fails is replaced by the next one that does not, with a box drawn for
        it. Returns the views and the (b) source indices of the images they show."""
        opened = [self.open(position) for position in positions]
        boxes, flips = self.view.draw(*image_sizes([image for _, _, _, image in opened]),
                                      self.opened_draws(opened, epochs))
        views, shown = [], []
        for (position, index, file, image), box, epoch in zip(opened, boxes.tolist(), epochs.tolist(), strict=True):
            while True:
                try:
                    views.append(self.view.resized_crop_of_file(file, image, box, self.source.mode))
                    break
                except UndecodableImage as error:  # its header read, its pixels broken
                    self.record_failure(index, error)
                    position, index, file, image = self.open(position + 1)
                    draws = self.draws_for(torch.tensor([index]), epoch)
                    box = self.view.draw(*image_sizes([image]), draws)[0][0].tolist()
            shown.append(index)
        return self.view.batch_of(views, flips), torch.tensor(shown)

    def views_decoded_on(self, device: str, positions: list[int], epochs: torch.Tensor):
        """JPEG files decoded on ``device`` as one batch (nvJPEG on a GPU), each view cut and resized there, with
        the boxes ``views_of_files`` would draw. A batch holding a file nvJPEG cannot decode (broken, or not a JPEG)
        is loaded by ``views_of_files`` instead, which skips what PIL cannot decode either. Returns what
        ``views_of_files`` does."""
        opened = [self.open(position) for position in positions]
        boxes, flips = self.view.draw(*image_sizes([image for _, _, _, image in opened]),
                                      self.opened_draws(opened, epochs))
        files = [file for _, _, file, _ in opened]
        try:
            if not all(file.rstrip(b"\0\r\n ").endswith(JPEG_END) for file in files):
                raise RuntimeError("a file cut short, or not a JPEG")  # libjpeg would fill a cut file in with grey
            decoded = decode_jpeg([jpeg_data(file) for file in files], mode=READ_MODES[self.source.mode],
                                  device=device)
        except RuntimeError:
            images, shown = self.views_of_files(positions, epochs)
            return images.to(device), shown
        boxes = boxes.to(device)
        views = torch.cat([resized_crops(image[None], boxes[i:i + 1], self.view.size)
                           for i, image in enumerate(decoded)])
        views = (views * 255).round_().to(torch.uint8)  # uint8, as the CPU path's views of files
        shown = torch.tensor([index for _, index, _, _ in opened])
        return mirrored(views, None if flips is None else flips.to(device)), shown

    def opened_draws(self, opened: list[tuple[int, int, bytes, Image.Image]], epochs: torch.Tensor) -> KeyedDraws:
        """The draws of the views of ``open``'s results (those of the images opened, where one stood in)."""
        return self.draws_for(torch.tensor([index for _, index, _, _ in opened]), epochs)

    def open(self, position: int) -> tuple[int, int, bytes, Union[Image.Image, ReducedImage]]:
        """(position, source index, file, the file opened) of the image at ``position`` or, where it cannot be read
        or opened, of the next one that can. With a decode cache, a file larger than the view needs comes decoded
        (``ReducedImage``, its file unread: b""), from the cache or, the first time, decoded and kept there."""
        for offset in range(len(self)):
            at = (position + offset) % len(self)
            index = int(self.indices[at])
            path = self.source.path(index) if self.decode_cache is not None else None
            try:
                kept = self.decode_cache.read(path) if path is not None else None
                if kept is not None:
                    return at, index, b"", kept
                file = self.source.encoded(index)
                image = open_image(file)
                kept = self.decode_cache.keep(path, image) if path is not None else None
                return at, index, file, image if kept is None else kept
            except UndecodableImage as error:
                self.record_failure(index, error)
        raise AssertionError("unreachable: record_failure raises once every image has failed")

    def record_failure(self, index: int, error: UndecodableImage) -> None:
        self.undecodable[index] = UNDECODABLE_KINDS.index(error.kind) + 1
        failed = int(self.undecodable.count_nonzero())
        if failed > self.max_bad_fraction * len(self) or failed >= len(self):
            raise too_many_failures(failed, len(self), self.max_bad_fraction, self.source.description,
                                    f"{self.source.name(index)}: {error}") from None

    def undecodable_now(self) -> list[str]:
        """Every selected file decoded whole, once: "name: why" of each that fails (none for in-memory sources). For
        a dataset too small to train on, to say first what is wrong with its data."""
        if not isinstance(self.source, FileSource):
            return []
        failed = []
        for index in self.indices.tolist():
            try:
                decode(open_image(self.source.encoded(index)), self.source.mode)
            except UndecodableImage as error:
                failed.append(f"{self.source.name(index)}: {error}")
        return failed

    def skipped_count(self) -> int:
        return int(self.undecodable.count_nonzero())

    def undecodable_files(self) -> list[str]:
        return [name for name, _ in self.skipped()]

    def skipped(self) -> list[tuple[str, str]]:
        return skipped_of(self.source, self.undecodable)


def skipped_of(source: ImageSource, codes: torch.Tensor) -> list[tuple[str, str]]:
    """(name, kind) of each image of ``source`` that ``codes`` (an ``ImageDataset``'s record) says was skipped."""
    return [(source.name(index), UNDECODABLE_KINDS[int(codes[index]) - 1]) for index in codes.nonzero()[:, 0].tolist()]
