"""The training loop every run goes through: accumulation, clipping, schedule, logging and checkpoints.

Every model is called with a batch as the data gives it, ``model(images, labels, random_keys)`` (one key per image,
which its random draws come from: see ``mpp.data.image_dataset``), and returns an object with ``loss`` and
``accuracy`` (scalars); the loop needs nothing else from it. It trains what ``Trainer`` (trainer.py) prepared;
nothing here is device-specific.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Protocol, Sequence

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from timm.utils import ModelEmaV3
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from mpp.config.training import TrainConfig
from mpp.data.batch_order import BatchPlan
from mpp.data.training_batches import TrainingBatches
from mpp.training.checkpoint import save_checkpoint
from mpp.training.non_finite import NonFiniteGuard
from mpp.training.preemption import Preempted, StopSignals
from mpp.training.schedule import learning_rate

logger = logging.getLogger(__name__)
DATA_CHECK_STEPS = 20  # steps after the first over which the loop's wait for data is judged, unless it logs earlier
DATA_BOUND_SHARE = 0.5  # waiting for data more than this share of the time: said once, with the fix


@dataclass
class TrainingRun:
    """What the loop trains: one run's parts, prepared by accelerate."""

    accelerator: Accelerator
    model: torch.nn.Module  # forward(images, labels, random_keys) -> an output with a scalar loss and accuracy
    optimizer: torch.optim.Optimizer
    batches: TrainingBatches  # from the run's start step on, on the device
    plan: BatchPlan
    train_config: TrainConfig  # its schedule, batch and checkpointing
    run_dir: Path  # checkpoints go to run_dir/checkpoints/
    run_config: Any  # the run's whole config: saved with every checkpoint; its seed seeds every pass
    averaged: Optional[ModelEmaV3] = None  # a Polyak average, updated after every optimizer step and checkpointed
    accuracy_name: str = "train_accuracy"  # the model's accuracy in logs and metrics
    log_prefix: str = ""  # before every TensorBoard tag and log line (the runs of a sweep share one events file)


class Monitor(Protocol):
    """What a run monitors besides its loss (few-shot accuracy, pictures; ``monitor.*``): called as
    ``monitor(step, images_seen)`` before the first step and after every ``every`` steps. Its time is not counted in
    the throughput."""

    every: int

    def __call__(self, step: int, images_seen: int) -> None: ...


class RunningMeans:
    """The loss and accuracy of the passes since the last log step (finite ones only). The sums stay on the device;
    they are read, one synchronisation, only on log steps."""

    def __init__(self, device: torch.device) -> None:
        self.sums = torch.zeros(3, device=device)  # loss, accuracy, passes

    def add(self, output: Any) -> None:
        values = torch.stack([output.loss.detach(), output.accuracy.detach(), torch.ones_like(self.sums[0])])
        self.sums += torch.where(torch.isfinite(values[0]), values, 0)

    def read(self, accelerator: Accelerator) -> tuple[float, float]:
        """The means over all processes, and a fresh start."""
        loss, accuracy, passes = accelerator.reduce(self.sums, "sum").tolist()
        self.sums.zero_()
        return (loss / passes, accuracy / passes) if passes else (math.nan, math.nan)


class TrainingClock:
    """Images per second of training steps alone, and the share of their wall time the loop waited for its next
    batch: neither the first step (warm-up, compilation, the loader's start) nor the time spent in monitors and
    checkpoint writing (``paused``) counts. Read on the host's clock only: nothing here waits for the device."""

    def __init__(self, images_per_step: int) -> None:
        self.images_per_step = images_per_step
        self.run_start = self.window_start = self.first_step_done = time.perf_counter()
        self.window_steps = self.steps = 0
        self.window_wait = self.run_wait = self.step_wait = 0.0
        self.data_judged = False

    @contextmanager
    def waiting_for_data(self) -> Iterator[None]:
        started = time.perf_counter()
        yield
        self.step_wait += time.perf_counter() - started

    def step_done(self) -> None:
        self.steps += 1
        self.window_steps += 1
        if self.steps == 1:
            self.first_step_done = time.perf_counter()
        else:
            self.run_wait += self.step_wait
        self.window_wait += self.step_wait
        self.step_wait = 0.0

    def window_rates(self) -> tuple[float, float]:
        """Images per second and the share of the time spent waiting for data since the last call; starts the next
        window."""
        now = time.perf_counter()
        rate = self.window_steps * self.images_per_step / (now - self.window_start)
        waited = self.window_wait / (now - self.window_start)
        self.window_steps, self.window_start, self.window_wait = 0, now, 0.0
        return rate, waited

    @contextmanager
    def paused(self) -> Iterator[None]:
        pausing = time.perf_counter()
        yield
        pause = time.perf_counter() - pausing
        self.window_start, self.first_step_done = self.window_start + pause, self.first_step_done + pause

    def judging_data_now(self, logging_now: bool) -> bool:
        """Whether to judge the wait for data now, once a run: at the first log step after the first step, or after
        the first ``DATA_CHECK_STEPS`` steps after it, whichever comes first."""
        if self.data_judged or self.steps < 2 or not (logging_now or self.steps > DATA_CHECK_STEPS):
            return False
        self.data_judged = True
        return True

    def run_rates(self) -> tuple[Optional[float], Optional[float]]:
        """Images per second and the data-waiting share over this session's steps after the first (of the one
        step, if only one ran)."""
        if not self.steps:
            return None, None
        timed = self.steps - 1 if self.steps > 1 else 1
        since = self.first_step_done if self.steps > 1 else self.run_start
        wall = time.perf_counter() - since
        return timed * self.images_per_step / wall, (self.run_wait if self.steps > 1 else self.window_wait) / wall


def train(run: TrainingRun, start_step: int = 0, monitors: Sequence[Monitor] = ()) -> dict[str, Any]:
    """Train from ``start_step`` to ``run.train_config.steps``; returns the final metrics of the run.

    Raises ``Preempted`` (after saving a checkpoint) on SIGTERM / SIGINT, and ``NonFiniteStep`` where
    ``train.on_nonfinite`` says to stop.
    """
    accelerator, model, optimizer, plan, cfg = run.accelerator, run.model, run.optimizer, run.plan, run.train_config
    accelerator.gradient_accumulation_steps = plan.accumulation_steps
    batches = run.batches
    guard = NonFiniteGuard(optimizer, accelerator.device, stop=cfg.on_nonfinite == "stop",
                           scaler_skips=accelerator.scaler is not None, start_step=start_step)
    means, clock = RunningMeans(accelerator.device), TrainingClock(plan.global_batch_size)
    grad_norm = torch.zeros((), device=accelerator.device)
    logged: dict[str, Any] = {}
    skipped_steps = 0
    progress = tqdm(total=cfg.steps, initial=start_step, desc="train", disable=not accelerator.is_local_main_process)
    unwrapped = accelerator.unwrap_model(model)
    # closing(batches): the loader's workers end with the run, not whenever the iterator is collected
    with logging_redirect_tqdm(), StopSignals() as stop_signals, progress, closing(batches):
        with clock.paused():
            for monitor in monitors if start_step == 0 else ():
                monitor(0, 0)
        model.train()
        for step in range(start_step, cfg.steps):
            lr = learning_rate(step, cfg.lr, cfg.warmup_steps, cfg.steps, cfg.decay, cfg.min_lr)
            for group in optimizer.param_groups:
                group["lr"] = lr * group.get("lr_scale", 1.0)  # below 1 in layer-wise decay's groups
            for micro_step in range(plan.accumulation_steps):
                with clock.waiting_for_data():
                    images, labels, random_keys = next(batches)
                # What the model draws from the global RNG (dropout, drop-path) is a function of (seed, step, pass,
                # process), so a resumed run draws what an uninterrupted one would. Seeded after fetching the batch:
                # starting a loader iterator (as resuming does) consumes random numbers too.
                set_seed(hash((run.run_config.seed, step, micro_step, accelerator.process_index)) % 2**32)
                with accelerator.accumulate(model):
                    output = model(images, labels, random_keys)
                    accelerator.backward(output.loss)
                    guard.observe_loss(output.loss)
                    if accelerator.sync_gradients:  # the last pass of the step
                        grad_norm = accelerator.clip_grad_norm_(model.parameters(), cfg.grad_clip_norm)
                        with guard.only_if_finite(grad_norm):  # decided on the device: no host sync
                            optimizer.step()
                        optimizer.zero_grad(set_to_none=True)
                        if run.averaged is not None:
                            run.averaged.update(unwrapped, step=step + 1)  # one foreach lerp over the weights
                means.add(output)
            progress.update()
            clock.step_done()
            done = step + 1
            logging_now = done % cfg.log_every == 0 or done == cfg.steps
            if logging_now:
                logged = log_step(run, done, lr, grad_norm, means, clock, guard, progress)
                skipped_steps += logged["skipped_steps"]
            if clock.judging_data_now(logging_now):  # host clocks only: no wait for the device
                warn_if_waiting_for_data(run, clock)
            with clock.paused():  # speeds count training time, not monitors or checkpoint writing
                monitor_and_checkpoint(run, done, monitors, stop_signals, guard, clock.window_steps)
    images_per_second, data_wait_share = clock.run_rates()
    return {
        "step": cfg.steps,
        "loss": logged.get("loss"),
        run.accuracy_name: logged.get(run.accuracy_name),
        "images_per_second": images_per_second,
        "data_wait_share": data_wait_share,  # of the wall time images_per_second is measured over
        "images_seen": cfg.steps * plan.global_batch_size,
        "num_processes": plan.num_processes,
        "global_batch_size": plan.global_batch_size,
        "steps_this_session": cfg.steps - start_step,
        "wall_seconds_this_session": time.perf_counter() - clock.run_start,
        "skipped_images": batches.skipped_images(),
        "skipped_steps": skipped_steps,
    }


def log_step(run: TrainingRun, done: int, lr: float, grad_norm: torch.Tensor, means: RunningMeans,
             clock: TrainingClock, guard: NonFiniteGuard, progress: tqdm) -> dict[str, Any]:
    """Logs the steps since the last log step (to TensorBoard, the log and the progress bar); returns what it logged.
    Raises ``NonFiniteStep`` where a skipped step must stop the run."""
    loss, accuracy = means.read(run.accelerator)
    skipped = guard.check(done, clock.window_steps)  # raises where the run must stop
    images_per_second, data_wait_share = clock.window_rates()  # ends the window
    metrics = {
        "loss": loss,
        run.accuracy_name: accuracy,
        "lr": lr,
        "grad_norm": grad_norm.item(),
        "images_per_second": images_per_second,
        "data_wait_share": data_wait_share,  # the loop's time spent waiting for its next batch
        "skipped_steps": skipped,
    }
    # The x-axis counts images seen, so runs with different batch sizes line up.
    run.accelerator.log({f"{run.log_prefix}train/{key}": value for key, value in metrics.items()},
                        step=done * run.plan.global_batch_size)
    # The bar's own rate counts steps; these are the window's images per second and its wait for data.
    progress.set_postfix(loss=f"{loss:.4f}", acc=f"{accuracy:.3f}", img_s=f"{images_per_second:.1f}",
                         data_wait=f"{data_wait_share:.0%}")
    logger.info(
        "%sstep %d/%d  loss %.4f  %s %.4f  lr %.2e  grad_norm %.3f  %.1f images/s (%.0f%% waiting for data)%s",
        run.log_prefix, done, run.train_config.steps, loss, run.accuracy_name, accuracy, lr, metrics["grad_norm"],
        images_per_second, 100 * data_wait_share, guard.describe(metrics["skipped_steps"]),
    )
    guard.reset()
    return metrics


def warn_if_waiting_for_data(run: TrainingRun, clock: TrainingClock) -> None:
    """One warning, early in a run, where the loop has spent most of its time waiting for its next batch, with the
    fix for its data (``TrainingBatches.loading_advice``)."""
    _, waited = clock.run_rates()
    if waited is not None and waited > DATA_BOUND_SHARE:
        logger.warning("%sthe loop waited for its next batch %.0f%% of the time over its first %d steps: loading the "
                       "images, not training, sets this run's speed; %s", run.log_prefix, 100 * waited,
                       clock.steps - 1, run.batches.loading_advice())


def monitor_and_checkpoint(run: TrainingRun, done: int, monitors: Sequence[Monitor], stop_signals: StopSignals,
                          guard: NonFiniteGuard, unlogged_steps: int) -> None:
    """After step ``done``: the monitors due, then a checkpoint where one is due or a stop signal came (all processes
    agree on it); raises ``Preempted`` after saving for a stop signal."""
    for monitor in monitors:
        if done % monitor.every == 0:
            monitor(done, done * run.plan.global_batch_size)
    signum = stop_signals.agreed(run.accelerator, done, run.train_config.stop_check_every)
    if done % run.train_config.checkpoint_every == 0 or done == run.train_config.steps or signum:
        guard.check(done, unlogged_steps)  # never checkpoint after a step that must stop the run
        path = save_checkpoint(run.accelerator, run.run_dir, done, run.run_config, run.train_config.keep_checkpoints,
                               run.averaged)
        logger.info("saved checkpoint %s", path)
        if signum:
            raise Preempted(signum, done, path)
