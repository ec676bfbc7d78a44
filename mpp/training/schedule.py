"""The learning-rate schedule: linear warm-up, then cosine or linear decay (App. B.1), a pure function of the step."""

from __future__ import annotations

import math
from typing import Literal


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
