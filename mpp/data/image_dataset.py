"""From a source's images to model inputs: the views (a crop box per image, resampled to size x size, maybe
mirrored), and datasets of them as whole batches of (images, labels, random_keys).

Pre-training uses a random resized ("Inception") crop and a horizontal flip, as the ViT paper's ImageNet recipes do;
evaluation uses resize + centre crop. Both are "a box per image, resampled": boxes for a whole batch are drawn in
a few tensor operations. Tensors (in-memory sources) are cut out and resized in one call to torchvision's
``roi_align``, which averages over each output pixel's footprint when shrinking (no aliasing) and interpolates
bilinearly when enlarging, into float views in [0, 1]; files, each of its own size, are decoded for their boxes and
resampled one by one, as antialiased bilinear, into uint8 views (the model scales either to [0, 1]).

Randomness comes from per-image draws (``mpp.images``), which the datasets key by (seed, epoch, index): a
sample's view is the same whichever worker, process or batch draws it, and a resumed run draws what an uninterrupted
one would.

``ImageDataset`` (map-style) returns a whole batch from ``__getitems__`` (torch's DataLoader calls it with a batch's
indices); pair it with ``collate_fn=keep_batch``. In-memory sources are gathered and resampled in a few tensor
operations; files are decoded one by one, and one that cannot be decoded is replaced by the next image of the dataset,
recorded, and counted against ``max_bad_fraction``. (A Hugging Face stream: ``hugging_face.py``.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Optional, Protocol, Sequence, Union, runtime_checkable

import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import Dataset
from torchvision.io import decode_jpeg
from torchvision.ops import roi_align

from mpp.config.data import DataConfig
from mpp.data.augmentation import ImageAugmentation
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
    pixels_for_crop,
)
from mpp.errors import DataError
from mpp.images import Key, KeyedDraws, keys_of, unit_interval

# Views: a crop box per image, resampled, maybe mirrored.
CROP_ATTEMPTS = 10  # candidate boxes per image before falling back to a centre crop (as torchvision's)


@dataclass(frozen=True)
class ImageView:
    """How an image becomes a ``size`` x ``size`` model input; ``augment`` picks the pre-training view."""

    size: int
    augment: bool
    crop_scale: tuple[float, float] = (0.08, 1.0)  # area of the random crop, as a fraction of the image's
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)  # aspect ratio (width / height) of the random crop
    hflip: float = 0.5  # probability of mirroring, when augmenting
    eval_crop_fraction: float = 1.0  # side of the evaluation view's centre square, as a fraction of the short side
    per_image: Optional[ImageAugmentation] = None  # a classifier's training view: what augment.* adds per image

    @property
    def description(self) -> str:
        added = f", then {self.per_image.description}" if self.per_image is not None else ""
        return f"{'augmented' if self.augment else 'resized'} to {self.size}x{self.size}{added}"

    def augmented(self, views: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """(b c s s) views and their (b) random keys -> what ``per_image`` makes of them (the views, where none)."""
        return views if self.per_image is None else self.per_image(views, keys)

    def detail_short_side(self) -> int:
        """The shorter side an image needs for every view of it to be cut from ``size`` pixels or more each way, so
        that no view is enlarged: evaluation's centre square is ``eval_crop_fraction`` of it; a random crop's
        narrower side is at least sqrt(smallest area x narrowest aspect) of it."""
        if not self.augment:
            return math.ceil(self.size / self.eval_crop_fraction - 1e-9)
        narrowest = min(math.sqrt(self.crop_ratio[0]), 1 / math.sqrt(self.crop_ratio[1]))
        return math.ceil(self.size / (math.sqrt(self.crop_scale[0]) * min(1.0, narrowest)) - 1e-9)

    def draw(self, heights: torch.Tensor, widths: torch.Tensor, draws: Optional[KeyedDraws] = None):
        """(b) image sizes -> (b 4) crop boxes and (b) flips (None when not augmenting, which draws nothing)."""
        if not self.augment:
            return centre_crop_boxes(heights, widths, self.eval_crop_fraction), None
        boxes = random_crop_boxes(heights, widths, self.crop_scale, self.crop_ratio, draws)
        return boxes, draws.uniform() < self.hflip

    def __call__(self, images: torch.Tensor, draws: Optional[KeyedDraws] = None) -> torch.Tensor:
        """(b c h w) images in [0, 1] (or uint8) -> (b c size size) float views in [0, 1]."""
        batch, _, height, width = images.shape
        boxes, flips = self.draw(torch.full((batch,), float(height)), torch.full((batch,), float(width)), draws)
        return resized_crops(images, boxes, self.size, flips)

    def of_files(self, files: list[bytes], draws: Optional[KeyedDraws] = None) -> torch.Tensor:
        """Encoded images of any sizes -> (b c size size) uint8 RGB views: boxes drawn for the whole batch from the
        files' headers, then each file decoded for its box and resampled (``resized_crop_of_file``)."""
        opened = [open_image(file) for file in files]
        boxes, flips = self.draw(*image_sizes(opened), draws)
        return self.batch_of([self.resized_crop_of_file(file, image, box, "RGB")
                              for file, image, box in zip(files, opened, boxes.tolist(), strict=True)], flips)

    def resized_crop_of_file(self, file: bytes, image: Image.Image, box: list[float], mode: str) -> torch.Tensor:
        """One file (and ``image``, the file opened) -> its ``box`` (x0 y0 x1 y1, in its pixels) as a (c size size)
        uint8 view: decoded at the coarsest scale the box allows (``pixels_for_crop``), cut and resampled."""
        pixels, box = pixels_for_crop(file, image, box, self.size, mode)
        return resized_crop_of_pixels(pixels, box, self.size)

    def batch_of(self, views: list[torch.Tensor], flips: Optional[torch.Tensor]) -> torch.Tensor:
        """(c size size) uint8 views -> (b c size size) uint8, mirrored where ``flips``. The batch stays uint8 (the
        model scales it to [0, 1] on its device): a quarter of a float batch's bytes to hand from a loader worker and
        to copy to the device, and no float pass on the CPU (what that saves: docs/measured.md)."""
        batch = torch.empty(len(views), *views[0].shape, dtype=torch.uint8)
        mirror = [False] * len(views) if flips is None else flips.tolist()
        for i, (view, flip) in enumerate(zip(views, mirror, strict=True)):
            batch[i] = view.flip(-1) if flip else view
        return batch


def resized_crop_of_pixels(pixels: torch.Tensor, box: list[float], size: int) -> torch.Tensor:
    """(c h w) uint8, a box (x0 y0 x1 y1) -> (c size size) uint8: the box rounded to whole pixels (torchvision's
    RandomResizedCrop cuts whole pixels too) and resampled bilinearly, averaging each output pixel's footprint when
    shrinking, as PIL's filter does. torch's uint8 kernel on channels-last pixels takes a quarter of PIL's time."""
    _, height, width = pixels.shape
    x0, y0 = min(round(box[0]), width - 1), min(round(box[1]), height - 1)
    x1, y1 = max(round(box[2]), x0 + 1), max(round(box[3]), y0 + 1)
    crop = pixels[None, :, y0:y1, x0:x1].contiguous(memory_format=torch.channels_last)
    return F.interpolate(crop, size=(size, size), mode="bilinear", antialias=True)[0]


def image_sizes(images: list[Image.Image]) -> tuple[torch.Tensor, torch.Tensor]:
    """(b) heights, (b) widths of images (opened files: from their headers)."""
    heights, widths = zip(*((float(image.height), float(image.width)) for image in images), strict=True)
    return torch.tensor(heights), torch.tensor(widths)


def random_crop_boxes(
    heights: torch.Tensor,
    widths: torch.Tensor,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    draws: KeyedDraws,
) -> torch.Tensor:
    """(b) image sizes -> (b 4) boxes (x0 y0 x1 y1, pixels) of random area and aspect ratio, inside each image.

    Every image gets ``CROP_ATTEMPTS`` candidates at once and keeps the first that fits; where none fits, the
    largest centred box of an allowed aspect ratio (torchvision's RandomResizedCrop rule).
    """
    area = heights * widths
    uniform = draws.uniform(2 * CROP_ATTEMPTS + 2)  # one call: (b 22), the areas, aspects and corners of all attempts
    target_area = area[:, None] * (scale[0] + (scale[1] - scale[0]) * uniform[:, :CROP_ATTEMPTS])
    log_ratio = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * uniform[:, CROP_ATTEMPTS:-2])
    crop_w = torch.sqrt(target_area * aspect)
    crop_h = torch.sqrt(target_area / aspect)
    fits = (crop_w <= widths[:, None]) & (crop_h <= heights[:, None])
    first = fits.float().argmax(dim=1, keepdim=True)  # the first fitting attempt (0 where none fits)
    crop_w, crop_h = crop_w.gather(1, first)[:, 0], crop_h.gather(1, first)[:, 0]
    x0 = uniform[:, -2] * (widths - crop_w)
    y0 = uniform[:, -1] * (heights - crop_h)
    boxes = torch.stack([x0, y0, x0 + crop_w, y0 + crop_h], dim=1)
    return torch.where(fits.any(dim=1)[:, None], boxes, fallback_boxes(heights, widths, ratio))


def fallback_boxes(heights: torch.Tensor, widths: torch.Tensor, ratio: tuple[float, float]) -> torch.Tensor:
    """The whole image, trimmed (centred) to the nearest allowed aspect ratio."""
    aspect = (widths / heights).clamp(ratio[0], ratio[1])
    crop_w = torch.minimum(widths, heights * aspect)
    crop_h = torch.minimum(heights, widths / aspect)
    return centred_boxes(heights, widths, crop_h, crop_w)


def centre_crop_boxes(heights: torch.Tensor, widths: torch.Tensor, fraction: float) -> torch.Tensor:
    """The centred square of side ``fraction`` x the short side: resize + centre crop, as one box."""
    side = torch.minimum(heights, widths) * fraction
    return centred_boxes(heights, widths, side, side)


def centred_boxes(heights: torch.Tensor, widths: torch.Tensor, crop_h: torch.Tensor, crop_w: torch.Tensor):
    x0, y0 = (widths - crop_w) / 2, (heights - crop_h) / 2
    return torch.stack([x0, y0, x0 + crop_w, y0 + crop_h], dim=1)


def resized_crops(
    images: torch.Tensor, boxes: torch.Tensor, size: int, flips: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """(b c h w) images, (b 4) boxes -> (b c size size) in [0, 1]; uint8 input is scaled to [0, 1] first."""
    images = unit_interval(images)
    image_of_box = torch.arange(len(boxes), dtype=boxes.dtype, device=boxes.device)  # the boxes' device: a GPU's
    rois = torch.cat([image_of_box[:, None], boxes], dim=1)  # (b 5): image, box
    # aligned=True: pixel i covers [i, i+1), so the box (0, 0, w, h) is exactly the whole image.
    views = roi_align(images, rois, output_size=size, spatial_scale=1.0, sampling_ratio=-1, aligned=True)
    return mirrored(views, flips).clamp_(0, 1)


def mirrored(views: torch.Tensor, flips: Optional[torch.Tensor]) -> torch.Tensor:
    """(b c h w) with the images where ``flips`` (b) is true mirrored left to right."""
    return views if flips is None else torch.where(flips[:, None, None, None], views.flip(-1), views)


LUMINANCE = (0.299, 0.587, 0.114)  # ITU-R BT.601, as PIL's convert("L")


def match_channels(images: torch.Tensor, channels: int) -> torch.Tensor:
    """(b c h w) -> (b channels h w), of the same dtype: grey is repeated into RGB, RGB becomes its luminance."""
    have = images.shape[1]
    if have == channels:
        return images
    if have == 1:
        return images.expand(-1, channels, -1, -1).contiguous()
    if have == 3 and channels == 1:
        grey = torch.einsum("bchw,c->bhw", images.float(), torch.tensor(LUMINANCE, device=images.device))[:, None]
        return grey.round().to(torch.uint8) if images.dtype == torch.uint8 else grey
    raise ValueError(f"cannot turn {have}-channel images into {channels}-channel ones; set model.in_chans to {have}")


def image_view(cfg: DataConfig, image_size: int, augment: bool, per_image: Optional[ImageAugmentation] = None
               ) -> ImageView:
    """The view ``data.*`` describes: pre-training's when ``augment`` (with ``per_image`` after it), else
    evaluation's."""
    if per_image is not None and not augment:
        raise ValueError("an evaluation view is never augmented per image")
    return ImageView(image_size, augment, cfg.crop_scale, cfg.crop_ratio, cfg.hflip, cfg.eval_crop_fraction,
                     per_image)


# Datasets of views, a whole batch at a time.
JPEG_END = b"\xff\xd9"  # a JPEG file's last marker (EOI)
EpochPosition = tuple[int, int]  # (epoch, position in the dataset), as a training run samples them
Split = Literal["train", "holdout", "test"]  # "holdout": data.holdout_fraction of the training split, seeded


def epochs_and_positions(positions: Sequence[Union[int, EpochPosition]]) -> tuple[torch.Tensor, list[int]]:
    """(b) epochs and the b positions of a batch's positions: ``(epoch, position)`` pairs, as a training run samples
    them (``mpp.data.loading``), or plain positions, read as epoch 0 (evaluation, sampling)."""
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
