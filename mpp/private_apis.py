"""The private APIs of the libraries underneath that the package relies on, each behind one function of its own.

No public API gives these. ``tests/test_private_apis.py`` checks every one against the installed library (that it
exists and still does what the package relies on), so a release that renames or changes one fails there, naming it,
instead of somewhere in a run.
"""

from __future__ import annotations

import torch
from accelerate import Accelerator
from timm.models.vision_transformer import VisionTransformer
from torch.optim.optimizer import _get_capturable_supported_devices
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices


def prepared_models_and_optimizers(accelerator: Accelerator) -> tuple[list[torch.nn.Module], list]:
    """The models and optimizers ``accelerator.prepare`` registered: what ``save_state`` writes."""
    return list(accelerator._models), list(accelerator._optimizers)


def forget_prepared_loader(accelerator: Accelerator, loader: torch.utils.data.DataLoader) -> None:
    """Take a prepared loader off the list whose states ``save_state`` writes."""
    accelerator._dataloaders.remove(loader)


def fused_optimizer_devices() -> list[str]:
    """Device types torch has fused AdamW and SGD kernels for."""
    return _get_fused_kernels_supported_devices()


def capturable_optimizer_devices() -> list[str]:
    """Device types on which torch's AdamW may keep its step count on the device (``capturable=True``)."""
    return _get_capturable_supported_devices()


def add_position_embeddings(encoder: VisionTransformer, patches: torch.Tensor) -> torch.Tensor:
    """(b n d) patch embeddings -> (b 1+n d): the [class] token prepended and the position embeddings added (with
    their dropout), as timm's ``VisionTransformer.forward_features`` does between ``patch_embed`` and the blocks."""
    return encoder._pos_embed(patches)
