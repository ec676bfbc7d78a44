"""What a classifier must beat on an experiment's test split: always answering its largest class, and chance."""

from __future__ import annotations

from typing import Any

from mpp.config.building import build_config
from mpp.data.loading import build_dataset
from mpp.metrics import majority_class_accuracy
from mpp.models.encoder import encoder_structure


def class_balance(config_class: type, preset: str, overrides: tuple[str, ...]) -> dict[str, Any]:
    """What a classifier must beat on the test split of a stage's data (its ``preset`` with ``overrides``): always
    answering its largest class (plain accuracy's floor), and chance (balanced accuracy's)."""
    run = build_config(config_class, preset, overrides)
    image_size = encoder_structure(run.model).patch_embed.img_size[0]
    labels = build_dataset(run.data, "test", image_size, run.model.in_chans, augment=False).labels
    return {"majority_class_accuracy": majority_class_accuracy(labels), "classes": int(labels.max()) + 1}
