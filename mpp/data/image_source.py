"""What every data source provides, whatever its format: one split's labels, class names and raw images.

Two kinds, by how images are stored:
- ``BatchSource``: every image of the split has the same size and a whole batch comes out of one tensor operation
  (arrays in memory: Fashion-MNIST, CIFAR; the rendered shapes).
- ``FileSource``: images are encoded files of any size, decoded one at a time (image folders, Hugging Face datasets);
  a file that cannot be read or decoded raises ``UndecodableImage``, which the dataset counts and skips.

Why a file was skipped is said in one place (``undecodable``, ``skip_summary``), for training, evaluation and
``mpp.data.prepare`` alike.
"""

from __future__ import annotations

import io
import math
from abc import ABC, abstractmethod
from pathlib import Path
from collections import defaultdict
from typing import NamedTuple, Optional, Sequence, Union

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torchvision.io import ImageReadMode, decode_jpeg

from mpp.errors import DataError


# Why a file cannot be decoded: kind -> (what it is, said of one file or of several, and the fix). A kind's place in
# the order is its code in the datasets' shared record of skipped images (0: not skipped).
WHY_UNDECODABLE = {
    "unreadable": ("unreadable", "check that the file is still there and readable"),
    "not-an-image": ("not an image PIL can read", "remove it, or convert it to PNG or JPEG"),
    "too-large": ("larger than PIL's decompression-bomb limit of {limit:,} pixels (2 x Image.MAX_IMAGE_PIXELS)",
                  "shrink it first (e.g. ImageMagick's `mogrify -resize 8192x8192 <file>`: the views need far fewer "
                  "pixels), or raise PIL.Image.MAX_IMAGE_PIXELS where the machine has 4 bytes a pixel to spare"),
    "truncated": ("truncated or corrupt", "replace it with a whole copy"),
}
UNDECODABLE_KINDS = tuple(WHY_UNDECODABLE)


def why_undecodable(kind: str) -> tuple[str, str]:
    """What is wrong with a file of ``kind`` (one of ``WHY_UNDECODABLE``), and the fix."""
    what, fix = WHY_UNDECODABLE[kind]
    return what.format(limit=2 * (Image.MAX_IMAGE_PIXELS or 0)), fix  # PIL refuses above twice the setting


class UndecodableImage(Exception):
    """One image file that cannot be decoded (the dataset skips and counts it): ``kind`` says why (one of
    ``WHY_UNDECODABLE``), ``detail`` in the decoder's words."""

    def __init__(self, kind: str, detail: str) -> None:
        what, fix = why_undecodable(kind)
        super().__init__(f"{what} ({detail}); {fix}")
        self.kind, self.detail = kind, detail


def undecodable(error: Exception) -> UndecodableImage:
    """PIL's, torchvision's or the file system's error for a file, as an ``UndecodableImage`` that says why: the one
    place that tells a decompression bomb from a file PIL cannot identify from a truncated one."""
    if isinstance(error, Image.DecompressionBombError):
        return UndecodableImage("too-large", str(error).partition(",")[0])  # PIL's "Image size (N pixels) exceeds.."
    if isinstance(error, UnidentifiedImageError):
        return UndecodableImage("not-an-image", "PIL cannot identify its format")
    if isinstance(error, RuntimeError):  # torchvision's libjpeg: its words, without the C++ file
        return UndecodableImage("truncated", str(error).rpartition(", ")[2])
    return UndecodableImage("truncated", str(error))


def skip_summary(skipped: Sequence[tuple[str, str]], total: int = 0) -> str:
    """One line of (name, kind) pairs of skipped images: how many, grouped by why, a few names of each and the fix.
    ``total`` counts images skipped elsewhere too (other processes), whose names are not in ``skipped``."""
    names = defaultdict(list)
    for name, kind in skipped:
        names[kind].append(name)
    groups = []
    for kind, of_kind in names.items():
        what, fix = why_undecodable(kind)
        shown = [name for name in of_kind if name][:3]
        example = f" (e.g. {', '.join(shown)}{', ...' if len(of_kind) > len(shown) else ''})" if shown else ""
        groups.append(f"{len(of_kind)} {what}{example}: {fix}")
    count = max(total, len(skipped))
    elsewhere = f"; {count - len(skipped)} on other processes" if count > len(skipped) else ""
    return f"{count} image(s) skipped: " + "; ".join(groups) + elsewhere


class ImageSource(ABC):
    """One split of a dataset, before any transform: ``len`` images with integer labels (-1: unlabelled)."""

    labels: torch.Tensor  # (n) int64
    class_names: tuple[str, ...]
    channels: int  # of the stored images: 1 (grey) or 3 (RGB)
    description: str  # for logs and errors: what was read, from where

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


class BatchSource(ImageSource):
    @abstractmethod
    def images(self, index: torch.Tensor) -> torch.Tensor:
        """(b) indices -> (b c h w) images, uint8 or float in [0, 1]."""


class FileSource(ImageSource):
    mode: str  # what images are decoded to: "RGB" or "L"

    @abstractmethod
    def encoded(self, index: int) -> bytes:
        """Image ``index``'s file, undecoded: the view opens it (``open_image``) to learn its size, then decodes only
        what its crop needs; raises ``UndecodableImage`` when the file cannot be read."""

    @abstractmethod
    def name(self, index: int) -> str:
        """Where image ``index`` comes from (a path), for reports of files that could not be decoded."""

    def path(self, index: int) -> Optional[Path]:
        """Image ``index``'s file on this machine, where it is one (what a decode cache is keyed by); else None."""
        return None


class ArraySource(BatchSource):
    """Images held in memory as one uint8 tensor."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, class_names: tuple[str, ...], description: str):
        if len(images) == 0:
            raise DataError(f"{description} holds no images")
        self.array, self.labels = images, labels.long()
        self.class_names, self.channels, self.description = class_names, images.shape[1], description

    def images(self, index: torch.Tensor) -> torch.Tensor:
        return self.array[index]


def read_file(path: Union[str, Path]) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:  # gone, or unreadable, since the source was listed
        raise UndecodableImage("unreadable", str(error)) from error


def open_image(file: Union[str, Path, bytes]) -> Image.Image:
    """An encoded image (path or bytes, any format PIL reads), opened: its header read, its pixels not yet."""
    try:
        return Image.open(io.BytesIO(file) if isinstance(file, bytes) else file)
    except (OSError, ValueError, Image.DecompressionBombError) as error:  # PIL's errors for broken or unknown data
        raise undecodable(error) from error


def decode(image: Image.Image, mode: str) -> Image.Image:
    """An opened image's pixels, converted to ``mode`` (RGB or L), transparency composited on white (as a drawing
    with an alpha channel is meant to be seen; converting drops the alpha and shows whatever colour the transparent
    pixels hold, often black); a broken file fails here."""
    try:
        image.load()  # PIL closes a file it opened itself once its pixels are read
        if image.has_transparency_data:
            image = Image.alpha_composite(Image.new("RGBA", image.size, "white"), image.convert("RGBA"))
        return image if image.mode == mode else image.convert(mode)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
        raise undecodable(error) from error


class ReducedImage(NamedTuple):
    """An image decoded earlier and kept smaller (``mpp.data.decode_cache``): its (c h w) uint8 pixels, and the size of
    the file they were decoded from, which its crop boxes are drawn in (as the file's would be)."""

    pixels: torch.Tensor
    width: int
    height: int

    def box_in_pixels(self, box: list[float]) -> list[float]:
        """A box (x0 y0 x1 y1) in the file's pixels, in the kept ones."""
        _, height, width = self.pixels.shape
        x, y = width / self.width, height / self.height
        return [box[0] * x, box[1] * y, box[2] * x, box[3] * y]


def resized_to_short_side(image: Image.Image, short_side: int, mode: str) -> Image.Image:
    """An opened or decoded image with its shorter side brought down to ``short_side`` (never enlarged); a JPEG is
    decoded at the coarsest scale that still leaves that many pixels."""
    width, height = image.size
    scale = min(1.0, short_side / min(width, height))
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    decoded, box = decode_for_crop(image, [0.0, 0.0, float(width), float(height)], min(size), mode)
    if decoded.size == size:
        return decoded
    return decoded.resize(size, Image.Resampling.BICUBIC, box=box)


def draft_for_crop(image: Image.Image, box: list[float], size: int, mode: str) -> list[float]:
    """Sets an opened JPEG to decode at the coarsest scale that keeps ``box`` (x0 y0 x1 y1) at least ``size`` pixels
    each way, 1/2, 1/4 or 1/8 in the DCT domain (PIL's ``draft``), for a fraction of a full decode's work; returns
    the box in the pixels it will decode to. Other formats, and images already decoded, are left whole."""
    x0, y0, x1, y1 = box
    width, height = image.size
    drafted = image.draft(mode, (math.ceil(width * size / max(x1 - x0, 1)), math.ceil(height * size / max(y1 - y0, 1))))
    if drafted is None:
        return box
    scale = width / drafted[1][2]  # draft's box: the whole original image, in the decoded image's pixels
    return [coordinate / scale for coordinate in box]  # the decoded pixel i covers the original's [i, i + 1) x scale


def decode_for_crop(image: Image.Image, box: list[float], size: int, mode: str) -> tuple[Image.Image, list[float]]:
    """An opened image decoded at the coarsest scale its ``box`` allows (``draft_for_crop``), and the box in the
    decoded image's pixels."""
    box = draft_for_crop(image, box, size, mode)
    return decode(image, mode), box


def pixels_for_crop(file: bytes, image: Union[Image.Image, ReducedImage], box: list[float], size: int, mode: str
                    ) -> tuple[torch.Tensor, list[float]]:
    """``decode_for_crop`` as (c h w) uint8 pixels (channels last in memory). A JPEG that decodes at full scale goes
    to torchvision's decoder (libjpeg-turbo, as PIL's, without PIL's image object: 0.68 against 0.92 ms for an
    ImageNet-sized photo, ``python -m mpp.benchmark.loader_speed``); a drafted JPEG, and every other format, to PIL.
    (torchvision 0.29 marks its decoders deprecated in favour of TorchCodec, which is not a dependency here.) An
    image decoded earlier (``ReducedImage``) gives its kept pixels, the box mapped onto them."""
    if isinstance(image, ReducedImage):
        return image.pixels, image.box_in_pixels(box)
    drafted = draft_for_crop(image, box, size, mode)
    if image.format == "JPEG" and drafted == box:
        return decoded_jpeg(file, mode), box
    decoded = decode(image, mode)
    pixels = torch.from_numpy(np.array(decoded)).view(decoded.height, decoded.width, -1)  # (h w c)
    return pixels.permute(2, 0, 1), drafted


READ_MODES = {"RGB": ImageReadMode.RGB, "L": ImageReadMode.GRAY}


def decoded_jpeg(file: bytes, mode: str) -> torch.Tensor:
    """(c h w) uint8 pixels of a JPEG file, by torchvision on the CPU; a broken or truncated file raises
    ``UndecodableImage``."""
    try:
        return decode_jpeg(jpeg_data(file), mode=READ_MODES[mode])
    except RuntimeError as error:
        raise undecodable(error) from error


def jpeg_data(file: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(file), dtype=torch.uint8)  # a writable copy: torch refuses to wrap bytes
