"""The pre-training curve's settings (``python -m study.curve``, presets in ``study/configs/curve_*.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from mpp.config.model import Pooling
from mpp.errors import ConfigError
from study.results_page import PublishedExperimentConfig

LONGER = "finetune-longer"  # the runs of ``longer_finetune_steps``, and their stage and results' key


@dataclass
class PretrainingCurveConfig(PublishedExperimentConfig):
    """``python -m study.curve``: frozen-feature quality as MPP pre-training grows. One MPP run per seed, of
    ``pretraining_epochs`` epochs, checkpointed every epoch; the encoder at initialisation and at each checkpoint of
    ``epochs`` read by the linear probe on every training label and by few-shot regression."""

    # Continued, it may read other lengths (checkpoints of the same runs, whose length, pretraining_epochs, is fixed)
    # and add the longer fine-tuning (runs of its own).
    FREE_ON_CONTINUE: ClassVar[tuple[str, ...]] = (*PublishedExperimentConfig.FREE_ON_CONTINUE, "epochs",
                                                   "longer_finetune_steps")

    output_dir: str = "runs/pretraining-curve"  # one folder per run inside, then results.md, results.json and the plot
    epochs: tuple[int, ...] = (1, 2, 4, 8, 16)  # the checkpoints read, besides the encoder at initialisation
    # Each seed's MPP run, in epochs (0: the last of ``epochs``). Set apart from ``epochs``, a curve read at a few
    # lengths first may be read at more of the same runs' checkpoints later: ``epochs`` may change when it continues.
    pretraining_epochs: int = 0
    features: Pooling = "avg"  # what the frozen protocols read: MPP trains the patch tokens, not the [class] token
    # Fine-tuned, besides (none: frozen readings only): the encoder at each length fine-tuned with this preset, and a
    # ViT from scratch trained as many steps as that length's pre-training and the fine-tuning together, by the same
    # preset: MPP's fine-tuned gain at each length. ``finetune`` overrides both (the labels, steps, the rate grid).
    finetune_preset: Optional[str] = None
    finetune: tuple[str, ...] = ()
    finetune_steps: int = 0  # the fine-tuning's optimizer steps (``finetune`` sets them): scratch adds them
    scratch_finetune: tuple[str, ...] = ()  # the from-scratch runs', after ``finetune`` (their warm-up, log steps)
    # Besides (0: not), MPP's encoder at the longest length fine-tuned this many steps by the same recipe, read against
    # the same scratch runs: whether MPP is held back by a fine-tuning kept as short as scratch's matched length allows
    # (MPP then trains more steps in all than scratch, a bias in MPP's favour).
    longer_finetune_steps: int = 0

    def presets(self) -> tuple[str, ...]:
        return ("mpp_preset", "eval_preset", *(("finetune_preset",) if self.finetune_preset else ()))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.finetune_preset and self.finetune_steps < 1:
            raise ConfigError("finetune_steps must give the fine-tuning's optimizer steps (the train.steps it sets): "
                              "the runs from scratch train as many more")
        longer = self.longer_finetune_steps
        if longer and not (self.finetune_preset and longer > self.finetune_steps):
            raise ConfigError(f"longer_finetune_steps={self.longer_finetune_steps} needs a finetune_preset and more "
                              f"steps than finetune_steps={self.finetune_steps} (0: no longer fine-tuning)")
        if not self.epochs or list(self.epochs) != sorted(set(self.epochs)) or self.epochs[0] < 1:
            raise ConfigError(f"epochs={list(self.epochs)} must list whole epochs from 1 up, each once, in order")
        self.pretraining_epochs = self.pretraining_epochs or self.epochs[-1]
        if self.epochs[-1] > self.pretraining_epochs:
            raise ConfigError(f"epochs={list(self.epochs)} reads checkpoints after {self.epochs[-1]} epochs of MPP "
                              f"runs of pretraining_epochs={self.pretraining_epochs}: set pretraining_epochs to "
                              f"{self.epochs[-1]} or more, or read shorter lengths")
