"""Classification scores that imbalanced data needs: accuracy, balanced accuracy (the mean of the per-class
accuracies, which always answering the largest class cannot lift above 1 / classes) and each class's accuracy.

Counts are summed on the device, one (K 2) tensor per batch, and read once at the end.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["majority_class_accuracy", "scores_of"]  # what study/, tools/ and users may import from here


def class_hits(predictions: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(K 2) int64: per class, the images predicted right and the images seen, of these (n) predictions and labels.
    One-hot sums, not bincount: the same static shapes whatever the labels, on every backend."""
    seen = F.one_hot(labels, num_classes)  # (n K)
    return torch.stack([(seen * (predictions == labels)[:, None]).sum(dim=0), seen.sum(dim=0)], dim=1)


def class_scores(hits: torch.Tensor, prefix: str = "") -> dict[str, float | list[float | None]]:
    """``class_hits`` (summed over batches) -> ``<prefix>accuracy``, ``<prefix>balanced_accuracy`` (over the classes
    seen) and ``<prefix>per_class_accuracy`` (None for a class not seen); and the floors each must beat on these very
    images: ``<prefix>majority_class_accuracy`` (always answering the largest class) and
    ``<prefix>chance_balanced_accuracy`` (any answer that ignores the image: 1 / the classes seen)."""
    right, seen = hits.double().cpu().unbind(dim=1)
    per_class = [r / s if s else None for r, s in zip(right.tolist(), seen.tolist(), strict=True)]
    present = [value for value in per_class if value is not None]
    total = seen.sum().item()
    return {
        f"{prefix}accuracy": right.sum().item() / total if total else math.nan,
        f"{prefix}balanced_accuracy": sum(present) / len(present) if present else math.nan,
        f"{prefix}per_class_accuracy": per_class,
        f"{prefix}majority_class_accuracy": seen.max().item() / total if total else math.nan,
        f"{prefix}chance_balanced_accuracy": 1 / len(present) if present else math.nan,
    }


def floors_said(scores: dict[str, Any], prefix: str = "") -> str:
    """The floors of ``class_scores`` in words, for a run's last line."""
    return (f"floors: the largest class {scores[f'{prefix}majority_class_accuracy']:.4f} (accuracy), chance "
            f"{scores[f'{prefix}chance_balanced_accuracy']:.4f} (balanced)")


def scores_of(predictions: torch.Tensor, labels: torch.Tensor, num_classes: int, prefix: str = ""
              ) -> dict[str, float | list[float | None]]:
    """``class_scores`` of one set of (n) predictions."""
    return class_scores(class_hits(predictions, labels, num_classes), prefix)


def majority_class_accuracy(labels: torch.Tensor) -> float:
    """The accuracy of always answering the most frequent class of these (n) labels: what a classifier must beat."""
    return torch.bincount(labels).max().item() / len(labels)


def label_floors(labels: torch.Tensor, prefix: str = "") -> dict[str, float]:
    """``class_scores``' floors from the (n) labels alone, for scores made without ``class_hits``."""
    classes = int((torch.bincount(labels) > 0).sum().item())
    return {f"{prefix}majority_class_accuracy": majority_class_accuracy(labels),
            f"{prefix}chance_balanced_accuracy": 1 / classes}
