"""Checkpoints: the full training state, to resume a run exactly.

``<run>/checkpoints/step_00001000/`` holds ``accelerator.save_state`` (model, optimizer, every process's RNG state),
``trainer_state.json`` (the step), the run's ``config.yaml`` and, when the run averages its weights,
``averaged_model.safetensors``. A checkpoint is written under a temporary name and
renamed into place, so a run killed while saving never leaves a broken latest checkpoint. (The encoder a finished
run exports for use elsewhere is written by ``mpp.models.pretrained.export_encoder``.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Optional

import torch
import yaml
from accelerate import Accelerator
from safetensors.torch import load_file, save_file
from timm.utils import ModelEmaV3

from mpp.config import ConfigError, TrainingRunConfig, config_to_dict, save_config
from mpp.run.directory import CHECKPOINTS_DIR, CONFIG_FILE, PARTIAL_SUFFIX

STATE_FILE = "trainer_state.json"
AVERAGED_FILE = "averaged_model.safetensors"


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINTS_DIR / f"step_{step:08d}"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    directory = run_dir / CHECKPOINTS_DIR
    if not directory.is_dir():
        return []
    found = [path for path in directory.glob("step_*")
             if not path.name.endswith(PARTIAL_SUFFIX) and (path / STATE_FILE).is_file()]
    return sorted(found, key=lambda path: read_step(path))


def read_step(checkpoint: Path) -> int:
    return json.loads((checkpoint / STATE_FILE).read_text())["step"]


def save_checkpoint(
    accelerator: Accelerator, run_dir: Path, step: int, config: Any, keep: int, averaged: Optional[ModelEmaV3] = None
) -> Path:
    """Save the full training state after ``step`` optimizer steps (and the averaged weights, if any); keep the
    ``keep`` newest. Every process calls."""
    final = checkpoint_path(run_dir, step)
    partial = final.with_name(final.name + PARTIAL_SUFFIX)
    if accelerator.is_main_process:
        for leftover in final.parent.glob(f"*{PARTIAL_SUFFIX}"):  # left by a run killed while saving
            shutil.rmtree(leftover)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(partial))
    if accelerator.is_main_process:
        (partial / STATE_FILE).write_text(json.dumps({"step": step}))
        save_config(config, partial / CONFIG_FILE)
        if averaged is not None:
            save_file({name: value.detach().cpu().contiguous() for name, value in averaged.module.state_dict().items()},
                      partial / AVERAGED_FILE)
        if final.exists():  # the same step saved by an earlier, resumed attempt
            shutil.rmtree(final)
        partial.rename(final)
        for old in list_checkpoints(run_dir)[:-keep]:
            shutil.rmtree(old)
    accelerator.wait_for_everyone()
    return final


def resume_checkpoint(resume: str, run_dir: Path) -> Optional[Path]:
    """The checkpoint ``resume`` names: none for "", the run's latest (if any) for "auto", else that path."""
    if not resume:
        return None
    if resume == "auto":
        checkpoints = list_checkpoints(run_dir)
        return checkpoints[-1] if checkpoints else None
    path = Path(resume)
    if not (path / STATE_FILE).is_file():
        raise ConfigError(
            f"resume={resume} is not a checkpoint (no {STATE_FILE} inside); "
            f"pass resume=auto or a directory under <output_dir>/{CHECKPOINTS_DIR}/"
        )
    return path


def check_resume_compatible(checkpoint: Path, config: TrainingRunConfig) -> None:
    """Refuse to resume a checkpoint whose model or objective differs from the current config: each section (or
    top-level key, such as ``init``) of the config's ``RESUME_MUST_MATCH`` must be as it was."""
    saved = yaml.safe_load((checkpoint / CONFIG_FILE).read_text())
    current = config_to_dict(config)
    changed = []
    for section in config.RESUME_MUST_MATCH:
        now, then = current[section], saved.get(section)
        if isinstance(now, dict):
            pairs = [(f"{section}.{key}", value, (then or {}).get(key)) for key, value in now.items()]
        else:
            pairs = [(section, now, then)]
        changed += [f"{key}: {old!r} in the checkpoint, {new!r} now" for key, new, old in pairs if new != old]
    if changed:
        raise ConfigError(
            f"cannot resume from {checkpoint}: the model or objective changed:\n  "
            + "\n  ".join(changed)
            + "\nresume with the checkpoint's settings, or start a new run in another output_dir"
        )


def load_checkpoint(accelerator: Accelerator, checkpoint: Path, averaged: Optional[ModelEmaV3] = None) -> int:
    """Restore the full training state; returns the number of optimizer steps already taken."""
    hook = accelerator.register_load_state_pre_hook(load_weights_through_the_host)
    try:
        accelerator.load_state(str(checkpoint))
    finally:
        hook.remove()
    if averaged is not None:
        if not (checkpoint / AVERAGED_FILE).is_file():
            raise ConfigError(f"{checkpoint} holds no averaged weights ({AVERAGED_FILE}); resume with the "
                              "checkpoint's settings (no weight averaging)")
        averaged.module.load_state_dict(load_file(checkpoint / AVERAGED_FILE))  # read on the host, copied over
    return read_step(checkpoint)


def load_weights_through_the_host(models: list[torch.nn.Module], input_dir: str) -> None:
    """accelerate's load_state pre-hook: each model's weights, as save_state wrote them, read on the host and copied
    in; the models are then taken off the list accelerate loads. Its own loading asks safetensors where the model's
    tensors are stored, which an XLA tensor cannot say."""
    for index, model in enumerate(models):
        model.load_state_dict(load_file(Path(input_dir) / (f"model_{index}.safetensors" if index else
                                                           "model.safetensors")))
    models.clear()
