"""What masked patch prediction predicts for each patch (paper Sec. 4.6, App. B.1.2): one object per kind of target
(``PatchTarget``), owning the prediction head's size, the targets, the loss and the colour classes its accuracy is
scored on; ``mpp.target`` picks one from ``TARGETS``.

All targets come from the unnormalised image in [0, 1] (a uint8 one scaled first). Patches are numbered row by row,
as timm's patch embedding flattens its grid, so target ``i`` belongs to token ``i``. A grayscale image counts as RGB
with equal channels, so the class space stays ``2 ** (3 * bits)`` whatever the input.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable

import torch
import torch.nn.functional as F
from einops import rearrange, repeat

from mpp.config.model import MPPConfig
from mpp.errors import ConfigError
from mpp.raw_images import unit_interval

__all__ = ["class_colours"]  # what study/, tools/ and users may import from here


def as_rgb(images: torch.Tensor) -> torch.Tensor:
    """(b c h w) raw images with c = 1 or 3 -> (b 3 h w) in [0, 1]; grayscale channels replicated (a view)."""
    if images.shape[1] not in (1, 3):
        raise ValueError(f"colour targets need 1 or 3 channels, got images of shape {tuple(images.shape)}")
    return unit_interval(images).expand(-1, 3, -1, -1)


def num_colour_classes(bits: int) -> int:
    return 2 ** (3 * bits)


def quantise_colours(colours: torch.Tensor, bits: int) -> torch.Tensor:
    """(... 3) RGB values in [0, 1] -> (...) class index r * 2^(2 bits) + g * 2^bits + b of the quantised channels."""
    levels = 2**bits
    quantised = (colours * levels).floor().clamp(0, levels - 1).long()
    weights = torch.tensor([levels * levels, levels, 1], device=colours.device)
    return (quantised * weights).sum(dim=-1)


def colour_targets(images: torch.Tensor, patch_size: int, cells_per_side: int = 1, bits: int = 3) -> torch.Tensor:
    """Quantised colours of each patch downsized to ``cells_per_side`` x ``cells_per_side``.

    ``cells_per_side=1`` is the paper's 3-bit mean colour (one 512-way prediction per patch); ``4`` its 4x4 downsized
    patch (16 predictions). Returns (b n s^2) class indices, cells row by row within the patch.
    """
    if patch_size % cells_per_side:
        raise ValueError(f"patch size {patch_size} is not divisible into {cells_per_side} cells per side")
    cell_means = F.avg_pool2d(as_rgb(images).float(), kernel_size=patch_size // cells_per_side)
    cells = rearrange(cell_means, "b c (h s1) (w s2) -> b (h w) (s1 s2) c", s1=cells_per_side, s2=cells_per_side)
    return quantise_colours(cells, bits)


def pixel_targets(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """The full patch for L2 regression: (b n (p p 3)), pixel-major with channels innermost."""
    return rearrange(as_rgb(images).float(), "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=patch_size, p2=patch_size)


def class_colours(classes: torch.Tensor, bits: int) -> torch.Tensor:
    """(...) colour classes -> (... 3) RGB in [0, 1]: the centre of each quantised channel's interval (the inverse of
    ``quantise_colours`` up to quantisation)."""
    levels = 2**bits
    channels = torch.stack([classes // (levels * levels), classes // levels % levels, classes % levels], dim=-1)
    return (channels.float() + 0.5) / levels


class PatchTarget(ABC):
    """One kind of target for patches of ``patch_size`` pixels. Shapes: images (b c h w) raw in [0, 1]; k corrupted
    patches per image; a prediction and its target hold t values per patch (t colour cells, or the patch's pixels)."""

    outputs: int  # the prediction head's outputs per patch

    def __init__(self, patch_size: int, colour_bits: int) -> None:
        self.patch_size, self.colour_bits = patch_size, colour_bits

    @abstractmethod
    def targets(self, images: torch.Tensor) -> torch.Tensor:
        """Every patch's target: (b n t) colour classes, or (b n (p p 3)) pixels."""

    @abstractmethod
    def prediction(self, head_output: torch.Tensor) -> torch.Tensor:
        """(b k outputs) -> the prediction, shaped as ``loss`` takes it."""

    @abstractmethod
    def loss(self, prediction: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss and the colour accuracy of the corrupted patches' predictions (scalars)."""

    def scored_classes(self, images: torch.Tensor) -> torch.Tensor:
        """(b n t) the colour classes accuracy is scored on."""
        return self.targets(images)

    @abstractmethod
    def predicted(self, prediction: torch.Tensor) -> torch.Tensor:
        """A prediction as a value of the target's kind: the most likely classes, or the pixels."""

    @abstractmethod
    def pictures(self, values: torch.Tensor) -> torch.Tensor:
        """(b k ...) targets or ``predicted`` values -> (b k p p 3) how they look as patches."""


class ColourTarget(PatchTarget):
    """Each patch downsized to ``cells_per_side`` x ``cells_per_side`` cells, each cell's quantised colour one of
    ``2 ** (3 * bits)`` classes: with one cell the paper's 3-bit mean colour (its best few-shot option); with 4, its
    4x4 downsized patch (16 predictions of 512 colours)."""

    def __init__(self, patch_size: int, cells_per_side: int, colour_bits: int) -> None:
        if patch_size % cells_per_side:
            raise ConfigError(f"mpp.downsampled_size={cells_per_side} must divide the patch size {patch_size}")
        super().__init__(patch_size, colour_bits)
        self.cells_per_side = cells_per_side
        self.outputs = cells_per_side**2 * num_colour_classes(colour_bits)

    def targets(self, images: torch.Tensor) -> torch.Tensor:
        return colour_targets(images, self.patch_size, self.cells_per_side, self.colour_bits)

    def prediction(self, head_output: torch.Tensor) -> torch.Tensor:
        return rearrange(head_output, "b k (t c) -> b k t c", t=self.cells_per_side**2)  # c: colour logits

    def loss(self, prediction: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss = F.cross_entropy(prediction.flatten(0, 2).float(), target.flatten())
        return loss, (prediction.argmax(dim=-1) == target).float().mean()

    def predicted(self, prediction: torch.Tensor) -> torch.Tensor:
        return prediction.argmax(dim=-1)

    def pictures(self, values: torch.Tensor) -> torch.Tensor:
        """Every cell painted with its class's colour."""
        s, p = self.cells_per_side, self.patch_size
        colours = rearrange(class_colours(values, self.colour_bits), "b k (s1 s2) c -> b k s1 s2 c", s1=s)
        return repeat(colours, "b k s1 s2 c -> b k (s1 r1) (s2 r2) c", r1=p // s, r2=p // s)


class PixelTarget(PatchTarget):
    """L2 regression of the whole patch, (p p 3) values (the paper's third option, slightly worse). Its accuracy is
    scored like the colour targets', on the predicted patch's mean colour, so runs compare."""

    def __init__(self, patch_size: int, colour_bits: int) -> None:
        super().__init__(patch_size, colour_bits)
        self.outputs = patch_size * patch_size * 3

    def targets(self, images: torch.Tensor) -> torch.Tensor:
        return pixel_targets(images, self.patch_size)

    def prediction(self, head_output: torch.Tensor) -> torch.Tensor:
        return head_output

    def loss(self, prediction: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        predicted_colour = self.mean_colour(prediction.float())
        return F.mse_loss(prediction.float(), target), (predicted_colour == self.mean_colour(target)).float().mean()

    def scored_classes(self, images: torch.Tensor) -> torch.Tensor:
        return colour_targets(images, self.patch_size, 1, self.colour_bits)

    def mean_colour(self, pixels: torch.Tensor) -> torch.Tensor:
        """(b k (p p 3)) patches -> (b k) class of their quantised mean colour."""
        return quantise_colours(rearrange(pixels, "b k (pp c) -> b k pp c", c=3).mean(dim=2), self.colour_bits)

    def predicted(self, prediction: torch.Tensor) -> torch.Tensor:
        return prediction

    def pictures(self, values: torch.Tensor) -> torch.Tensor:
        p = self.patch_size
        return rearrange(values.float(), "b k (p q c) -> b k p q c", p=p, q=p).clamp(0, 1)


# mpp.target -> the target for patches of a given size.
TARGETS: dict[str, Callable[[MPPConfig, int], PatchTarget]] = {
    "mean_colour": lambda cfg, patch_size: ColourTarget(patch_size, 1, cfg.colour_bits),
    "downsampled": lambda cfg, patch_size: ColourTarget(patch_size, cfg.downsampled_size, cfg.colour_bits),
    "pixels": lambda cfg, patch_size: PixelTarget(patch_size, cfg.colour_bits),
}
