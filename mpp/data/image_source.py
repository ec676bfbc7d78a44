"""What every data source provides, whatever its format: one split's labels, class names and raw images.

Two kinds, by how images are stored:
- ``BatchSource``: every image of the split has the same size and a whole batch comes out of one tensor operation
  (arrays in memory: Fashion-MNIST, CIFAR; the rendered shapes).
- ``FileSource``: images are encoded files of any size, decoded one at a time (image folders, Hugging Face datasets);
  a file that cannot be decoded raises ``UndecodableImage``, which the dataset counts and skips.
"""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Union

import torch
from PIL import Image

from mpp.config import DataError


class UndecodableImage(Exception):
    """One image file that cannot be decoded (the dataset skips and counts it)."""


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
    @abstractmethod
    def read(self, index: int) -> Image.Image:
        """One decoded image (``decode_image``); raises ``UndecodableImage``."""

    @abstractmethod
    def name(self, index: int) -> str:
        """Where image ``index`` comes from (a path), for reports of files that could not be decoded."""


class ArraySource(BatchSource):
    """Images held in memory as one uint8 tensor."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, class_names: tuple[str, ...], description: str):
        if len(images) == 0:
            raise DataError(f"{description} holds no images")
        self.array, self.labels = images, labels.long()
        self.class_names, self.channels, self.description = class_names, images.shape[1], description

    def images(self, index: torch.Tensor) -> torch.Tensor:
        return self.array[index]


def decode_image(file: Union[str, Path, bytes], channels: int = 3) -> Image.Image:
    """An encoded image (path or bytes, any format PIL reads), decoded and converted to RGB or grey (L)."""
    try:
        with Image.open(io.BytesIO(file) if isinstance(file, bytes) else file) as image:
            return image.convert("RGB" if channels == 3 else "L")  # decodes; a broken file fails here
    except (OSError, ValueError, Image.DecompressionBombError) as error:  # PIL's errors for broken or unknown data
        raise UndecodableImage(str(error)) from error
