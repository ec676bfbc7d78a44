"""Classifiers on frozen features, solved or looked up rather than trained: the paper's few-shot linear evaluation
(Sec. 4.1 "Metrics": regularised least squares onto {-1, 1}^K targets, in closed form) and k-nearest-neighbour votes.

Features are (n d) float tensors, labels (n) class indices. Everything runs in float64 where it solves a system,
so the closed form is exact to rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def fitting_device(features: torch.Tensor) -> torch.device:
    """Where a classifier on frozen features is fitted: where the features are, but the host for XLA's. The fits solve
    in float64 (ridge regression), which TPUs do not compute, or decide on the host at every iteration (L-BFGS), which
    on XLA would be a new graph each time."""
    return torch.device("cpu") if features.device.type == "xla" else features.device


def accuracy(predictions: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of ``predictions`` equal to ``labels``."""
    return (predictions == labels).double().mean().item()


def with_bias(features: torch.Tensor) -> torch.Tensor:
    """(n d) -> (n d+1): a constant 1 appended, so the linear map has a bias."""
    return torch.cat([features, torch.ones_like(features[:, :1])], dim=1)


def ridge_regression(features: torch.Tensor, labels: torch.Tensor, num_classes: int, l2: float) -> torch.Tensor:
    """(d+1 K) weights minimising ||[X 1] W - Y||^2 + l2 ||W without its bias row||^2, where Y holds +1 at each
    image's class and -1 elsewhere; solved exactly by the normal equations."""
    x = with_bias(features.double())
    targets = 2 * F.one_hot(labels, num_classes).double() - 1
    penalty = torch.full((x.shape[1],), float(l2), dtype=torch.float64, device=x.device)
    penalty[-1] = 0  # the bias is not shrunk
    return torch.linalg.solve(x.T @ x + torch.diag(penalty), x.T @ targets)


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
