"""Every kind of ``data.source``, and the reader that opens one split of it.

``mpp.config.data.SOURCE_KINDS`` declares what ``data.source`` may say (each kind, whether it takes a location, its
usage line); ``READERS`` here opens each. A new format is a module with its reader, one line in each of the two.
"""

from __future__ import annotations

from typing import Callable, Literal

from mpp.config.data import DataConfig, parse_source
from mpp.data.cifar import cifar_source
from mpp.data.fashion_mnist import fashion_mnist_source
from mpp.data.hugging_face import HuggingFaceSource
from mpp.data.image_folder import ImageFolderSource
from mpp.data.image_source import ImageSource
from mpp.data.openclipart import openclipart_pool_source, openclipart_source
from mpp.data.shapes import ShapesSource
from mpp.errors import DataError

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
