from __future__ import annotations

import itertools
import logging
import time
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from accelerate.data_loader import prepare_data_loader
from devices import USE_CPU
from torch.utils.data import DataLoader

from mpp.config.training import TrainConfig
from mpp.data.loading import BatchPlan, EndlessEpochBatches, plan_batches
from mpp.errors import ConfigError
from mpp.training.trainer import TrainingClock


def test_batch_plan_splits_the_global_batch():
    plan = plan_batches(TrainConfig(global_batch_size=4096, micro_batch_size=256), num_processes=4)
    assert (plan.micro_batch_size, plan.accumulation_steps) == (256, 4)
    plan = plan_batches(TrainConfig(global_batch_size=64), num_processes=2)
    assert (plan.micro_batch_size, plan.accumulation_steps) == (32, 1)
    with pytest.raises(ConfigError, match="not a whole number of passes"):
        plan_batches(TrainConfig(global_batch_size=100, micro_batch_size=16), num_processes=2)


def test_resumed_batches_continue_where_an_uninterrupted_run_would_be():
    order = EndlessEpochBatches(20, BatchPlan(4, 4, 1, 1), seed=3)  # 5 batches an epoch
    straight = list(itertools.islice(order, 13))
    order.start = 7
    resumed = list(itertools.islice(order, 6))
    assert resumed == straight[7:]
    assert sorted(position for epoch, position in sum(straight[:5], [])) == list(range(20))  # each once an epoch
    assert {epoch for batch in straight[5:10] for epoch, _ in batch} == {1}  # each position carries its epoch
    assert [p for b in straight[:5] for _, p in b] != [p for b in straight[5:10] for _, p in b]  # reshuffled


@pytest.mark.parametrize("num_processes", [1, 2])
def test_a_runs_endless_loader_gives_the_batches_of_a_loader_prepared_each_epoch(num_processes):
    """The same images, views and keys as accelerate's seedable shuffled loader read epoch by epoch with the views
    of each epoch (how a run read its data before its loader became endless), on each of the processes."""
    from mpp.config.data import DataConfig
    from mpp.data.loading import build_dataset, build_training_loader
    from mpp.images import KeyedDraws, keys_of

    dataset = build_dataset(DataConfig(), "train", 8, channels=3, augment=True, seed=5)
    dataset.indices = dataset.indices[:44]  # 5 batches of 4 per process and epoch with two, 11 with one
    for rank in range(num_processes):
        per_epoch = prepare_data_loader(DataLoader(range(44), batch_size=4, shuffle=True, drop_last=True),
                                        num_processes=num_processes, process_index=rank, use_seedable_sampler=True,
                                        data_seed=5)
        plan = BatchPlan(4 * num_processes, 4, num_processes, 1)
        endless = iter(build_training_loader(dataset, plan, DataConfig(num_workers=1), seed=5, process_index=rank))
        for epoch in range(3):
            per_epoch.set_epoch(epoch)
            for positions in per_epoch:
                images, labels, keys = next(endless)
                index = dataset.indices[positions]
                expected_keys = keys_of(5, epoch, index)
                assert torch.equal(keys, expected_keys) and torch.equal(labels, dataset.source.labels[index])
                assert torch.equal(images, dataset.view(dataset.source.images(index), KeyedDraws(expected_keys)))
def train_tiny_mpp(tiny_model_config, tmp_path, cfg: TrainConfig, optimizer=None):
    """MPP on the shapes data through the loop, as the recipes run it: (the prepared model, optimizer, metrics)."""
    from accelerate.utils import GradientAccumulationPlugin

    from mpp.config.data import DataConfig
    from mpp.config.model import MPPConfig
    from mpp.config.runs import MPPRunConfig
    from mpp.data.loading import build_dataset
    from mpp.models.encoder import create_encoder
    from mpp.models.masked_patch_prediction import MaskedPatchPredictor
    from mpp.training.trainer import Trainer

    plan = plan_batches(cfg, num_processes=1)
    accelerator = Accelerator(cpu=USE_CPU, gradient_accumulation_plugin=GradientAccumulationPlugin(
        num_steps=plan.accumulation_steps, sync_with_dataloader=False))
    model = MaskedPatchPredictor(create_encoder(tiny_model_config), MPPConfig(), (0.5,) * 3, (0.5,) * 3)
    optimizer = optimizer(model) if optimizer else torch.optim.AdamW(model.parameters(), lr=cfg.lr, fused=True)
    dataset = build_dataset(DataConfig(), "train", image_size=16, channels=3, augment=True)
    session = SimpleNamespace(accelerator=accelerator, run_dir=tmp_path)
    trainer = Trainer(session, model, dataset, MPPRunConfig(train=cfg), optimizer=optimizer)
    metrics = trainer.fit()
    return trainer.model, trainer.optimizer, metrics


def test_accumulation_takes_one_optimizer_step_per_global_batch(tiny_model_config, tmp_path):
    cfg = TrainConfig(steps=3, global_batch_size=8, micro_batch_size=4, warmup_steps=1, log_every=1,
                      checkpoint_every=10)
    assert plan_batches(cfg, num_processes=1).accumulation_steps == 2
    _, optimizer, metrics = train_tiny_mpp(tiny_model_config, tmp_path, cfg)
    adam_steps = {int(state["step"]) for state in optimizer.optimizer.state.values()}
    assert adam_steps == {3}  # 6 passes, 3 optimizer steps
    assert metrics["step"] == 3 and metrics["images_seen"] == 24 and metrics["loss"] > 0
    assert (tmp_path / "checkpoints" / "step_00000003").is_dir()  # the final checkpoint is always written


def test_a_step_moves_the_weights_by_the_learning_rate_times_the_clipped_gradient(tiny_model_config, tmp_path):
    """SGD without momentum moves the weights by lr x gradient: by exactly lr x train.grad_clip_norm once the
    gradient's global norm is clipped to it (App. B.1), by the whole gradient when the bound is far above it."""
    moved = {}
    for clip in (1e-4, 1e6):
        torch.manual_seed(0)
        cfg = TrainConfig(steps=1, global_batch_size=8, warmup_steps=0, log_every=1, checkpoint_every=10, lr=1.0,
                          optimizer="sgd", momentum=0.0, grad_clip_norm=clip)
        before = {}

        def sgd(model, before=before, cfg=cfg):  # bound now: the loop rebinds both
            before.update({name: value.detach().clone() for name, value in model.named_parameters()})
            return torch.optim.SGD(model.parameters(), lr=cfg.lr)

        model, _, _ = train_tiny_mpp(tiny_model_config, tmp_path / str(clip), cfg, sgd)
        moved[clip] = torch.cat([(value.detach().cpu() - before[name].cpu()).flatten()  # on a GPU: after prepare
                                 for name, value in model.named_parameters()]).norm().item()
    assert moved[1e-4] == pytest.approx(1e-4, rel=1e-3)
    assert moved[1e6] > 100 * moved[1e-4]  # unclipped: the same step's whole gradient


def test_the_clock_counts_the_share_of_training_time_spent_waiting_for_data(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("mpp.training.trainer.time.perf_counter", lambda: now[0])
    clock = TrainingClock(images_per_step=10)
    for wait, compute in [(5.0, 1.0), (1.0, 3.0), (0.0, 2.0), (2.0, 2.0)]:  # the first step (the loader's start) is
        with clock.waiting_for_data():                                      # left out of the run's figures
            now[0] += wait
        now[0] += compute
        clock.step_done()
    assert clock.window_rates() == (40 / 16, 8 / 16)  # the window since the clock started: every step
    with clock.paused():  # reports and checkpoints count neither as training nor as waiting
        now[0] += 100
    assert clock.run_rates() == (30 / 10, 3 / 10)


class SlowTensors(torch.utils.data.Dataset):
    """(image, label, key) examples that take ``seconds`` each to load, as large files do to decode."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int):
        time.sleep(self.seconds)
        return torch.full((4,), float(index)), torch.tensor(0), torch.tensor(index)


class SlowModel(torch.nn.Module):
    """A linear model whose every pass takes ``seconds``, as a real step would."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.linear, self.seconds = torch.nn.Linear(4, 1), seconds

    def forward(self, images, labels, keys):
        time.sleep(self.seconds)
        loss = self.linear(images).pow(2).mean()
        return SimpleNamespace(loss=loss, accuracy=torch.zeros((), device=loss.device))


def train_timed(train_on_own_batches, tmp_path, load_seconds: float, step_seconds: float, log_every: int,
                steps: int = 24):
    from accelerate.utils import DataLoaderConfiguration

    cfg = TrainConfig(steps=steps, global_batch_size=2, warmup_steps=0, log_every=log_every, checkpoint_every=1000)
    accelerator = Accelerator(cpu=USE_CPU, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    model = SlowModel(step_seconds)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowTensors(load_seconds), batch_size=2, shuffle=True)
    return train_on_own_batches(accelerator, model, optimizer, loader, cfg, tmp_path)[1]


def waiting_warnings(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if "waited for its next batch" in record.getMessage()]


def test_a_loop_waiting_for_data_says_so_once_early_with_the_fix(train_on_own_batches, tmp_path, caplog, capsys):
    caplog.set_level(logging.INFO, logger="mpp")
    # No log step before the last: judged after the first 20 steps after the first, before the log line. Each batch
    # loads for 50 ms, well beyond the loop's own time a step even on a loaded machine (20 ms was not, in a CI run).
    metrics = train_timed(train_on_own_batches, tmp_path / "late", load_seconds=0.05, step_seconds=0.0, log_every=100)
    warnings = waiting_warnings(caplog)
    assert len(warnings) == 1 and "over its first 20 steps" in warnings[0], warnings
    assert "load in more worker processes (data.num_workers, 0 now)" in warnings[0]
    messages = [record.getMessage() for record in caplog.records]
    assert messages.index(warnings[0]) < next(i for i, line in enumerate(messages) if line.startswith("step 24/24"))
    assert metrics["data_wait_share"] > 0.5
    # The progress bar shows the wait of each log window (set on log steps only).
    assert "data_wait=" in capsys.readouterr().err
    # A log step earlier: judged there, over the steps since the first.
    caplog.clear()
    train_timed(train_on_own_batches, tmp_path / "early", load_seconds=0.05, step_seconds=0.0, log_every=4)
    warnings = waiting_warnings(caplog)
    assert len(warnings) == 1 and "over its first 3 steps" in warnings[0], warnings


def test_a_loop_that_waits_little_for_data_says_nothing(train_on_own_batches, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="mpp")
    metrics = train_timed(train_on_own_batches, tmp_path, load_seconds=0.0, step_seconds=0.02, log_every=4)
    assert not waiting_warnings(caplog) and metrics["data_wait_share"] < 0.5


def test_the_loading_advice_counts_the_workers_the_run_loads_in():
    # The count is read before accelerate's prepare wraps the loader (an XLA device loader has no num_workers).
    from mpp.config.data import DataConfig
    from mpp.data.loading import build_dataset, training_batches

    accelerator = Accelerator(cpu=USE_CPU)
    dataset = build_dataset(DataConfig(), "train", 16, channels=3, augment=False)
    for workers in (0, 2):
        batches = training_batches(accelerator, dataset, BatchPlan(4, 4, 1, 1), DataConfig(num_workers=workers), seed=0)
        assert f"load in more worker processes (data.num_workers, {workers} now)" in batches.loading_advice()
        batches.close()
