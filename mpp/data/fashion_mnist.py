"""Fashion-MNIST from its IDX files (gzipped or not): 60,000 train / 10,000 test 28x28 grey images, 10 classes."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from mpp.data.image_source import ArraySource
from mpp.errors import DataError

# The names meant for use outside the package (study/, tools/ and users)
__all__ = [
    "DEFAULT_DIR", "FILES", "find_file",
]

DEFAULT_DIR = Path("/usr/share/datasets/fashion-mnist")  # where the Debian package dataset-fashion-mnist puts it
FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"), "test": ("t10k-images-idx3-ubyte",
                                                                                     "t10k-labels-idx1-ubyte")}
CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
               "Ankle boot")
HOW_TO_GET = ("install it with `apt-get install dataset-fashion-mnist` (files land in /usr/share/datasets/"
              "fashion-mnist), or point data.source=fashion-mnist:<dir> at a folder holding the four IDX files")
IDX_UBYTE = 0x08  # the IDX type code of unsigned bytes, the only one these files use


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (magic: two zero bytes, type code, number of dimensions; then big-endian int32 sizes)."""
    data = (gzip.decompress if path.suffix == ".gz" else bytes)(path.read_bytes())
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] != IDX_UBYTE:
        raise DataError(f"{path} is not an IDX file of unsigned bytes; {HOW_TO_GET}")
    dims = data[3]
    shape = tuple(np.frombuffer(data, dtype=">i4", count=dims, offset=4))
    values = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
    if values.size != np.prod(shape):
        raise DataError(f"{path} is truncated: its header promises {shape}, it holds {values.size} values")
    return values.reshape(shape)


def find_file(directory: Path, stem: str) -> Path:
    for candidate in (directory / f"{stem}.gz", directory / stem):
        if candidate.is_file():
            return candidate
    raise DataError(f"Fashion-MNIST file {directory / stem}[.gz] does not exist; {HOW_TO_GET}")


def fashion_mnist_source(directory: str, split: str) -> ArraySource:
    root = Path(directory) if directory else DEFAULT_DIR
    if split not in FILES:
        raise DataError(f"Fashion-MNIST has no split {split!r}; it has {', '.join(FILES)}")
    images_file, labels_file = (find_file(root, stem) for stem in FILES[split])
    images, labels = read_idx(images_file), read_idx(labels_file)
    if len(images) != len(labels):
        raise DataError(f"{images_file} holds {len(images)} images but {labels_file} {len(labels)} labels")
    return ArraySource(torch.from_numpy(images.copy())[:, None], torch.from_numpy(labels.astype(np.int64)),
                       CLASS_NAMES, f"fashion-mnist {split} ({root})")
