"""A linear probe: multinomial logistic regression on frozen features of the whole training split, fitted by L-BFGS
(a convex problem solved to its optimum, so there is no learning rate or epoch count to tune), its L2 penalty chosen
on a hold-out slice of them. The features are extracted once, so the probe costs only the fits.

Features are standardised by the training features' mean and standard deviation first (what a BatchNorm without
affine parameters does in the usual probe on ViT features), which keeps the problem well conditioned.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from mpp.config.evaluation import LinearProbeConfig
from mpp.data.loading import holdout_split
from mpp.evaluation.frozen_feature_classifiers import accuracy, fitting_device
from mpp.metrics import scores_of


class LinearProbe(nn.Module):
    """(n d) features -> (n K) logits: standardised, then one linear layer."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, num_classes: int):
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.linear = nn.Linear(len(mean), num_classes, device=mean.device)
        nn.init.zeros_(self.linear.weight)  # a deterministic start: the fit depends on the data alone
        nn.init.zeros_(self.linear.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear((features - self.mean) / self.std)


def train_linear_probe(features: torch.Tensor, labels: torch.Tensor, num_classes: int, l2: float,
                       max_iterations: int) -> LinearProbe:
    """Minimises mean cross-entropy + l2 / 2 * ||weights||^2 (the bias unpenalised) over the whole batch."""
    probe = LinearProbe(features.mean(dim=0), features.std(dim=0).clamp_min(1e-6), num_classes)
    standardised = (features - probe.mean) / probe.std
    optimizer = torch.optim.LBFGS(probe.linear.parameters(), lr=1, max_iter=max_iterations, history_size=20,
                                  tolerance_grad=1e-9, tolerance_change=1e-12, line_search_fn="strong_wolfe")

    def objective() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(probe.linear(standardised), labels) + l2 / 2 * probe.linear.weight.square().sum()
        loss.backward()
        return loss

    optimizer.step(objective)
    return probe.requires_grad_(False)


# L-BFGS on a few hundred images makes thousands of products too small to split across threads: on a busy 2-core CPU
# two threads fitted 360 raw-pixel features (3,072 each) 2 to 5 times slower than one.
ONE_THREAD_BELOW = 2**24  # feature values of the training split


@contextmanager
def fitting_threads(features: torch.Tensor) -> Iterator[None]:
    """One intra-op thread while a small fit on the CPU runs (fewer than ``ONE_THREAD_BELOW`` feature values), the
    process's setting again after it."""
    before = torch.get_num_threads()
    if features.device.type == "cpu" and features.numel() < ONE_THREAD_BELOW:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def linear_probe_evaluation(train: tuple[torch.Tensor, torch.Tensor], test: tuple[torch.Tensor, torch.Tensor],
                            num_classes: int, cfg: LinearProbeConfig, seed: int) -> dict:
    """Each penalty of ``cfg.l2_grid`` fitted to the training features less a seeded hold-out slice and scored on
    it; the best (the first among ties) fitted to all of them and scored on ``test``, on ``fitting_device`` (on a
    GPU an ImageNet-sized probe takes seconds, on a CPU hours)."""
    device = fitting_device(train[0].device)
    (features, labels), test = ((values.to(device), classes.to(device)) for values, classes in (train, test))
    kept, held_out = (part.to(features.device) for part in holdout_split(len(features), cfg.holdout_fraction, seed))
    holdout_accuracy = {}
    with fitting_threads(features):
        for l2 in cfg.l2_grid:
            probe = train_linear_probe(features[kept], labels[kept], num_classes, l2, cfg.max_iterations)
            holdout_accuracy[f"{l2:g}"] = accuracy(probe(features[held_out]).argmax(dim=1), labels[held_out])
        scores = list(holdout_accuracy.values())
        chosen = cfg.l2_grid[scores.index(max(scores))]
        probe = train_linear_probe(features, labels, num_classes, chosen, cfg.max_iterations)
    return {
        **scores_of(probe(test[0]).argmax(dim=1), test[1], num_classes, "test_"),
        "train_accuracy": accuracy(probe(features).argmax(dim=1), labels),
        "chosen_l2": chosen,
        "holdout_accuracy": holdout_accuracy,
    }
