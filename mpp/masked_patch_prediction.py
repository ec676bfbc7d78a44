"""The masked patch prediction model: a timm ViT, a learnable [mask] embedding and a per-patch prediction head.

Paper Sec. 4.6: corrupt patch embeddings, encode, and predict each corrupted patch's target from that patch's own
output token. Loss and accuracy count corrupted patches only. The head runs on the k corrupted tokens alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

import torch
import torch.nn.functional as F
from einops import rearrange
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from mpp.config import ConfigError, MPPConfig
from mpp.corruption import Corruption, corrupt_patch_embeddings, draw_corruption, select_patches
from mpp.encoder import InputNormalisation
from mpp.targets import colour_targets, num_colour_classes, pixel_targets, quantise_colours


def patch_mean_colour(pixels: torch.Tensor, bits: int) -> torch.Tensor:
    """(b k (p p 3)) patches -> (b k) class of their quantised mean colour."""
    return quantise_colours(rearrange(pixels, "b k (pp c) -> b k pp c", c=3).mean(dim=2), bits)


@dataclass
class MPPOutput:
    loss: torch.Tensor  # scalar
    accuracy: torch.Tensor  # scalar: fraction of right colour predictions over the corrupted patches
    prediction: torch.Tensor  # (b k t c) colour logits, or (b k (p p 3)) pixels
    target: torch.Tensor  # (b k t) colour classes, or (b k (p p 3)) pixels
    corruption: Corruption


class MaskedPatchPredictor(nn.Module):
    def __init__(
        self,
        encoder: VisionTransformer,
        cfg: MPPConfig,
        mean: Sequence[float],
        std: Sequence[float],
    ) -> None:
        super().__init__()
        # The encoder sees normalised pixels; targets come from the raw ones, so normalising happens here.
        self.normalise = InputNormalisation(mean, std, encoder.patch_embed.proj.in_channels)
        self.encoder = encoder
        self.cfg = cfg
        self.patch_size = encoder.patch_embed.patch_size[0]
        self.cells_per_side = cfg.downsampled_size if cfg.target == "downsampled" else 1
        if cfg.target == "downsampled" and self.patch_size % self.cells_per_side:
            raise ConfigError(
                f"mpp.downsampled_size={self.cells_per_side} must divide the patch size {self.patch_size}"
            )
        dim = encoder.embed_dim
        self.mask_embedding = nn.Parameter(torch.empty(dim))
        nn.init.trunc_normal_(self.mask_embedding, std=0.02)
        if cfg.target == "pixels":
            outputs = self.patch_size * self.patch_size * 3
        else:
            outputs = self.cells_per_side**2 * num_colour_classes(cfg.colour_bits)
        self.head = nn.Linear(dim, outputs)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        return {f"encoder.{name}" for name in self.encoder.no_weight_decay()} | {"mask_embedding"}

    def draw_corruption(self, batch_size: int, generator: Optional[torch.Generator] = None) -> Corruption:
        """A corruption of ``batch_size`` images, on ``generator``'s device if given, else the model's."""
        return draw_corruption(
            batch_size,
            self.encoder.patch_embed.num_patches,
            self.cfg.corruption_rate,
            self.cfg.mask_fraction,
            self.cfg.random_fraction,
            device=generator.device if generator is not None else self.mask_embedding.device,
            generator=generator,
        )

    def encode(self, images: torch.Tensor, corruption: Corruption) -> torch.Tensor:
        """(b c h w) raw images in [0, 1] -> (b n d) output tokens of the patches, corrupted as drawn."""
        encoder = self.encoder
        x = encoder.patch_embed(self.normalise(images))  # (b n d): before position embeddings
        x = corrupt_patch_embeddings(x, self.mask_embedding, corruption)
        # The rest of timm's VisionTransformer.forward_features, unchanged.
        x = encoder._pos_embed(x)
        x = encoder.patch_drop(x)
        x = encoder.norm_pre(x)
        x = encoder.blocks(x)
        x = encoder.norm(x)
        return x[:, encoder.num_prefix_tokens :]

    def targets(self, images: torch.Tensor) -> torch.Tensor:
        """(b c h w) raw images in [0, 1] -> (b n t) colour classes, or (b n (p p 3)) pixels."""
        if self.cfg.target == "pixels":
            return pixel_targets(images, self.patch_size)
        return self.scored_classes(images)

    def scored_classes(self, images: torch.Tensor) -> torch.Tensor:
        """(b n t) the colour classes accuracy is scored on: the targets, or for pixels each patch's mean colour."""
        cells = 1 if self.cfg.target == "pixels" else self.cells_per_side
        return colour_targets(images, self.patch_size, cells, self.cfg.colour_bits)

    def loss(self, prediction: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss and colour accuracy of the corrupted patches' predictions (``MPPOutput`` shapes)."""
        if self.cfg.target == "pixels":
            loss = F.mse_loss(prediction.float(), target)
            # Scored like the colour targets, on the mean colour of the predicted patch, so runs compare.
            predicted_colour = patch_mean_colour(prediction.float(), self.cfg.colour_bits)
            accuracy = (predicted_colour == patch_mean_colour(target, self.cfg.colour_bits)).float().mean()
            return loss, accuracy
        loss = F.cross_entropy(prediction.flatten(0, 2).float(), target.flatten())
        accuracy = (prediction.argmax(dim=-1) == target).float().mean()
        return loss, accuracy

    def forward(
        self,
        images: torch.Tensor,
        labels: Optional[torch.Tensor] = None,
        corruption: Optional[Corruption] = None,
    ) -> MPPOutput:
        """One MPP pass over raw images (b c h w) in [0, 1]. Labels are ignored: the objective is self-supervised.

        A fresh corruption is drawn unless one is given.
        """
        if corruption is None:
            corruption = self.draw_corruption(images.shape[0])
        tokens = self.encode(images, corruption)
        prediction = self.head(select_patches(tokens, corruption.positions))
        if self.cfg.target != "pixels":
            prediction = rearrange(prediction, "b k (t c) -> b k t c", t=self.cells_per_side**2)
        target = select_patches(self.targets(images), corruption.positions)
        loss, accuracy = self.loss(prediction, target)
        return MPPOutput(loss=loss, accuracy=accuracy, prediction=prediction, target=target, corruption=corruption)


@torch.no_grad()
def most_frequent_class_accuracy(model: MaskedPatchPredictor, batches: Iterable[torch.Tensor]) -> float:
    """The MPP accuracy of always predicting the most frequent colour class of these (b c h w) images: the floor
    a trained predictor has to clear (corrupted patches are a uniform sample of all patches)."""
    counts = torch.zeros(num_colour_classes(model.cfg.colour_bits), dtype=torch.long)
    for images in batches:
        counts += torch.bincount(model.scored_classes(images).flatten().cpu(), minlength=len(counts))
    return (counts.max() / counts.sum()).item()
