"""Seeded slices of a training set: a hold-out part for tuning (the paper tunes on 1-10% of the training set, App.
B.1.1) and k examples per class (few-shot evaluation and low-label fine-tuning)."""

from __future__ import annotations

from typing import Sequence

import torch

from mpp.errors import DataError


def holdout_split(size: int, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices 0..size-1 split at random into (kept, held out), ``fraction`` of them held out; both sorted."""
    order = torch.randperm(size, generator=torch.Generator().manual_seed(seed))
    held_out = round(size * fraction)
    if fraction > 0 and not 0 < held_out < size:
        raise DataError(f"holding out {fraction} of {size} images leaves one side empty; choose a fraction "
                        f"between {1 / size:.2g} and {1 - 1 / size:.4g}")
    return order[held_out:].sort().values, order[:held_out].sort().values


def class_label(label: int, class_names: Sequence[str]) -> str:
    """``class 3 (jackets)``: a class as the user knows it (its folder or label name) and as the data numbers it."""
    return f"class {label} ({class_names[label]})" if label < len(class_names) else f"class {label}"


def shots_per_class(labels: torch.Tensor, shots: int, seed: int, asked_by: str = "data.shots_per_class",
                    class_names: Sequence[str] = (), settable: bool = True) -> torch.Tensor:
    """Positions of ``shots`` randomly chosen examples of every class in ``labels``; sorted. ``asked_by`` names the
    setting that asks for them and ``class_names`` the classes, for the error when there are too few; where
    ``settable``, the error says the value of ``asked_by`` that fits the data."""
    if (labels < 0).any():
        raise DataError(f"{asked_by} needs labels, and this data has unlabelled images")
    counts = torch.bincount(labels)
    short = [(label, int(count)) for label, count in enumerate(counts.tolist()) if 0 < count < shots]
    if short:
        fewest = min(count for _, count in short)
        raise DataError(f"{asked_by} needs {shots} examples of every class, but classes have fewer: "
                        + ", ".join(f"{class_label(label, class_names)}: {count}" for label, count in short[:10])
                        + (f"; set {asked_by}={fewest} (or fewer) to fit them all" if settable else ""))
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    by_class = torch.sort(labels[order], stable=True)
    first_of_class = torch.cumsum(counts, 0) - counts
    rank_in_class = torch.arange(len(labels)) - first_of_class[by_class.values]  # 0, 1, ... within each class
    return order[by_class.indices[rank_in_class < shots]].sort().values


def disjoint_per_class(labels: torch.Tensor, counts: list[int], seed: int, asked_by: str,
                       class_names: Sequence[str] = ()) -> list[torch.Tensor]:
    """Positions in ``labels`` of disjoint random slices, ``counts[i]`` examples of every class in slice i (e.g.
    shots, a hold-out slice to tune on, test images); each sorted."""
    rest, slices = torch.arange(len(labels)), []
    for count in counts:
        chosen = shots_per_class(labels[rest], count, seed, f"{asked_by} (with {sum(counts)} per class in all)",
                                 class_names, settable=False)
        slices.append(rest[chosen])
        keep = torch.ones(len(rest), dtype=torch.bool)
        keep[chosen] = False
        rest = rest[keep]
    return slices
