"""The Trainer's loop run on a test's own model, optimizer and plain DataLoader (a fixture)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


@pytest.fixture
def train_on_own_batches():
    """``train(accelerator, model, optimizer, loader, cfg, run_dir)``: ``Trainer.fit`` over ``loader`` (prepared here,
    read from step 0) with the caller's optimizer; returns (the trainer, with its prepared model and optimizer, and
    the run's metrics)."""
    from mpp.config.runs import MPPRunConfig
    from mpp.data.loading import TrainingBatches
    from mpp.training.trainer import Trainer

    def train(accelerator, model, optimizer, loader, cfg, run_dir):
        session = SimpleNamespace(accelerator=accelerator, run_dir=run_dir)
        trainer = Trainer(session, model, loader.dataset, MPPRunConfig(train=cfg), optimizer=optimizer)
        batches = TrainingBatches(accelerator, loader.dataset, accelerator.prepare(loader), 0)
        return trainer, trainer.fit(batches=batches)

    return train
