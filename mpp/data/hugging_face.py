"""Hugging Face ``datasets``: a hub name, a local loading script or data directory (parquet, imagefolder, ...), or a
directory written by ``save_to_disk``; map-style (``HuggingFaceSource``), or streamed for datasets larger than the
disk (``build_stream``, ``StreamingImageDataset``).

Images are read undecoded (``Image(decode=False)``) and decoded here, so a broken file is skipped and counted like
one in an image folder instead of stopping the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from mpp.config.data import DataConfig, parse_source
from mpp.data.image_dataset import ImageView, Split, match_channels, too_many_failures
from mpp.data.image_source import UNDECODABLE_KINDS, FileSource, UndecodableImage, read_file
from mpp.errors import DataError
from mpp.images import KeyedDraws, keys_of

MAX_STREAM_WORKERS = 256  # rows of the shared failure counters of a stream (one per loader worker)
STREAM_MIN_READS = 100  # a stream judges its failure fraction only after this many images per worker
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


def stored_bytes(stored: dict[str, Union[bytes, str, None]]) -> bytes:
    """An undecoded Image value ({"bytes", "path"}): its file."""
    return stored["bytes"] if stored["bytes"] is not None else read_file(stored["path"])


class HuggingFaceSource(FileSource):
    """A map-style split: labels read as one column, images decoded on demand."""

    channels, mode = 3, "RGB"

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

    def encoded(self, index: int) -> bytes:
        return stored_bytes(self.images_only[index][self.image_column])

    def name(self, index: int) -> str:
        return self.images_only[index][self.image_column]["path"] or f"row {index}"


def build_stream(
    cfg: DataConfig, split: Split, view: ImageView, channels: int, seed: int, process_index: int, num_processes: int
) -> StreamingImageDataset:
    from datasets.distributed import split_dataset_by_node

    kind, name = parse_source(cfg.source)
    if kind != "hf":
        raise DataError(f"data.streaming applies to hf: sources; {cfg.source} is read from local files already")
    if split == "holdout" or cfg.holdout_fraction or cfg.shots_per_class:
        raise DataError("a stream is read once, in order: data.holdout_fraction and data.shots_per_class need "
                        "data.streaming=false")
    stream = load_split(name, cfg, cfg.eval_split if split == "test" else cfg.train_split)
    if stream.features is None:
        raise DataError(f"hf:{name}: the stream does not declare its columns; give data.streaming=false")
    image_column, label_column = image_and_label_columns(stream.features, cfg, name)
    stream = undecoded(stream.select_columns([image_column] + ([label_column] if label_column else [])), image_column)
    stream = split_dataset_by_node(stream, rank=process_index, world_size=num_processes)
    return StreamingImageDataset(stream, image_column, label_column, view, channels, seed,
                                 cfg.shuffle_buffer if view.augment else 0, cfg.max_bad_fraction,
                                 f"hf:{name} stream ({split})", len(class_names(stream.features, label_column, None)))


class StreamingImageDataset(IterableDataset):
    """A Hugging Face stream of (image, label, key) examples, shuffled through a buffer; for data larger than the
    disk. The key is the one the image's view was drawn from (as ``ImageDataset``'s).

    ``stream`` holds this process's share of the data only (``datasets.distributed.split_dataset_by_node``); the
    stream itself spreads its shards over the loader's workers.
    """

    def __init__(
        self,
        stream: Any,
        image_column: str,
        label_column: Optional[str],
        view: ImageView,
        channels: int,
        seed: int,
        shuffle_buffer: int,
        max_bad_fraction: float,
        description: str,
        num_classes: int = 0,
    ):
        self.stream, self.image_column, self.label_column = stream, image_column, label_column
        self.num_classes = num_classes  # 0: unlabelled, or labels without a ClassLabel feature
        self.view, self.channels, self.seed, self.epoch = view, channels, seed, 0
        self.shuffle_buffer, self.max_bad_fraction = shuffle_buffer, max_bad_fraction
        self.description = f"{description}; {view.description}"
        # Per loader worker: images read, then images that failed by kind (UNDECODABLE_KINDS). Shared memory, so the
        # trainer sees workers' counts.
        self.counts = torch.zeros(MAX_STREAM_WORKERS, 1 + len(UNDECODABLE_KINDS), dtype=torch.long).share_memory_()

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        worker = get_worker_info()
        worker_id = worker.id if worker is not None else 0
        stream = self.stream
        if self.shuffle_buffer:
            stream = stream.shuffle(seed=self.seed, buffer_size=self.shuffle_buffer)
        stream.set_epoch(self.epoch)
        counts = self.counts[worker_id]
        for read, example in enumerate(stream):
            counts[0] += 1
            # A stream has no index: its images are keyed by (seed, epoch, worker, place in the worker's stream).
            keys = keys_of(self.seed, self.epoch, worker_id, torch.tensor([read]))
            try:
                view = self.view.of_files([stored_bytes(example[self.image_column])], KeyedDraws(keys))
            except UndecodableImage as error:
                counts[1 + UNDECODABLE_KINDS.index(error.kind)] += 1
                failed, read = int(counts[1:].sum()), int(counts[0])
                if read >= STREAM_MIN_READS and failed > self.max_bad_fraction * read:
                    raise too_many_failures(failed, read, self.max_bad_fraction, self.description,
                                            str(error)) from None
                continue
            label = example[self.label_column] if self.label_column else -1
            yield self.view.augmented(match_channels(view, self.channels), keys)[0], label, keys[0]

    def skipped_count(self) -> int:
        return int(self.counts[:, 1:].sum())

    def undecodable_files(self) -> list[str]:
        return []  # a streamed example has no file name to give

    def skipped(self) -> list[tuple[str, str]]:
        return [("", kind) for kind, count in zip(UNDECODABLE_KINDS, self.counts[:, 1:].sum(0).tolist(), strict=True)
                for _ in range(count)]
