"""The optimizer of every recipe: AdamW for pre-training (App. B.1), SGD with momentum for fine-tuning (Sec. 3.2).

Both are created fused: one kernel per step, and a step whose loss or gradient is not finite is skipped on the
device through ``found_inf`` (non_finite.py). Weight decay skips biases, norms, tokens and position embeddings
(the model's ``no_weight_decay``).
"""

from __future__ import annotations

import torch
from timm.optim import create_optimizer_v2

from mpp.config import TrainConfig


def create_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":  # timm's "momentum": plain (not Nesterov) momentum, as the paper
        return create_optimizer_v2(model, opt="momentum", lr=cfg.lr, weight_decay=cfg.weight_decay,
                                   momentum=cfg.momentum, fused=True)
    return create_optimizer_v2(model, opt="adamw", lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas,
                               fused=True)
