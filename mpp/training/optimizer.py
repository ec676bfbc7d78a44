"""The optimizer of every recipe: AdamW for pre-training (App. B.1), SGD with momentum for fine-tuning (Sec. 3.2).

Created for the device it will step on, as torch's own lists of supported devices say:
- fused (one kernel per step) where torch has fused kernels for the device (CUDA, CPU);
- elsewhere AdamW is capturable where torch allows it (XLA), so that its step count and bias corrections stay on the
  device and a TPU step needs nothing from the host. torch runs a capturable AdamW on XLA in its single-tensor
  implementation only (its foreach one refuses XLA), which is one traced graph all the same;
- foreach otherwise (SGD on XLA: it keeps no step count).
A step whose loss or gradient is not finite is skipped on the device in every case (non_finite.py). Weight decay
skips biases, norms, tokens and position embeddings (the model's ``no_weight_decay``). Fine-tuning may decay the
learning rate layer by layer (``finetune.layer_decay``): each parameter group then carries its ``lr_scale``, its share
of the peak rate.
"""

from __future__ import annotations

from typing import Any

import torch
from timm.optim import create_optimizer_v2, param_groups_layer_decay, param_groups_weight_decay
from mpp.config.training import TrainConfig
from mpp.models.classifier import ImageClassifier
from mpp.private_apis import capturable_optimizer_devices, fused_optimizer_devices


def create_optimizer(model: torch.nn.Module, cfg: TrainConfig, device: torch.device, layer_decay: float = 1.0
                     ) -> torch.optim.Optimizer:
    """The optimizer ``cfg`` names for ``model``, whose parameters will live on ``device``; with ``layer_decay`` below
    1, for a classifier, in layer_decay_groups' groups."""
    fused = device.type in fused_optimizer_devices()
    groups = ({"param_group_fn": lambda model: layer_decay_groups(model, cfg.weight_decay, layer_decay)}
              if layer_decay < 1 else {})
    if cfg.optimizer == "sgd":  # timm's "momentum": plain (not Nesterov) momentum, as the paper
        return create_optimizer_v2(model, opt="momentum", lr=cfg.lr, weight_decay=cfg.weight_decay,
                                   momentum=cfg.momentum, **({"fused": True} if fused else {"foreach": True}), **groups)
    if fused:
        kernels = {"fused": True}
    elif device.type in capturable_optimizer_devices():
        kernels = {"foreach": False, "capturable": True}
    else:
        kernels = {"foreach": True}
    return create_optimizer_v2(model, opt="adamw", lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas,
                               **kernels, **groups)


def layer_decay_groups(model: ImageClassifier, weight_decay: float, layer_decay: float) -> list[dict[str, Any]]:
    """BEiT's layer-wise learning rates for a classifier on the encoder (MAE fine-tunes with them too), each group's
    ``lr_scale`` its share of the peak rate: 1 for the head, layer_decay^(L - i) for block i of L (from 0),
    layer_decay^(L + 1) for the patch embedding, [class] token and position embedding; weight decay as without.

    timm's param_groups_layer_decay groups the encoder by its ViT's group_matcher (the embeddings first, then each
    block; the final norm with the last block) and gives its last layer a scale of 1, the head's in a timm model: one
    more factor of ``layer_decay`` here leaves 1 to our head alone."""
    encoder = param_groups_layer_decay(model.encoder, weight_decay, model.encoder.no_weight_decay(),
                                       layer_decay=layer_decay)
    return ([{**group, "lr_scale": layer_decay * group["lr_scale"]} for group in encoder]
            + [{**group, "lr_scale": 1.0} for group in param_groups_weight_decay(model.head, weight_decay)])
