"""One training run, assembled the one way every recipe does it (and each point of a learning-rate sweep):

    batch plan -> optimizer -> the checkpoint to resume -> accelerate's prepare -> resume -> the run's batches from
    its step on (``mpp.data.training_batches``) -> the loop

Made before the run directory is claimed, so that data smaller than a batch, a batch that does not split over the
processes or a checkpoint that does not fit the config stops the run before anything is written; ``fit`` prepares and
trains.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from timm.models.vision_transformer import VisionTransformer
from timm.utils import ModelEmaV3
from torch.utils.data import Dataset, IterableDataset

from mpp.config.model import ModelConfig
from mpp.config.runs import TrainingRunConfig
from mpp.config.training import TrainConfig
from mpp.data.batch_order import plan_batches
from mpp.data.loading import check_batch_fits
from mpp.data.training_batches import training_batches
from mpp.models.pretrained import encoder_from_model_state
from mpp.run.session import Session
from mpp.training.checkpoint import (check_resume_compatible, check_resume_length, load_checkpoint,
                                     resume_checkpoint)
from mpp.training.engine import Monitor, TrainingRun, train
from mpp.training.optimizer import create_optimizer
from mpp.training.schedule import resolved_schedule

logger = logging.getLogger(__name__)


class Trainer:
    """Trains ``model`` on ``train_set`` as ``config`` (the run's whole config) says, on the schedule of ``train``
    (default: ``config.train``). A sweep's point, or the run after it, gives its own ``train`` (its learning rate),
    ``run_dir`` (its own folder: checkpoints, metrics) and ``resume``; ``ema_decay`` > 0 keeps a Polyak average of
    the weights (Table 2) and ``layer_decay`` < 1 scales each block's learning rate down with its depth from the
    head (fine-tuning's layer-wise decay); ``accuracy_name`` names the model's accuracy in logs and metrics, and
    ``log_prefix`` goes before every log line and TensorBoard tag."""

    def __init__(
        self,
        session: Session,
        model: torch.nn.Module,
        train_set: Dataset,
        config: TrainingRunConfig,
        *,
        train: Optional[TrainConfig] = None,
        run_dir: Optional[Path] = None,
        resume: Optional[str] = None,
        ema_decay: float = 0.0,
        layer_decay: float = 1.0,
        accuracy_name: str = "train_accuracy",
        log_prefix: str = "",
    ) -> None:
        self.session, self.model, self.train_set, self.run_config = session, model, train_set, config
        self.run_dir = run_dir or session.run_dir
        self.ema_decay, self.accuracy_name, self.log_prefix = ema_decay, accuracy_name, log_prefix
        accelerator = session.accelerator
        given = train or config.train
        self.plan = plan_batches(given, accelerator.num_processes)
        # A global batch larger than the data is refused before the schedule is made of it (an epoch of no steps)
        check_batch_fits(train_set, self.plan.global_batch_size)
        # What the loop reads: steps from epochs, the learning rate scaled to the batch; how, for the plan line.
        self.train_config, self.derivation = resolved_schedule(
            given, None if isinstance(train_set, IterableDataset) else len(train_set))
        self.optimizer = create_optimizer(model, self.train_config, accelerator.device, layer_decay)
        asked = config.resume if resume is None else resume
        self.checkpoint = resume_checkpoint(asked, self.run_dir)
        if self.checkpoint is not None:
            check_resume_compatible(self.checkpoint, config)
            check_resume_length(self.checkpoint, self.train_config.steps, self.run_dir)
        elif asked == "auto":  # documented: resuming where there is no checkpoint yet starts the run
            logger.info("%sno checkpoint in %s to resume: a new run starts", log_prefix, self.run_dir)
        self.averaged: Optional[ModelEmaV3] = None

    def describe(self) -> str:
        """The batch split, schedule and optimizer, for the log (derived once, logged once)."""
        plan, cfg = self.plan, self.train_config
        return (
            f"global batch {plan.global_batch_size} = {plan.micro_batch_size} per pass x {plan.num_processes} "
            f"process(es) x {plan.accumulation_steps} accumulation step(s); {cfg.steps} steps "
            f"({cfg.steps * plan.global_batch_size} images); peak lr {cfg.lr:.2e}, {cfg.warmup_steps} warm-up steps, "
            f"{cfg.decay} decay; {cfg.optimizer} optimizer, weight decay {cfg.weight_decay:g}"
            + (f"; weights averaged (decay {self.ema_decay})" if self.ema_decay else "")
            + ("; compiled with torch.compile (inductor)" if cfg.compile else "")
            + (f" ({self.derivation})" if self.derivation else "")
        )

    def fit(self, monitors: Sequence[Monitor] = ()) -> dict[str, Any]:
        """Prepare, resume where there is a checkpoint, train to the last step; returns the run's metrics."""
        accelerator = self.session.accelerator
        accelerator.free_memory()  # only this run's model and optimizer are prepared, so only they are checkpointed
        # A copy of the weights, lerped towards the trained ones after every step. Copied before accelerate places
        # the model, then put beside it: timm's ModelEmaV3 cannot be made on an XLA device.
        self.averaged = ModelEmaV3(self.model, decay=self.ema_decay) if self.ema_decay else None
        self.model, self.optimizer = accelerator.prepare(self.model, self.optimizer)
        if self.averaged is not None:
            self.averaged.module.to(accelerator.device)
        start_step = 0
        if self.checkpoint is not None:
            start_step = load_checkpoint(accelerator, self.checkpoint, self.averaged)
            logger.info("%sresumed from %s at step %d", self.log_prefix, self.checkpoint, start_step)
        # A resumed run reads on where it stopped.
        batches = training_batches(accelerator, self.train_set, self.plan, self.run_config.data, self.run_config.seed,
                                   start_step)
        run = TrainingRun(accelerator, self.model, self.optimizer, batches, self.plan, self.train_config,
                          self.run_dir, self.run_config, self.averaged, self.accuracy_name, self.log_prefix)
        return train(run, start_step, monitors)

    def trained_encoder(self, cfg: ModelConfig) -> Optional[VisionTransformer]:
        """A plain copy of the trained encoder (``cfg``'s architecture) on the host, from the model's whole state dict
        (accelerate's ``get_state_dict``). Every process calls it: under FSDP it gathers the shards, which only the
        main process receives; the others get None. (FSDP's sharded parameters cannot be copied or written as they
        are: an export from them failed on a GPU.)"""
        state = self.session.accelerator.get_state_dict(self.model)
        return encoder_from_model_state(state, cfg) if state else None
