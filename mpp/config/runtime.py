"""How a run uses its machine: what training (``train.*``) and evaluation (``eval.*``) share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from mpp.errors import ConfigError


@dataclass
class RuntimeConfig:
    """How a run uses its machine: the settings training (train.*) and evaluation (eval.*) share."""

    mixed_precision: Literal["no", "bf16", "fp16"] = "no"  # autocast precision of the forward pass (bf16 on GPUs)
    compile: bool = False  # torch.compile the model (accelerate's "inductor" backend): a slow start, faster steps on
    # a GPU; false leaves it to `accelerate launch --dynamo_backend` (off unless asked)
    cpu_threads: int = 0  # on a CPU: threads per process; 0 shares the cores among this machine's processes
    # Several processes: the longest one waits for the others in a collective before the run ends with an error (a
    # process that vanished without closing its connections, e.g. with its machine). Above the longest pause of one
    # process: the main process writing a checkpoint, a first compilation.
    collective_timeout_s: int = 1800
    # Experiment trackers, any that accelerate supports (wandb, mlflow, aim, comet_ml, ...) whose package is
    # installed, each configured as its package reads it (e.g. WANDB_PROJECT). TensorBoard is always one of them:
    # the run directory keeps its events and pictures.
    log_with: tuple[str, ...] = ("tensorboard",)

    section: ClassVar[str] = ""  # the config key this is read from, for messages

    def __post_init__(self) -> None:
        if self.collective_timeout_s < 1:
            raise ConfigError(f"{self.section}.collective_timeout_s={self.collective_timeout_s} must be at least 1")
