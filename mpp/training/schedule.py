"""The learning-rate schedule: linear warm-up, then cosine or linear decay (App. B.1), a pure function of the step;
and the schedule in steps from one given in epochs, with the peak learning rate scaled to the batch."""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Literal, Optional

from mpp.config.training import TrainConfig
from mpp.data.training_batches import steps_per_epoch
from mpp.errors import ConfigError

logger = logging.getLogger(__name__)


def learning_rate(
    step: int,
    peak: float,
    warmup_steps: int,
    total_steps: int,
    decay: Literal["cosine", "linear"] = "cosine",
    final: float = 0.0,
) -> float:
    """The learning rate of optimizer step ``step`` (0-based) of ``total_steps``."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps))
    if decay == "cosine":
        return final + (peak - final) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return final + (peak - final) * (1.0 - progress)


def steps_of(epochs: float, images: int, global_batch_size: int) -> int:
    """Optimizer steps that make ``epochs`` epochs of ``images`` training images, ``global_batch_size`` a step:
    exactly so for whole epochs, rounded up for a fraction of one."""
    return math.ceil(epochs * steps_per_epoch(images, global_batch_size) - 1e-9)


def resolved_schedule(cfg: TrainConfig, images: Optional[int]) -> tuple[TrainConfig, str]:
    """``cfg`` as the loop reads it, and how each figure was derived (for the plan line): steps and warm-up steps
    from ``train.epochs`` / ``train.warmup_epochs`` and the training set's ``images``, and the peak learning rate
    scaled to the global batch where ``train.lr_scaling`` asks (MAE's rule: lr x batch / 256)."""
    derived = []
    lengths = {}
    for steps, epochs, name in (("steps", "epochs", "steps"), ("warmup_steps", "warmup_epochs", "warm-up steps")):
        if getattr(cfg, epochs) is None:
            continue
        if images is None:
            raise ConfigError(f"train.{epochs} needs a training set of known size, and a stream "
                              f"(data.streaming=true) has none; give train.{steps} instead")
        lengths[steps] = steps_of(getattr(cfg, epochs), images, cfg.global_batch_size)
        lengths[epochs] = None
        per_epoch = steps_per_epoch(images, cfg.global_batch_size)
        left_over = images - per_epoch * cfg.global_batch_size
        derived.append(f"train.{epochs}={getattr(cfg, epochs):g} at {per_epoch:,} steps an epoch ({images:,} images "
                       f"at a global batch of {cfg.global_batch_size:,}"
                       + (f"; the {left_over:,} left over wait for the next epoch's shuffle" if left_over else "")
                       + f"): {lengths[steps]:,} {name}")
    lr = cfg.lr
    if cfg.lr_scaling == "linear":
        lr = cfg.lr * cfg.global_batch_size / cfg.lr_reference_batch
        derived.append(f"peak lr {lr:.3g} = train.lr {cfg.lr:g} x {cfg.global_batch_size:,} / "
                       f"{cfg.lr_reference_batch:,} (train.lr_scaling=linear)")
    resolved = dataclasses.replace(cfg, lr=lr, lr_scaling="none", **lengths)
    # Never longer than the run (whose last step always logs), so that the config saved says when the run logged.
    resolved = dataclasses.replace(resolved, log_every=max(1, min(resolved.log_every, resolved.steps)))
    if resolved.warmup_steps and resolved.warmup_steps >= resolved.steps:
        logger.warning("the warm-up (%d steps) is as long as the run (%d steps) or longer, so the learning rate never "
                       "reaches its peak: shorten train.warmup_epochs or train.warmup_steps",
                       resolved.warmup_steps, resolved.steps)
    return resolved, "; ".join(derived)
