"""A step with a non-finite loss or gradient never reaches the weights; the run stops, or skips it, as configured."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration
from torch.utils.data import DataLoader, TensorDataset

from devices import USE_CPU
from mpp.config.training import TrainConfig
from mpp.training.checkpoint import list_checkpoints, read_step
from mpp.training.optimizer import NonFiniteGuard, NonFiniteStep


class FlakyModel(torch.nn.Module):
    """A linear model whose loss (``"loss"``) or gradient (``"gradient"``) is not finite on chosen steps."""

    def __init__(self, bad_steps: dict[int, str]):
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)
        self.bad_steps, self.calls = bad_steps, 0

    def forward(self, images: torch.Tensor, labels: torch.Tensor, keys: torch.Tensor) -> SimpleNamespace:
        self.calls += 1
        output = self.linear(images)
        if self.bad_steps.get(self.calls) == "gradient":
            output.register_hook(lambda grad: grad * math.inf)  # the loss stays finite
        loss = output.pow(2).mean() * (math.nan if self.bad_steps.get(self.calls) == "loss" else 1.0)
        return SimpleNamespace(loss=loss, accuracy=torch.zeros((), device=loss.device))


@pytest.fixture
def run(train_on_own_batches):
    """``run(run_dir, bad_steps, on_nonfinite, steps=8, fused=True)``: (the run's metrics, its model, optimizer)."""

    def run(tmp_path, bad_steps: dict[int, str], on_nonfinite: str, steps: int = 8, fused: bool = True):
        """``fused``: the step is skipped through the fused optimizer's found_inf; else a foreach one, as on XLA."""
        torch.manual_seed(0)  # the same model and data in every call
        cfg = TrainConfig(steps=steps, global_batch_size=4, lr=0.1, min_lr=0.1, warmup_steps=0, log_every=4,
                          checkpoint_every=2, keep_checkpoints=10, on_nonfinite=on_nonfinite)  # constant learning rate
        accelerator = Accelerator(cpu=USE_CPU, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
        model = FlakyModel(bad_steps)
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, fused=fused, foreach=not fused)
        dataset = TensorDataset(torch.randn(16, 4), torch.zeros(16), torch.arange(16))  # images, labels, keys
        loader = DataLoader(dataset, batch_size=4, shuffle=True)
        trainer, outcome = train_on_own_batches(accelerator, model, optimizer, loader, cfg, tmp_path)
        return outcome, trainer.model, trainer.optimizer

    return run


def adam_steps(optimizer) -> int:
    return int(next(iter(optimizer.optimizer.state.values()))["step"])


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "foreach"])
@pytest.mark.parametrize("kind", ["loss", "gradient"])
def test_stop_ends_the_run_at_the_next_check_without_applying_or_checkpointing_the_bad_step(run, tmp_path, kind, fused):
    with pytest.raises(NonFiniteStep, match=r"1 of the last 4 steps had a non-finite loss or gradient \(first: step 3"):
        run(tmp_path, {3: kind}, on_nonfinite="stop", fused=fused)
    assert [read_step(path) for path in list_checkpoints(tmp_path)] == [2]  # none written after the bad step


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "foreach"])
def test_skip_goes_on_without_the_bad_steps(run, tmp_path, fused):
    metrics, model, optimizer = run(tmp_path, {3: "loss", 6: "gradient"}, on_nonfinite="skip", fused=fused)
    assert metrics["step"] == 8 and metrics["skipped_steps"] == 2 and math.isfinite(metrics["loss"])
    assert adam_steps(optimizer) == 6  # 8 steps, 2 of them skipped
    assert all(torch.isfinite(parameter).all() for parameter in model.parameters())


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "foreach"])
def test_a_skipped_step_leaves_weights_and_optimizer_untouched(run, tmp_path, fused):
    _, before, before_optimizer = run(tmp_path / "a", {}, on_nonfinite="skip", steps=2, fused=fused)
    _, after, after_optimizer = run(tmp_path / "b", {3: "loss"}, on_nonfinite="skip", steps=3, fused=fused)
    assert adam_steps(after_optimizer) == adam_steps(before_optimizer) == 2
    assert all(torch.equal(a, b) for a, b in zip(before.parameters(), after.parameters(), strict=True))
    moments = [[state[key] for state in optimizer.optimizer.state.values() for key in ("exp_avg", "exp_avg_sq")]
               for optimizer in (before_optimizer, after_optimizer)]
    assert all(torch.equal(a, b) for a, b in zip(*moments, strict=True))


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "foreach"])
def test_skip_still_stops_when_no_step_of_a_window_is_finite(run, tmp_path, fused):
    with pytest.raises(NonFiniteStep, match=r"2 of the last 2 steps .* then resume$"):  # at the first checkpoint
        run(tmp_path, {step: "loss" for step in range(1, 9)}, on_nonfinite="skip", fused=fused)
    assert list_checkpoints(tmp_path) == []


def test_a_skipped_first_step_leaves_a_foreach_optimizer_as_new():
    """The step creates the optimizer's state; skipped, it is the state a first step starts from. (On XLA, where the
    step count lives on the device, tests/xla/ checks the same.)"""
    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=0.1, foreach=True)
    guard = NonFiniteGuard(optimizer, torch.device("cpu"), stop=False, scaler_skips=False)
    before = [parameter.detach().clone() for parameter in layer.parameters()]
    layer(torch.ones(1, 3)).sum().backward()
    with guard.only_if_finite(torch.tensor(math.inf)):
        optimizer.step()
    assert all(torch.equal(parameter, value) for parameter, value in zip(layer.parameters(), before, strict=True))
    for state in optimizer.state.values():
        assert float(state["step"]) == 0 and not state["exp_avg"].any() and not state["exp_avg_sq"].any()
    assert guard.check(1, window_steps=2) == 1


def test_fused_sgd_with_momentum_whose_first_step_is_skipped_then_steps_as_a_first_step():
    """Its momentum buffers would be left unset by a skipped first step (torch makes them with empty_like), and the
    next step would read whatever memory held: here, memory just freed, full of 3e25."""
    for _ in range(3):
        junk = [torch.full((1000,), 3e25) for _ in range(20)]
        del junk
        parameter = torch.nn.Parameter(torch.ones(1000))
        optimizer = torch.optim.SGD([parameter], lr=0.1, momentum=0.9, fused=True)
        guard = NonFiniteGuard(optimizer, torch.device("cpu"), stop=False, scaler_skips=False)
        for grad_norm in (math.inf, 1.0):  # skipped, then applied
            parameter.grad = torch.ones(1000)
            with guard.only_if_finite(torch.tensor(grad_norm)):
                optimizer.step()
        assert torch.allclose(parameter.detach(), torch.full((1000,), 0.9))  # one step of lr x gradient
        assert torch.allclose(optimizer.state[parameter]["momentum_buffer"], torch.ones(1000))
