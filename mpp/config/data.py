"""The data section: where images come from (``data.source`` and its grammar, ``SOURCE_KINDS``, the one place that
says what it may be) and how they become model inputs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal, NamedTuple, Optional

from mpp.errors import ConfigError, DataError


class SourceKind(NamedTuple):
    location: Literal["none", "optional", "required"]  # what may follow "<kind>:"
    usage: str


# data.source=<kind>[:<location>]. Each kind has one reader, in mpp/data/loading.py.
SOURCE_KINDS = {
    "shapes": SourceKind("none", "shapes, the embedded procedurally drawn data (no argument)"),
    "fashion-mnist": SourceKind("optional", "fashion-mnist[:<dir>], the IDX files (default: the Debian package's "
                                            "directory)"),
    "openclipart": SourceKind("optional", "openclipart[:<dir>], clip art in subject folders (default: the Debian "
                                          "package openclipart-png's /usr/share/openclipart/png)"),
    "openclipart-pool": SourceKind("optional", "openclipart-pool[:<dir>], every clip-art drawing unlabelled, less "
                                               "openclipart's test split: a pre-training pool"),
    "cifar10": SourceKind("required", "cifar10:<dir>, the python pickles (cifar-10-batches-py/)"),
    "cifar100": SourceKind("required", "cifar100:<dir>, the python pickles (cifar-100-python/)"),
    "folder": SourceKind("required", "folder:<dir>, class_name/image files"),
    "hf": SourceKind("required", "hf:<name-or-path>, anything datasets.load_dataset takes, or a directory written by "
                                 "save_to_disk"),
}


SPLIT_BY_SEED = ("openclipart", "openclipart-pool")  # the sources whose test split data.split_seed draws


def parse_source(source: str) -> tuple[str, str]:
    """``"kind:location"`` -> (kind, location); the location may be empty only where the kind has a default.

    An empty source is what a preset for data of the user's own says (the paper presets): it must be given, so a
    ViT-B/16 run never starts on the embedded toy data by accident."""
    if not source:
        raise DataError("data.source is not set: this preset trains on your own images; add, for example, "
                        "data.source=folder:/data/imagenet/train (or hf:<name-or-path>; see docs/data.md)")
    kind, _, location = source.partition(":")
    if kind not in SOURCE_KINDS:
        raise DataError(f"data.source={source!r}: unknown source {kind!r}; valid sources:\n  "
                        + "\n  ".join(known.usage for known in SOURCE_KINDS.values()))
    if SOURCE_KINDS[kind].location == "none" and location:
        raise DataError(f"data.source={source!r}: the {kind} source takes no argument; use data.source={kind}")
    if SOURCE_KINDS[kind].location == "required" and not location:
        raise DataError(f"data.source={source!r} needs a location: {SOURCE_KINDS[kind].usage}")
    return kind, location


@dataclass
class DataConfig:
    """Where images come from and how they become model inputs (mpp/data/)."""

    # Where the images come from: <kind>[:<location>], of the kinds below. A preset that sets it empty ("", as the
    # paper presets do) refuses to run until it is given.
    source: str = "shapes"
    eval_folder: str = ""  # folder: a separate folder for the evaluation split (same class sub-folders)
    # hf: split and column names; an empty column name means the dataset's one Image / ClassLabel column
    train_split: str = "train"
    eval_split: str = "test"
    image_column: str = ""
    label_column: str = ""
    hf_config: str = ""  # load_dataset's configuration name
    hf_data_dir: str = ""  # load_dataset's data_dir (e.g. with hf:imagefolder or hf:parquet)
    hf_cache_dir: str = ""  # where load_dataset caches; empty: the datasets library's default
    streaming: bool = False  # hf: read as a stream, for datasets larger than the disk
    shuffle_buffer: int = 10_000  # streaming: examples in the shuffle buffer
    max_bad_fraction: float = 0.01  # images that fail to decode are skipped; more than this fraction stops the run

    # Seeded slices of the training split (App. B.1.1 holds out 1-10% of it to tune on)
    holdout_fraction: float = 0.0  # this fraction of the training split becomes the "holdout" split
    shots_per_class: int = 0  # > 0: keep this many training images per class (few-shot, low-label settings)
    subset_seed: int = 0  # chooses the hold-out slice and the shots, independently of the run's seed
    split_seed: int = 0  # openclipart(-pool): draws each category's test fifth; 0 is the split published results read
    # Views: pre-training crops and flips (Inception-style, as the paper's ImageNet recipes); evaluation resizes
    crop_scale: tuple[float, float] = (0.08, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    hflip: float = 0.5
    eval_crop_fraction: float = 1.0  # evaluation: centre square of this fraction of the short side, resized
    # Loading; null picks for the machine: workers 0 on a CPU (training uses every core), else the cores per process
    # less one (the training process's own), at least 1
    num_workers: Optional[int] = None
    pin_memory: Optional[bool] = None  # null: on when training on a GPU
    prefetch_factor: int = 2  # batches each worker loads ahead
    # Where files are decoded: "cpu" (torchvision's or PIL's decoder, in the loader's workers) or "gpu" (nvJPEG,
    # batched, in the main process)
    decode: Literal["cpu", "gpu"] = "cpu"
    # folder: keep each image larger than the views need decoded and resized to what they need, in
    # ~/.cache/mpp/decoded (XDG_CACHE_HOME), so that epochs after the first do not decode it again
    decode_cache: bool = False
    # Normalisation applied to the encoder's input; recorded in the exported encoder's pretrained_cfg.
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.5, 0.5, 0.5)

    # The lines --help adds under a field's own comment: the source kinds, from the one table that declares them.
    FIELD_HELP: ClassVar[dict[str, tuple[str, ...]]] = {"source": tuple(kind.usage for kind in SOURCE_KINDS.values())}

    def __post_init__(self) -> None:
        kind, _ = parse_source(self.source)
        if self.split_seed and kind not in SPLIT_BY_SEED:
            raise ConfigError(f"data.split_seed={self.split_seed} draws the test split of "
                              f"{' and '.join(SPLIT_BY_SEED)}; data.source={self.source} keeps its own: drop "
                              "data.split_seed")
        if not 0 <= self.holdout_fraction < 1:
            raise ConfigError(f"data.holdout_fraction={self.holdout_fraction} must lie in [0, 1)")
        if not 0 <= self.max_bad_fraction <= 1:
            raise ConfigError(f"data.max_bad_fraction={self.max_bad_fraction} must lie in [0, 1]")
        if not 0 < self.crop_scale[0] <= self.crop_scale[1] <= 1:
            raise ConfigError(f"data.crop_scale={list(self.crop_scale)} must satisfy 0 < low <= high <= 1")
        if not 0 < self.crop_ratio[0] <= self.crop_ratio[1]:
            raise ConfigError(f"data.crop_ratio={list(self.crop_ratio)} must satisfy 0 < low <= high")
        if not 0 < self.eval_crop_fraction <= 1:
            raise ConfigError(f"data.eval_crop_fraction={self.eval_crop_fraction} must lie in (0, 1]")
        if self.num_workers is not None and self.num_workers < 0:
            raise ConfigError(f"data.num_workers={self.num_workers} must be at least 0 (or null: automatic)")
        # A non-finite or non-positive value would turn every input into NaN or infinity: the first steps would be
        # non-finite and the run would stop blaming the learning rate.
        if not all(math.isfinite(value) for value in self.mean):
            raise ConfigError(f"data.mean={list(self.mean)} must hold finite numbers, one per channel, e.g. "
                              "data.mean=[0.5,0.5,0.5]")
        if not all(math.isfinite(value) and value > 0 for value in self.std):
            raise ConfigError(f"data.std={list(self.std)} must hold finite numbers above 0, one per channel, e.g. "
                              "data.std=[0.5,0.5,0.5]")
        if self.decode == "gpu" and self.num_workers:
            raise ConfigError(f"data.decode=gpu decodes in the main process (CUDA cannot start in a loader worker); "
                              f"drop data.num_workers={self.num_workers}")
