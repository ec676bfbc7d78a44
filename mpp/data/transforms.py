"""From a source image to a model input: a crop box per image, resampled to size x size, maybe mirrored.

Pre-training uses a random resized ("Inception") crop and a horizontal flip, as the ViT paper's ImageNet recipes do;
evaluation uses resize + centre crop. Both are "a box per image, resampled": boxes for a whole batch are drawn in
a few tensor operations. Tensors (in-memory sources) are cut out and resized in one call to torchvision's
``roi_align``, which averages over each output pixel's footprint when shrinking (no aliasing) and interpolates
bilinearly when enlarging, into float views in [0, 1]; files, each of its own size, are decoded for their boxes and
resampled one by one, as antialiased bilinear, into uint8 views (the model scales either to [0, 1]).

Randomness comes from per-image draws (``mpp.images``), which the datasets key by (seed, epoch, index): a
sample's view is the same whichever worker, process or batch draws it, and a resumed run draws what an uninterrupted
one would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from PIL import Image
from torchvision.ops import roi_align

from mpp.config.data import DataConfig
from mpp.data.augmentation import ImageAugmentation
from mpp.data.image_source import open_image, pixels_for_crop
from mpp.images import KeyedDraws, unit_interval

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
