"""CIFAR-10 and CIFAR-100 in the python pickle format they are distributed in (32x32 RGB, 50,000 / 10,000)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from mpp.data.image_source import ArraySource
from mpp.errors import DataError

# kind -> (folder inside the archive, files per split, metadata file, label key, class-name key)
LAYOUTS = {
    "cifar10": ("cifar-10-batches-py", {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]},
                "batches.meta", b"labels", b"label_names"),
    "cifar100": ("cifar-100-python", {"train": ["train"], "test": ["test"]}, "meta", b"fine_labels",
                 b"fine_label_names"),
}


def unpickle(path: Path) -> dict:
    try:
        with path.open("rb") as file:
            return pickle.load(file, encoding="bytes")
    except (pickle.UnpicklingError, EOFError, ValueError) as error:
        raise DataError(f"{path} is not a CIFAR pickle ({error}); download the python version again") from error


def cifar_source(kind: str, directory: str, split: str) -> ArraySource:
    folder, files, meta_file, label_key, names_key = LAYOUTS[kind]
    given = Path(directory)
    root = given / folder if (given / folder).is_dir() else given  # the archive's parent or the folder itself
    if not (root / meta_file).is_file():
        raise DataError(
            f"{kind}: no {folder}/{meta_file} under {given}; download the python version "
            f"(https://www.cs.toronto.edu/~kriz/{kind.replace('cifar', 'cifar-')}-python.tar.gz), "
            f"unpack it, and pass data.source={kind}:<the folder holding {folder}/>"
        )
    if split not in files:
        raise DataError(f"{kind} has no split {split!r}; it has {', '.join(files)}")
    missing = [name for name in files[split] if not (root / name).is_file()]
    if missing:
        raise DataError(f"{kind}: {', '.join(str(root / name) for name in missing)} missing; unpack the archive again")
    batches = [unpickle(root / name) for name in files[split]]
    images = np.concatenate([batch[b"data"] for batch in batches]).reshape(-1, 3, 32, 32)
    labels = np.concatenate([batch[label_key] for batch in batches]).astype(np.int64)
    names = tuple(name.decode() for name in unpickle(root / meta_file)[names_key])
    return ArraySource(torch.from_numpy(images), torch.from_numpy(labels), names, f"{kind} {split} ({root})")
