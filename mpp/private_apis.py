"""The private APIs of the libraries underneath that the package relies on, each behind one function of its own.

No public API gives these. ``tests/test_private_apis.py`` checks every one against the installed library (that it
exists and still does what the package relies on), so a release that renames or changes one fails there, naming it,
instead of somewhere in a run.
"""

from __future__ import annotations

import os
from typing import TypeVar

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.data_loader import BatchSamplerShard, SeedableRandomSampler
from accelerate.utils import SAFE_WEIGHTS_NAME, parse_flag_from_env
from timm.data.mixup import Mixup
from timm.models.vision_transformer import VisionTransformer
from torch.optim.optimizer import _get_capturable_supported_devices
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

__all__ = ["saved_model_file"]  # what study/, tools/ and users may import from here

ModuleClass = TypeVar("ModuleClass", bound=type[torch.nn.Module])


def prepared_models_and_optimizers(accelerator: Accelerator) -> tuple[list[torch.nn.Module], list]:
    """The models and optimizers ``accelerator.prepare`` registered: what ``save_state`` writes."""
    return list(accelerator._models), list(accelerator._optimizers)


def forget_prepared_loader(accelerator: Accelerator, loader: torch.utils.data.DataLoader) -> None:
    """Take a prepared loader off the list whose states ``save_state`` writes."""
    accelerator._dataloaders.remove(loader)


def saved_model_file(index: int) -> str:
    """The file in which ``save_state`` writes the weights of the index-th prepared model: ``SAFE_WEIGHTS_NAME``
    (model.safetensors), then model_1.safetensors and on; accelerate has no name for those after the first."""
    return SAFE_WEIGHTS_NAME if not index else SAFE_WEIGHTS_NAME.replace(".", f"_{index}.")


def forget_accelerate_state() -> None:
    """Forget the process-wide state every Accelerator of this process shares (its process, its precision, its
    accumulation), as accelerate's own tests do between two of them: the next Accelerator is made afresh, with its own
    settings. A process group still up stays, and the next Accelerator joins it."""
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def leave_process_group_to_launcher() -> None:
    """From now on, ``Accelerator.end_training`` leaves this process's group up, as in a process that accelerate's
    fork launch started (it sets ``FORK_LAUNCHED``; ``notebook_launcher`` starting several processes does not): the
    next Accelerator joins that group, where a group made anew would read the first one's addresses, stale, from the
    launcher's store."""
    os.environ["FORK_LAUNCHED"] = "1"


def launched_with_fsdp() -> bool:
    """Whether ``accelerate launch --use_fsdp`` started this process: it says so only in the environment it sets."""
    return parse_flag_from_env("ACCELERATE_USE_FSDP")


def launched_on_cpu() -> bool:
    """Whether the launch asked for CPU processes (``ACCELERATE_USE_CPU=1``, or ``accelerate launch --cpu``), as
    accelerate's own state reads it from the environment."""
    return parse_flag_from_env("ACCELERATE_USE_CPU")


def accelerate_launch_variable() -> str:
    """A variable ``accelerate launch`` sets in the environment of the process it starts, read as the sign that a
    process has that launcher: accelerate names no variable for that."""
    return "ACCELERATE_DYNAMO_BACKEND"


def with_fsdp2_tensor_lookup(cls: ModuleClass) -> ModuleClass:
    """The module class with ``get_parameter_or_buffer``, as a transformers model has it: accelerate's FSDP2 loading
    (``fsdp2_load_full_state_dict``) up to 1.15 looks each state-dict tensor up by it, and on a model without it
    splits the name at its last dot, which a parameter of the model itself (no submodule) has none of. From 1.16 it
    finds such a parameter itself and asks no lookup; this one serves the earlier releases pyproject.toml allows."""

    def get_parameter_or_buffer(self: torch.nn.Module, target: str) -> torch.Tensor:
        try:
            return self.get_parameter(target)
        except AttributeError:
            return self.get_buffer(target)

    cls.get_parameter_or_buffer = get_parameter_or_buffer
    return cls


def fused_optimizer_devices() -> list[str]:
    """Device types torch has fused AdamW and SGD kernels for."""
    return _get_fused_kernels_supported_devices()


def capturable_optimizer_devices() -> list[str]:
    """Device types on which torch's AdamW may keep its step count on the device (``capturable=True``)."""
    return _get_capturable_supported_devices()


def tell_fused_optimizer_whether_to_skip(optimizer: torch.optim.Optimizer, skip: torch.Tensor) -> None:
    """From now on, each step of a fused optimizer (AdamW or SGD with ``fused=True``) leaves parameters, optimizer
    state and step count as they are where ``skip`` (a bool scalar on the device) is true, decided on the device: the
    kernels read it as ``found_inf``, which ``GradScaler.step`` sets on an optimizer whose step supports AMP scaling.
    Not quite for fused SGD with momentum's first step: skipped, it keeps the momentum buffer it made by
    ``empty_like``, unset, and its next step reads it (torch 2.14); ``NonFiniteGuard`` gives it zeros first."""
    optimizer.found_inf = skip.float()


def add_position_embeddings(encoder: VisionTransformer, patches: torch.Tensor) -> torch.Tensor:
    """(b n d) patch embeddings -> (b 1+n d): the [class] token prepended and the position embeddings added (with
    their dropout), as timm's ``VisionTransformer.forward_features`` does between ``patch_embed`` and the blocks."""
    return encoder._pos_embed(patches)


def seedable_shuffle(size: int, seed: int) -> SeedableRandomSampler:
    """accelerate's shuffle of ``range(size)`` under ``use_seedable_sampler``: after ``set_epoch(e)``, the order a
    shuffled loader prepared by accelerate reads in epoch e (drawn with ``seed + e``)."""
    return SeedableRandomSampler(range(size), data_seed=seed)


def process_share_of_batches(batches: torch.utils.data.BatchSampler, num_processes: int,
                             process_index: int) -> BatchSamplerShard:
    """accelerate's split of a loader's batches between processes: each takes whole batches in turn."""
    return BatchSamplerShard(batches, num_processes, process_index)


def mixup_batch_parameters(mixup: Mixup) -> tuple[float, bool]:
    """timm's draw for one batch in ``Mixup``'s "batch" mode, from numpy's global generator: the weight of each
    image's own label (1.0: this batch is not mixed) and whether it is cutmix's (else mixup's); the box is
    ``cutmix_bbox_and_lam``'s, drawn after it."""
    return mixup._params_per_batch()
