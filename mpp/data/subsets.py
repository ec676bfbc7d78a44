"""Seeded slices of a training set: a hold-out part for tuning (the paper tunes on 1-10% of the training set, App.
B.1.1) and k examples per class (few-shot evaluation and low-label fine-tuning)."""

from __future__ import annotations

import torch

from mpp.data.sources import DataError


def holdout_split(size: int, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices 0..size-1 split at random into (kept, held out), ``fraction`` of them held out; both sorted."""
    order = torch.randperm(size, generator=torch.Generator().manual_seed(seed))
    held_out = round(size * fraction)
    if fraction > 0 and not 0 < held_out < size:
        raise DataError(f"holding out {fraction} of {size} images leaves one side empty; choose a fraction "
                        f"between {1 / size:.2g} and {1 - 1 / size:.4g}")
    return order[held_out:].sort().values, order[:held_out].sort().values


def shots_per_class(labels: torch.Tensor, shots: int, seed: int) -> torch.Tensor:
    """Positions of ``shots`` randomly chosen examples of every class in ``labels``; sorted."""
    if (labels < 0).any():
        raise DataError("data.shots_per_class needs labels, and this data has unlabelled images")
    counts = torch.bincount(labels)
    short = [(label, int(count)) for label, count in enumerate(counts.tolist()) if 0 < count < shots]
    if short:
        raise DataError(f"data.shots_per_class={shots}, but classes have fewer examples: "
                        + ", ".join(f"class {label}: {count}" for label, count in short[:10]))
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    by_class = torch.sort(labels[order], stable=True)
    first_of_class = torch.cumsum(counts, 0) - counts
    rank_in_class = torch.arange(len(labels)) - first_of_class[by_class.values]  # 0, 1, ... within each class
    return order[by_class.indices[rank_in_class < shots]].sort().values
