"""One training run, assembled the one way every recipe does it (and each point of a learning-rate sweep), and the
loop it trains in:

    batch plan -> optimizer -> the checkpoint to resume -> accelerate's prepare -> resume -> the run's batches from
    its step on (``mpp.data.loading``) -> the loop: accumulation, clipping, schedule, logging, checkpoints

A ``Trainer`` is made before the run directory is claimed, so that data smaller than a batch, a batch that does not
split over the processes or a checkpoint that does not fit the config stops the run before anything is written;
``fit`` prepares and trains.

Every model is called with a batch as the data gives it, ``model(images, labels, random_keys)`` (one key per image,
which its random draws come from: see ``mpp.data.image_dataset``), and returns an object with ``loss`` and
``accuracy`` (scalars); the loop needs nothing else from it. Nothing here is device-specific.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional, Protocol, Sequence

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from timm.models.vision_transformer import VisionTransformer
from timm.utils import ModelEmaV3
from torch.utils.data import Dataset, IterableDataset
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from mpp.config.model import ModelConfig
from mpp.config.runs import TrainingRunConfig
from mpp.config.training import TrainConfig
from mpp.data.loading import TrainingBatches, check_batch_fits, plan_batches, training_batches
from mpp.models.pretrained import encoder_from_model_state
from mpp.run import Session
from mpp.training.checkpoint import (
    Preempted,
    StopSignals,
    check_resume_compatible,
    check_resume_length,
    load_checkpoint,
    resume_checkpoint,
    save_checkpoint,
)
from mpp.training.optimizer import NonFiniteGuard, create_optimizer, learning_rate, resolved_schedule

logger = logging.getLogger(__name__)
DATA_CHECK_STEPS = 20  # steps after the first over which the loop's wait for data is judged, unless it logs earlier
DATA_BOUND_SHARE = 0.5  # waiting for data more than this share of the time: said once, with the fix


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


class Trainer:
    """Trains ``model`` on ``train_set`` as ``config`` (the run's whole config) says, on the schedule of ``train``
    (default: ``config.train``). A sweep's point, or the run after it, gives its own ``train`` (its learning rate),
    ``run_dir`` (its own folder: checkpoints, metrics) and ``resume``; ``ema_decay`` > 0 keeps a Polyak average of
    the weights (Table 2) and ``layer_decay`` < 1 scales each block's learning rate down with its depth from the
    head (fine-tuning's layer-wise decay); ``accuracy_name`` names the model's accuracy in logs and metrics, and
    ``log_prefix`` goes before every log line and TensorBoard tag; ``optimizer``: one of the caller's own, made on
    ``model`` (default: ``train``'s)."""

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
        optimizer: Optional[torch.optim.Optimizer] = None,
    ) -> None:
        self.model, self.train_set, self.run_config = model, train_set, config
        self.run_dir = run_dir or session.run_dir
        self.ema_decay, self.accuracy_name, self.log_prefix = ema_decay, accuracy_name, log_prefix
        self.accelerator = accelerator = session.accelerator
        given = train or config.train
        self.plan = plan_batches(given, accelerator.num_processes)
        # A global batch larger than the data is refused before the schedule is made of it (an epoch of no steps)
        check_batch_fits(train_set, self.plan.global_batch_size)
        # What the loop reads: steps from epochs, the learning rate scaled to the batch; how, for the plan line.
        self.train_config, self.derivation = resolved_schedule(
            given, None if isinstance(train_set, IterableDataset) else len(train_set))
        self.optimizer = optimizer or create_optimizer(model, self.train_config, accelerator.device, layer_decay)
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

    def fit(self, monitors: Sequence[Monitor] = (), batches: Optional[TrainingBatches] = None) -> dict[str, Any]:
        """Prepare, resume where there is a checkpoint, train to the last step; returns the run's metrics.
        ``batches``: where the caller reads data of its own (prepared, from step 0); by default the training set's,
        from the run's start step."""
        accelerator = self.accelerator
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
        if batches is None:  # a resumed run reads on where it stopped
            batches = training_batches(accelerator, self.train_set, self.plan, self.run_config.data,
                                       self.run_config.seed, start_step)
        return self.train_steps(batches, start_step, monitors)

    def train_steps(self, batches: TrainingBatches, start_step: int, monitors: Sequence[Monitor]) -> dict[str, Any]:
        """The loop: ``batches`` from ``start_step`` to the last step (``train_config.steps``); returns the run's final
        metrics.

        Raises ``Preempted`` (after saving a checkpoint) on SIGTERM / SIGINT, and ``NonFiniteStep`` where
        ``train.on_nonfinite`` says to stop.
        """
        accelerator, model, optimizer, plan = self.accelerator, self.model, self.optimizer, self.plan
        cfg = self.train_config
        accelerator.gradient_accumulation_steps = plan.accumulation_steps
        guard = NonFiniteGuard(optimizer, accelerator.device, stop=cfg.on_nonfinite == "stop",
                               scaler_skips=accelerator.scaler is not None, start_step=start_step)
        means, clock = RunningMeans(accelerator.device), TrainingClock(plan.global_batch_size)
        grad_norm = torch.zeros((), device=accelerator.device)
        logged: dict[str, Any] = {}
        skipped_steps = 0
        progress = tqdm(total=cfg.steps, initial=start_step, desc="train",
                        disable=not accelerator.is_local_main_process)
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
                    # What the model draws from the global RNG (dropout, drop-path) is a function of (seed, step,
                    # pass, process), so a resumed run draws what an uninterrupted one would. Seeded after fetching
                    # the batch: starting a loader iterator (as resuming does) consumes random numbers too.
                    set_seed(hash((self.run_config.seed, step, micro_step, accelerator.process_index)) % 2**32)
                    with accelerator.accumulate(model):
                        output = model(images, labels, random_keys)
                        accelerator.backward(output.loss)
                        guard.observe_loss(output.loss)
                        if accelerator.sync_gradients:  # the last pass of the step
                            grad_norm = accelerator.clip_grad_norm_(model.parameters(), cfg.grad_clip_norm)
                            with guard.only_if_finite(grad_norm):  # decided on the device: no host sync
                                optimizer.step()
                            optimizer.zero_grad(set_to_none=True)
                            if self.averaged is not None:
                                self.averaged.update(unwrapped, step=step + 1)  # one foreach lerp over the weights
                    means.add(output)
                progress.update()
                clock.step_done()
                done = step + 1
                logging_now = done % cfg.log_every == 0 or done == cfg.steps
                if logging_now:
                    logged = self.log_step(done, lr, grad_norm, means, clock, guard, progress)
                    skipped_steps += logged["skipped_steps"]
                if clock.judging_data_now(logging_now):  # host clocks only: no wait for the device
                    self.warn_if_waiting_for_data(batches, clock)
                with clock.paused():  # speeds count training time, not monitors or checkpoint writing
                    self.monitor_and_checkpoint(done, monitors, stop_signals, guard, clock.window_steps)
        images_per_second, data_wait_share = clock.run_rates()
        return {
            "step": cfg.steps,
            "loss": logged.get("loss"),
            self.accuracy_name: logged.get(self.accuracy_name),
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

    def log_step(self, done: int, lr: float, grad_norm: torch.Tensor, means: RunningMeans, clock: TrainingClock,
                 guard: NonFiniteGuard, progress: tqdm) -> dict[str, Any]:
        """Logs the steps since the last log step (to TensorBoard, the log and the progress bar); returns what it
        logged. Raises ``NonFiniteStep`` where a skipped step must stop the run."""
        loss, accuracy = means.read(self.accelerator)
        skipped = guard.check(done, clock.window_steps)  # raises where the run must stop
        images_per_second, data_wait_share = clock.window_rates()  # ends the window
        metrics = {
            "loss": loss,
            self.accuracy_name: accuracy,
            "lr": lr,
            "grad_norm": grad_norm.item(),
            "images_per_second": images_per_second,
            "data_wait_share": data_wait_share,  # the loop's time spent waiting for its next batch
            "skipped_steps": skipped,
        }
        # The x-axis counts images seen, so runs with different batch sizes line up.
        self.accelerator.log({f"{self.log_prefix}train/{key}": value for key, value in metrics.items()},
                             step=done * self.plan.global_batch_size)
        # The bar's own rate counts steps; these are the window's images per second and its wait for data.
        progress.set_postfix(loss=f"{loss:.4f}", acc=f"{accuracy:.3f}", img_s=f"{images_per_second:.1f}",
                             data_wait=f"{data_wait_share:.0%}")
        logger.info(
            "%sstep %d/%d  loss %.4f  %s %.4f  lr %.2e  grad_norm %.3f  %.1f images/s (%.0f%% waiting for data)%s",
            self.log_prefix, done, self.train_config.steps, loss, self.accuracy_name, accuracy, lr,
            metrics["grad_norm"], images_per_second, 100 * data_wait_share, guard.describe(metrics["skipped_steps"]),
        )
        guard.reset()
        return metrics

    def warn_if_waiting_for_data(self, batches: TrainingBatches, clock: TrainingClock) -> None:
        """One warning, early in a run, where the loop has spent most of its time waiting for its next batch, with the
        fix for its data (``TrainingBatches.loading_advice``)."""
        _, waited = clock.run_rates()
        if waited is not None and waited > DATA_BOUND_SHARE:
            logger.warning("%sthe loop waited for its next batch %.0f%% of the time over its first %d steps: loading "
                           "the images, not training, sets this run's speed; %s", self.log_prefix, 100 * waited,
                           clock.steps - 1, batches.loading_advice())

    def monitor_and_checkpoint(self, done: int, monitors: Sequence[Monitor], stop_signals: StopSignals,
                               guard: NonFiniteGuard, unlogged_steps: int) -> None:
        """After step ``done``: the monitors due, then a checkpoint where one is due or a stop signal came (all
        processes agree on it); raises ``Preempted`` after saving for a stop signal."""
        for monitor in monitors:
            if done % monitor.every == 0:
                monitor(done, done * self.plan.global_batch_size)
        signum = stop_signals.agreed(self.accelerator, done, self.train_config.stop_check_every)
        if done % self.train_config.checkpoint_every == 0 or done == self.train_config.steps or signum:
            guard.check(done, unlogged_steps)  # never checkpoint after a step that must stop the run
            path = save_checkpoint(self.accelerator, self.run_dir, done, self.run_config,
                                   self.train_config.keep_checkpoints, self.averaged)
            logger.info("saved checkpoint %s", path)
            if signum:
                raise Preempted(signum, done, path)

    def trained_encoder(self, cfg: ModelConfig) -> Optional[VisionTransformer]:
        """A plain copy of the trained encoder (``cfg``'s architecture) on the host, from the model's whole state dict
        (accelerate's ``get_state_dict``). Every process calls it: under FSDP it gathers the shards, which only the
        main process receives; the others get None. (FSDP's sharded parameters cannot be copied or written as they
        are: an export from them failed on a GPU.)"""
        state = self.accelerator.get_state_dict(self.model)
        return encoder_from_model_state(state, cfg) if state else None
