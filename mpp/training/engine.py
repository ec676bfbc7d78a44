"""The training loop every run goes through: accumulation, clipping, schedule, logging and checkpoints.

The model's forward takes (images, labels) and returns an object with ``loss`` and ``accuracy`` (scalars); the loop
needs nothing else from it. It trains what ``Trainer`` (trainer.py) prepared; nothing here is device-specific.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Protocol, Sequence

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from timm.utils import ModelEmaV3
from torch.utils.data import DataLoader, Dataset, IterableDataset
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from mpp.config import ConfigError, TrainConfig
from mpp.keyed_random import keys_of
from mpp.training.checkpoint import save_checkpoint
from mpp.training.non_finite import NonFiniteGuard
from mpp.training.preemption import Preempted, StopSignals
from mpp.training.schedule import learning_rate

logger = logging.getLogger(__name__)


@dataclass
class BatchPlan:
    """How one optimizer step's global batch splits over processes and accumulation steps."""

    global_batch_size: int
    micro_batch_size: int  # per process, per forward pass
    num_processes: int
    accumulation_steps: int


def plan_batches(cfg: TrainConfig, num_processes: int) -> BatchPlan:
    micro = cfg.micro_batch_size or cfg.global_batch_size // num_processes
    per_pass = micro * num_processes
    if micro < 1 or cfg.global_batch_size % per_pass:
        raise ConfigError(
            f"train.global_batch_size={cfg.global_batch_size} is not a whole number of passes of "
            f"train.micro_batch_size={micro} on each of {num_processes} processes; make the global batch a "
            f"multiple of micro_batch_size x processes"
        )
    return BatchPlan(cfg.global_batch_size, micro, num_processes, cfg.global_batch_size // per_pass)


def endless_batches(loader: DataLoader, dataset: Dataset, accelerator: Accelerator, start: int) -> Iterator[Any]:
    """Batches of prepared ``loader`` (of ``dataset``) epoch after epoch, starting after the first ``start`` (so a
    resumed run sees what it would have)."""
    sized = not isinstance(dataset, IterableDataset)
    epoch, skip = divmod(start, len(loader)) if sized else (0, start)
    while True:
        loader.set_epoch(epoch)  # the shuffle order is a function of (seed, epoch) ...
        if hasattr(dataset, "set_epoch"):
            dataset.set_epoch(epoch)  # ... and so are the augmented views
        if sized:
            yield from accelerator.skip_first_batches(loader, skip) if skip else loader
            skip = 0
        else:  # a stream has no length to divide by: it is read again up to the resume point
            batches = iter(loader)
            skip -= sum(1 for _ in itertools.islice(batches, skip))
            yield from batches
        epoch += 1


def report_skipped_images(accelerator: Accelerator, dataset: Any) -> int:
    """Images that could not be decoded and were skipped, over all processes; logged with a few of their names."""
    count = getattr(dataset, "skipped_count", lambda: 0)()
    total = int(accelerator.reduce(torch.tensor(count, device=accelerator.device), "sum"))
    if total:
        names = getattr(dataset, "undecodable_files", list)()[:5]
        logger.warning("skipped %d image(s) that could not be decoded%s", total,
                       f" (this process: {', '.join(names)}{', ...' if count > len(names) else ''})" if names else "")
    return total


@dataclass
class TrainingRun:
    """What the loop trains: one run's parts, prepared by accelerate."""

    accelerator: Accelerator
    model: torch.nn.Module  # forward(images, labels) -> an output with a scalar loss and accuracy
    optimizer: torch.optim.Optimizer
    loader: DataLoader
    dataset: Dataset  # the loader's: read here, not through the prepared loader (XLA's wrapper does not show it)
    plan: BatchPlan
    cfg: TrainConfig
    run_dir: Path  # checkpoints go to run_dir/checkpoints/
    config: Any  # the run's whole config: saved with every checkpoint; its seed seeds every pass
    averaged: Optional[ModelEmaV3] = None  # a Polyak average, updated after every optimizer step and checkpointed
    accuracy_name: str = "train_accuracy"  # the model's accuracy in logs and metrics
    log_prefix: str = ""  # before every TensorBoard tag and log line (the runs of a sweep share one events file)


class PeriodicReport(Protocol):
    """What a run reports besides its loss (few-shot accuracy, pictures): called as ``report(step, images_seen)``
    before the first step and after every ``every`` steps. Its time is not counted in the throughput."""

    every: int

    def __call__(self, step: int, images_seen: int) -> None: ...


def train(run: TrainingRun, start_step: int = 0, reports: Sequence[PeriodicReport] = ()) -> dict[str, Any]:
    """Train from ``start_step`` to ``run.cfg.steps``; returns the final metrics of the run.

    Raises ``Preempted`` (after saving a checkpoint) on SIGTERM / SIGINT, and ``NonFiniteStep`` where
    ``train.on_nonfinite`` says to stop.
    """
    accelerator, model, optimizer, plan, cfg = run.accelerator, run.model, run.optimizer, run.plan, run.cfg
    seed = run.config.seed
    accelerator.gradient_accumulation_steps = plan.accumulation_steps
    batches = endless_batches(run.loader, run.dataset, accelerator, start=start_step * plan.accumulation_steps)
    guard = NonFiniteGuard(optimizer, accelerator.device, stop=cfg.on_nonfinite == "stop",
                           scaler_skips=accelerator.scaler is not None, start_step=start_step)
    # Running sums stay on the device; they are read (one synchronisation) only on log steps.
    sums = torch.zeros(3, device=accelerator.device)  # loss, accuracy, passes (finite ones only)
    window_steps = skipped_steps = 0
    grad_norm = torch.zeros((), device=accelerator.device)
    metrics: dict[str, Any] = {}
    run_start = time.perf_counter()
    progress = tqdm(total=cfg.steps, initial=start_step, desc="train", disable=not accelerator.is_local_main_process)
    unwrapped = accelerator.unwrap_model(model)
    # Each image's place in the run: step x global batch + its row in the global batch, where pass m of process p
    # holds rows [(m P + p) micro, ... + micro) (accelerate gives process p every P-th batch of the order). A model that
    # draws per image (MPP's corruption) keys its draws by (seed, place), so they do not depend on the process or the
    # pass that holds the image: the run is the same on any number of processes. Kept on the device, moved on in place.
    keyed = "draw_keys" in inspect.signature(unwrapped.forward).parameters
    first_place = start_step * plan.global_batch_size + accelerator.process_index * plan.micro_batch_size
    places = (first_place + torch.arange(plan.micro_batch_size)).to(accelerator.device)
    with logging_redirect_tqdm(), StopSignals() as stop_signals, progress:
        for report in reports if start_step == 0 else ():
            report(0, 0)
        model.train()
        window_start = first_step_done = time.perf_counter()  # throughput counts training steps only
        for step in range(start_step, cfg.steps):
            lr = learning_rate(step, cfg.lr, cfg.warmup_steps, cfg.steps, cfg.decay, cfg.min_lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            for micro_step in range(plan.accumulation_steps):
                images, labels = next(batches)
                # What the model draws from the global RNG (dropout, drop-path) is a function of (seed, step, pass,
                # process), so a resumed run draws what an uninterrupted one would. Seeded after fetching the batch:
                # starting a loader iterator (as resuming does) consumes random numbers too.
                set_seed(hash((seed, step, micro_step, accelerator.process_index)) % 2**32)  # every backend's RNG
                with accelerator.accumulate(model):
                    output = model(images, labels, **({"draw_keys": keys_of(seed, places)} if keyed else {}))
                    accelerator.backward(output.loss)
                    guard.observe_loss(output.loss)
                    if accelerator.sync_gradients:  # the last pass of the step
                        grad_norm = accelerator.clip_grad_norm_(model.parameters(), cfg.grad_clip_norm)
                        guard.step(grad_norm)  # skipped on the device if its loss or gradient is not finite
                        optimizer.zero_grad(set_to_none=True)
                        if run.averaged is not None:
                            run.averaged.update(unwrapped, step=step + 1)  # one foreach lerp over the weights
                values = torch.stack([output.loss.detach(), output.accuracy.detach(), torch.ones_like(sums[0])])
                sums += torch.where(torch.isfinite(values[0]), values, 0)
                places += plan.num_processes * plan.micro_batch_size
            progress.update()
            done = step + 1
            window_steps += 1
            if done == start_step + 1:
                first_step_done = time.perf_counter()  # throughput excludes the first step's warm-up

            if done % cfg.log_every == 0 or done == cfg.steps:
                loss, accuracy, passes = accelerator.reduce(sums, "sum").tolist()
                loss, accuracy = (loss / passes, accuracy / passes) if passes else (math.nan, math.nan)
                now = time.perf_counter()
                metrics = {
                    "loss": loss,
                    run.accuracy_name: accuracy,
                    "lr": lr,
                    "grad_norm": grad_norm.item(),
                    "images_per_second": window_steps * plan.global_batch_size / (now - window_start),
                    "skipped_steps": guard.check(done, window_steps),  # raises where the run must stop
                }
                # The x-axis counts images seen, so runs with different batch sizes line up.
                images_seen = done * plan.global_batch_size
                accelerator.log({f"{run.log_prefix}train/{key}": value for key, value in metrics.items()},
                                step=images_seen)
                progress.set_postfix(loss=f"{loss:.4f}", acc=f"{accuracy:.3f}")
                logger.info(
                    "%sstep %d/%d  loss %.4f  %s %.4f  lr %.2e  grad_norm %.3f  %.1f images/s%s",
                    run.log_prefix, done, cfg.steps, loss, run.accuracy_name, accuracy, lr, metrics["grad_norm"],
                    metrics["images_per_second"], guard.describe(metrics["skipped_steps"]),
                )
                guard.reset()
                skipped_steps += metrics["skipped_steps"]
                sums.zero_()
                window_steps, window_start = 0, now

            pausing = time.perf_counter()
            for report in reports:
                if done % report.every == 0:
                    report(done, done * plan.global_batch_size)
            signum = stop_signals.agreed(accelerator, done, cfg.stop_check_every)
            if done % cfg.checkpoint_every == 0 or done == cfg.steps or signum:
                guard.check(done, window_steps)  # never checkpoint after a step that must stop the run
                path = save_checkpoint(accelerator, run.run_dir, done, run.config, cfg.keep_checkpoints, run.averaged)
                logger.info("saved checkpoint %s", path)
                if signum:
                    raise Preempted(signum, done, path)
            pause = time.perf_counter() - pausing  # speeds count training time, not reports or checkpoint writing
            window_start, first_step_done = window_start + pause, first_step_done + pause
    skipped = report_skipped_images(accelerator, run.dataset)

    steps_run = cfg.steps - start_step
    elapsed = time.perf_counter() - (first_step_done if steps_run > 1 else run_start)
    timed_steps = steps_run - 1 if steps_run > 1 else steps_run
    return {
        "step": cfg.steps,
        "loss": metrics.get("loss"),
        run.accuracy_name: metrics.get(run.accuracy_name),
        "images_per_second": timed_steps * plan.global_batch_size / elapsed if steps_run else None,
        "images_seen": cfg.steps * plan.global_batch_size,
        "num_processes": plan.num_processes,
        "global_batch_size": plan.global_batch_size,
        "steps_this_session": steps_run,
        "wall_seconds_this_session": time.perf_counter() - run_start,
        "skipped_images": skipped,
        "skipped_steps": skipped_steps,
    }
