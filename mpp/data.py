"""Datasets by ``data.source`` and the training loader. Every source yields ``(image, label)`` pairs with
(c h w) float images in [0, 1], unnormalised: MPP targets come from raw pixels, the model normalises its input."""

from __future__ import annotations

from typing import Literal

from torch.utils.data import DataLoader, Dataset

from mpp.config import ConfigError, DataConfig
from mpp.shapes import ShapesDataset

DATA_SOURCES = ("shapes",)


def build_dataset(cfg: DataConfig, split: Literal["train", "test"], image_size: int) -> Dataset:
    if cfg.source == "shapes":
        return ShapesDataset(split, image_size)
    raise ConfigError(f"data.source={cfg.source!r} is not a known source; valid sources: {', '.join(DATA_SOURCES)}")


def build_train_loader(dataset: Dataset, batch_size: int, num_workers: int) -> DataLoader:
    """Shuffled, whole batches only (every optimizer step sees the same number of images)."""
    if len(dataset) < batch_size:
        raise ConfigError(
            f"the training set has {len(dataset)} images, fewer than one batch of {batch_size}; "
            "lower train.micro_batch_size or train.global_batch_size"
        )
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
    )
