"""Hugging Face ``datasets``: a hub name, a local loading script or data directory (parquet, imagefolder, ...), or a
directory written by ``save_to_disk``; map-style, or streamed for datasets larger than the disk.

Images are read undecoded (``Image(decode=False)``) and decoded here, so a broken file is skipped and counted like
one in an image folder instead of stopping the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch
from PIL import Image

from mpp.config import DataConfig, DataError
from mpp.data.image_source import FileSource, decode_image

HOW_TO_GET = (
    "where the hub is reachable, fetch it once and `dataset.save_to_disk(<dir>)`, then use data.source=hf:<dir>"
)


def is_saved_to_disk(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()


def looks_local(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or Path(name).expanduser().exists()


def load_split(name: str, cfg: DataConfig, split: str) -> Any:
    """One split as a ``datasets.Dataset``, or an ``IterableDataset`` when ``cfg.streaming``."""
    import datasets  # imported here: only this source needs it, and it is slow to import

    path = Path(name).expanduser()
    if looks_local(name) and not path.exists():
        raise DataError(f"hf:{name}: {path} does not exist; give a directory written by save_to_disk, a folder of "
                        f"parquet/image files, or a hub name")
    try:
        if looks_local(name) and is_saved_to_disk(path):
            loaded = datasets.load_from_disk(str(path))
            if isinstance(loaded, datasets.DatasetDict):
                if split not in loaded:
                    raise DataError(f"hf:{name} has no split {split!r}; its splits: {', '.join(loaded)} "
                                    f"(set data.train_split / data.eval_split)")
                loaded = loaded[split]
            elif split != cfg.train_split:
                raise DataError(f"hf:{name} was saved as a single Dataset, used as the training split; it has no "
                                f"{split!r} split: save a DatasetDict, or hold out part of the training set with "
                                f"data.holdout_fraction")
            if cfg.streaming:
                loaded = loaded.to_iterable_dataset(num_shards=max(1, min(len(loaded), 64)))
        else:
            options = {"name": cfg.hf_config or None, "data_dir": cfg.hf_data_dir or None,
                       "cache_dir": cfg.hf_cache_dir or None}
            loaded = datasets.load_dataset(str(path) if looks_local(name) else name, split=split,
                                           streaming=cfg.streaming, **options)
    except DataError:
        raise
    except ConnectionError as error:
        raise DataError(f"hf:{name}: cannot reach the Hugging Face hub ({error}); {HOW_TO_GET}") from error
    except (FileNotFoundError, ValueError) as error:  # unknown dataset, unknown split, no data files
        if "corresponds to no data" in str(error):  # datasets' words for a split without rows
            raise DataError(f"hf:{name} split {split!r} is empty") from error
        raise DataError(f"hf:{name} (split {split!r}): {error}") from error
    if not cfg.streaming and len(loaded) == 0:
        raise DataError(f"hf:{name} split {split!r} is empty")
    return loaded


def image_and_label_columns(features: Any, cfg: DataConfig, name: str) -> tuple[str, Optional[str]]:
    """The image column and the label column (None: unlabelled), as configured or found by feature type."""
    import datasets

    described = ", ".join(f"{column} ({type(feature).__name__})" for column, feature in features.items())
    images = [column for column, feature in features.items() if isinstance(feature, datasets.Image)]
    labels = [column for column, feature in features.items() if isinstance(feature, datasets.ClassLabel)]
    image_column = cfg.image_column or (images[0] if len(images) == 1 else None)
    if image_column is None or image_column not in features:
        wanted = repr(cfg.image_column) if cfg.image_column else "of type Image"
        raise DataError(f"hf:{name}: no image column {wanted}; the columns are "
                        f"{described}; set data.image_column to the one holding the images")
    if not isinstance(features[image_column], datasets.Image):
        raise DataError(f"hf:{name}: column {image_column!r} is a {type(features[image_column]).__name__}, not an "
                        f"Image; the columns are {described}")
    if cfg.label_column:
        if cfg.label_column not in features:
            raise DataError(f"hf:{name}: no label column {cfg.label_column!r}; the columns are {described}; set "
                            f"data.label_column to one of them")
        return image_column, cfg.label_column
    if len(labels) == 1:
        return image_column, labels[0]
    return image_column, "label" if "label" in features else None


def class_names(features: Any, label_column: Optional[str], labels: Optional[torch.Tensor]) -> tuple[str, ...]:
    """From a ClassLabel feature, else "0" .. "<max label>"; none for unlabelled data."""
    import datasets

    if label_column is None:
        return ()
    if isinstance(features[label_column], datasets.ClassLabel):
        return tuple(features[label_column].names)
    return tuple(str(i) for i in range(int(labels.max()) + 1)) if labels is not None else ()


def undecoded(dataset: Any, image_column: str) -> Any:
    import datasets

    return dataset.cast_column(image_column, datasets.Image(decode=False))


def decode_stored_image(stored: dict[str, Union[bytes, str, None]], channels: int) -> Image.Image:
    """An undecoded Image value ({"bytes", "path"}), decoded."""
    return decode_image(stored["bytes"] if stored["bytes"] is not None else stored["path"], channels)


class HuggingFaceSource(FileSource):
    """A map-style split: labels read as one column, images decoded on demand."""

    channels = 3

    def __init__(self, name: str, cfg: DataConfig, split: str):
        dataset = load_split(name, cfg, split)
        self.image_column, label_column = image_and_label_columns(dataset.features, cfg, name)
        if label_column is None:
            self.labels = torch.full((len(dataset),), -1)
        else:
            labels = dataset.select_columns([label_column]).with_format("numpy")[:][label_column]
            self.labels = torch.from_numpy(np.asarray(labels, dtype=np.int64))
        self.class_names = class_names(dataset.features, label_column, self.labels if label_column else None)
        self.images_only = undecoded(dataset.select_columns([self.image_column]), self.image_column)
        self.description = f"hf:{name} {split} ({len(dataset)} images, {len(self.class_names)} classes)"

    def read(self, index: int) -> Image.Image:
        return decode_stored_image(self.images_only[index][self.image_column], self.channels)

    def name(self, index: int) -> str:
        return self.images_only[index][self.image_column]["path"] or f"row {index}"
