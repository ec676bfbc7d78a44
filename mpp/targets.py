"""What masked patch prediction predicts for each patch (paper Sec. 4.6, App. B.1.2).

All targets come from the unnormalised image in [0, 1]. Patches are numbered row by row, as timm's patch embedding
flattens its grid, so target ``i`` belongs to token ``i``. A grayscale image counts as RGB with equal channels, so
the class space stays ``2 ** (3 * bits)`` whatever the input.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange


def as_rgb(images: torch.Tensor) -> torch.Tensor:
    """(b c h w) with c = 1 or 3 -> (b 3 h w); grayscale channels replicated (a view, no copy)."""
    if images.shape[1] not in (1, 3):
        raise ValueError(f"colour targets need 1 or 3 channels, got images of shape {tuple(images.shape)}")
    return images.expand(-1, 3, -1, -1)


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
