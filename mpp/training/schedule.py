"""The learning-rate schedule: linear warm-up, then cosine or linear decay (App. B.1), a pure function of the step;
and the schedule in steps from one given in epochs, with the peak learning rate scaled to the batch."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal, Optional

from mpp.config.training import TrainConfig
from mpp.errors import ConfigError


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
    """Optimizer steps that read ``epochs`` passes over ``images`` training images, ``global_batch_size`` a step
    (rounded up: at least the epochs asked for)."""
    return math.ceil(epochs * images / global_batch_size - 1e-9)


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
        derived.append(f"train.{epochs}={getattr(cfg, epochs):g} of {images:,} images at a global batch of "
                       f"{cfg.global_batch_size:,}: {lengths[steps]:,} {name}")
    lr = cfg.lr
    if cfg.lr_scaling == "linear":
        lr = cfg.lr * cfg.global_batch_size / cfg.lr_reference_batch
        derived.append(f"peak lr {lr:.3g} = train.lr {cfg.lr:g} x {cfg.global_batch_size:,} / "
                       f"{cfg.lr_reference_batch:,} (train.lr_scaling=linear)")
    resolved = dataclasses.replace(cfg, lr=lr, lr_scaling="none", **lengths)
    return resolved, "; ".join(derived)
