"""Classifiers on frozen features, solved or looked up rather than trained: the paper's few-shot linear evaluation
(Sec. 4.1 "Metrics": regularised least squares onto {-1, 1}^K targets, in closed form) and k-nearest-neighbour votes.

Features are (n d) float tensors, labels (n) class indices. Everything runs in float64 where it solves a system,
so the closed form is exact to rounding.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F


def fitting_device(device: torch.device) -> torch.device:
    """Where a classifier on features made on ``device`` is fitted: there, but on the host for XLA's. The fits solve
    in float64 (ridge regression), which TPUs do not compute, or decide on the host at every iteration (L-BFGS), which
    on XLA would be a new graph each time."""
    return torch.device("cpu") if device.type == "xla" else device


def accuracy(predictions: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of ``predictions`` equal to ``labels``."""
    return (predictions == labels).double().mean().item()


def with_bias(features: torch.Tensor) -> torch.Tensor:
    """(n d) -> (n d+1): a constant 1 appended, so the linear map has a bias."""
    return torch.cat([features, torch.ones_like(features[:, :1])], dim=1)


def ridge_regressions(features: torch.Tensor, labels: torch.Tensor, num_classes: int,
                      l2_grid: Sequence[float]) -> list[torch.Tensor]:
    """Per penalty l2 of ``l2_grid``: the (d+1 K) weights minimising ||[X 1] W - Y||^2 + l2 ||W without its bias
    row||^2, where Y holds +1 at each image's class and -1 elsewhere.

    The unpenalised bias is the mean target less the mean feature times W, so W is the ridge solution on centred
    features: V diag(s / (s^2 + l2)) U^T Y from one thin SVD X = U diag(s) V^T. One decomposition serves the whole grid,
    and it costs n d min(n, d): a few-shot fit on 3,072 raw-pixel features is an SVD of at most a few hundred rows,
    not a (3,073 x 3,073) solve per penalty."""
    x = features.double()
    mean_features = x.mean(dim=0)
    targets = 2 * F.one_hot(labels, num_classes).double() - 1
    mean_targets = targets.mean(dim=0)
    u, s, vh = torch.linalg.svd(x - mean_features, full_matrices=False)  # (n r), (r), (r d)
    projected = u.T @ (targets - mean_targets)  # (r K)
    fits = []
    for l2 in l2_grid:
        weights = vh.T @ ((s / (s.square() + l2))[:, None] * projected)  # (d K)
        fits.append(torch.cat([weights, (mean_targets - mean_features @ weights)[None]]))
    return fits


def ridge_predictions(weights: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """(n) the class with the highest regressed score."""
    return (with_bias(features.double()) @ weights).argmax(dim=1)


def knn_predictions(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    features: torch.Tensor,
    num_classes: int,
    k: int = 20,
    temperature: float = 0.07,
    chunk_size: int = 1024,
) -> torch.Tensor:
    """(n) the class with the most weight among each image's k nearest training images by cosine similarity, each
    neighbour voting exp(similarity / temperature). Queries go ``chunk_size`` at a time, so the similarities held
    at once are (chunk_size m), not (n m)."""
    train_features = F.normalize(train_features, dim=1)
    predictions = []
    for chunk in F.normalize(features, dim=1).split(chunk_size):
        similarity = chunk @ train_features.T  # (c m)
        top, neighbours = similarity.topk(min(k, len(train_features)), dim=1)  # (c k)
        votes = torch.zeros(len(chunk), num_classes, dtype=similarity.dtype, device=similarity.device)
        votes.scatter_add_(1, train_labels[neighbours], (top / temperature).exp())
        predictions.append(votes.argmax(dim=1))
    return torch.cat(predictions)
