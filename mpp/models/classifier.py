"""An image classifier on the encoder: supervised pre-training and fine-tuning both train this (paper Sec. 3.1-3.2).

An ``ImageEncoder`` (normalise -> timm's ViT without a head -> the [class] token's output or the mean of the patch
tokens, App. D.3) with a head: one tanh hidden layer (the pre-training head) or a single linear layer (fine-tuning).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, Sequence

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from mpp.config.model import ClassifierConfig
from mpp.errors import ConfigError
from mpp.models.encoder import BuiltOnEncoder, InputNormalisation
from mpp.models.mixing import BatchMixing


def classification_head(dim: int, num_classes: int, kind: Literal["mlp", "linear"]) -> nn.Module:
    """The head; its output layer starts at zero, so the first logits are exactly zero (Sec. 3.2)."""
    output = nn.Linear(dim, num_classes)
    nn.init.zeros_(output.weight)
    nn.init.zeros_(output.bias)
    if kind == "linear":
        return output
    return nn.Sequential(nn.Linear(dim, dim), nn.Tanh(), output)


@dataclass
class ClassifierOutput:
    loss: torch.Tensor  # scalar
    accuracy: torch.Tensor  # scalar: top-1 over the batch
    logits: torch.Tensor  # (b classes)


class ImageClassifier(BuiltOnEncoder):
    def __init__(
        self,
        encoder: VisionTransformer,
        num_classes: int,
        cfg: ClassifierConfig,
        mean: Sequence[float],
        std: Sequence[float],
        mixing: Optional[BatchMixing] = None,
    ) -> None:
        if num_classes < 2:
            raise ConfigError(f"a classifier needs labelled data with at least 2 classes; the data declares "
                              f"{num_classes} (unlabelled, or a streamed label column that is not a ClassLabel)")
        super().__init__(encoder, InputNormalisation(mean, std, encoder.patch_embed.proj.in_channels))
        self.cfg, self.mixing = cfg, mixing
        self.head = classification_head(encoder.embed_dim, num_classes, cfg.head)

    def forward(self, images: torch.Tensor, labels: torch.Tensor, random_keys: Optional[torch.Tensor] = None
                ) -> ClassifierOutput:
        """(b c h w) raw images (uint8, or float in [0, 1]), (b) class indices; the images' random keys go unused: a
        classifier draws nothing per image on the device (its per-image augmentation is the loader's; dropout,
        drop-path and the pass's mixing draw from the seeded global generators). In training with ``mixing``, the
        loss is against the mixed soft targets (label smoothing in them) and the accuracy against each image's own
        label."""
        if self.training and self.mixing is not None:
            images, targets = self.mixing(images, labels)
            smoothing = 0.0  # the mixed targets are smoothed already
        else:
            targets, smoothing = labels, self.cfg.label_smoothing
        logits = self.head(self.features(images, self.cfg.pool))
        loss = F.cross_entropy(logits.float(), targets, label_smoothing=smoothing)
        accuracy = (logits.argmax(dim=-1) == labels).float().mean()
        return ClassifierOutput(loss=loss, accuracy=accuracy, logits=logits)
