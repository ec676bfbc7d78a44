"""Accuracy of a trained classifier on a labelled split, over every process's share of it."""

from __future__ import annotations

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader


@torch.no_grad()
def top1_accuracy(accelerator: Accelerator, model: torch.nn.Module, loader: DataLoader) -> float:
    """Fraction of ``loader``'s images whose highest logit is their label. ``loader`` is prepared: each process
    scores its share, and ``gather_for_metrics`` drops the samples repeated to even out the last batch."""
    was_training = model.training
    model.eval()
    hits = torch.zeros(2, device=accelerator.device)  # right, seen
    for images, labels in loader:
        with accelerator.autocast():  # a model accelerate did not prepare (the averaged weights) needs it too
            logits = model(images, labels).logits
        right = accelerator.gather_for_metrics(logits.argmax(dim=-1) == labels)
        hits += torch.stack([right.sum(), torch.tensor(right.numel(), device=hits.device)])
    model.train(was_training)
    right, seen = hits.tolist()
    return right / seen
