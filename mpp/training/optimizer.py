"""The optimizer of every recipe: AdamW for pre-training (App. B.1), SGD with momentum for fine-tuning (Sec. 3.2).

Created for the device it will step on, as torch's own lists of supported devices say:
- fused (one kernel per step) where torch has fused kernels for the device (CUDA, CPU);
- elsewhere AdamW is capturable where torch allows it (XLA), so that its step count and bias corrections stay on the
  device and a TPU step needs nothing from the host. torch runs a capturable AdamW on XLA in its single-tensor
  implementation only (its foreach one refuses XLA), which is one traced graph all the same;
- foreach otherwise (SGD on XLA: it keeps no step count).
A step whose loss or gradient is not finite is skipped on the device in every case (non_finite.py). Weight decay
skips biases, norms, tokens and position embeddings (the model's ``no_weight_decay``).
"""

from __future__ import annotations

import torch
from timm.optim import create_optimizer_v2
from mpp.config.training import TrainConfig
from mpp.private_apis import capturable_optimizer_devices, fused_optimizer_devices


def create_optimizer(model: torch.nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """The optimizer ``cfg`` names for ``model``, whose parameters will live on ``device``."""
    fused = device.type in fused_optimizer_devices()
    if cfg.optimizer == "sgd":  # timm's "momentum": plain (not Nesterov) momentum, as the paper
        return create_optimizer_v2(model, opt="momentum", lr=cfg.lr, weight_decay=cfg.weight_decay,
                                   momentum=cfg.momentum, **({"fused": True} if fused else {"foreach": True}))
    if fused:
        kernels = {"fused": True}
    elif device.type in capturable_optimizer_devices():
        kernels = {"foreach": False, "capturable": True}
    else:
        kernels = {"foreach": True}
    return create_optimizer_v2(model, opt="adamw", lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas,
                               **kernels)
