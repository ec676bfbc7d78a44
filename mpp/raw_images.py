"""Raw images as the models take them: uint8 (decoded files, which the loader hands on as they are, a quarter of the
bytes of floats) or float in [0, 1] (in-memory sources, and every view once cropped). The one conversion between the
two lives here."""

from __future__ import annotations

import torch

__all__ = ["unit_interval"]  # what study/, tools/ and users may import from here


def unit_interval(images: torch.Tensor) -> torch.Tensor:
    """Raw images as float in [0, 1]: uint8 ones scaled on whatever device they reached, float ones unchanged."""
    return images.float().div_(255) if images.dtype == torch.uint8 else images
