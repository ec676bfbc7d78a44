"""One classifier training run, shared by supervised pre-training and fine-tuning (each point of a learning-rate
sweep is one too): train on one split, score top-1 on another, with optional weight averaging (Table 2: Polyak).

Each run owns a directory (checkpoints, metrics.json); TensorBoard tags start with ``log_prefix``, so the runs of a
sweep share the parent run's events file.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from accelerate import Accelerator
from timm.utils import ModelEmaV3
from torch.utils.data import Dataset

from mpp.checkpoint import check_resume_compatible, load_checkpoint, resume_checkpoint
from mpp.classifier import ImageClassifier
from mpp.data import build_loader, prepare_loader
from mpp.data.image_dataset import ImageDataset
from mpp.data.sources import DataError
from mpp.data.subsets import holdout_split
from mpp.data.transforms import ImageView
from mpp.engine import Report, local_processes, plan_batches, train
from mpp.evaluation import top1_accuracy
from mpp.optimizer import create_optimizer
from mpp.run_directory import read_metrics, write_metrics

logger = logging.getLogger(__name__)


def train_classifier(
    accelerator: Accelerator,
    model: ImageClassifier,
    train_set: Dataset,
    eval_set: Dataset,
    eval_name: str,
    config: Any,
    lr: float,
    run_dir: Path,
    checkpoint: Optional[Path] = None,
    ema_decay: float = 0.0,
    log_prefix: str = "",
    periodic: Sequence[Report] = (),
) -> dict[str, Any]:
    """Train ``model`` at peak learning rate ``lr`` (``config.train`` otherwise), from ``checkpoint`` if given, then
    score it on ``eval_set``. Returns the metrics, with ``<eval_name>_accuracy`` (and ``..._averaged`` when
    ``ema_decay`` averages the weights); checkpoints go to ``run_dir``; ``periodic`` reports go to ``train``."""
    train_cfg = dataclasses.replace(config.train, lr=lr)
    plan = plan_batches(train_cfg, accelerator.num_processes)
    accelerator.gradient_accumulation_steps = plan.accumulation_steps
    device, processes = accelerator.device.type, local_processes(accelerator)
    loader = build_loader(train_set, plan.micro_batch_size, config.data, True, device, processes)
    eval_loader = build_loader(eval_set, plan.micro_batch_size, config.data, False, device, processes)
    optimizer = create_optimizer(model, train_cfg)

    accelerator.free_memory()  # only this run's model and optimizer are prepared, so only they are checkpointed
    model, optimizer = accelerator.prepare(model, optimizer)
    loader, eval_loader = prepare_loader(accelerator, loader), prepare_loader(accelerator, eval_loader)
    # A copy of the weights, lerped towards the trained ones after every step; on the model's device.
    averaged = ModelEmaV3(accelerator.unwrap_model(model), decay=ema_decay) if ema_decay else None
    start_step = 0
    if checkpoint is not None:
        start_step = load_checkpoint(accelerator, checkpoint, averaged)
        logger.info("%sresumed from %s at step %d", log_prefix, checkpoint, start_step)

    metrics = train(accelerator, model, optimizer, loader, train_cfg, plan, run_dir, config, config.seed, start_step,
                    accuracy_name="train_accuracy", averaged=averaged, log_prefix=log_prefix, periodic=periodic)
    metrics["lr"] = lr
    metrics[f"{eval_name}_accuracy"] = top1_accuracy(accelerator, model, eval_loader)
    if averaged is not None:
        metrics[f"{eval_name}_accuracy_averaged"] = top1_accuracy(accelerator, averaged.module, eval_loader)
    scores = {key: value for key, value in metrics.items() if key.startswith(f"{eval_name}_accuracy")}
    accelerator.log({f"{log_prefix}eval/{key}": value for key, value in scores.items()}, step=metrics["images_seen"])
    logger.info("%s%s on %d %s images", log_prefix,
                ", ".join(f"{key} {value:.4f}" for key, value in scores.items()), len(eval_set), eval_name)
    return metrics


def sweep_learning_rates(
    accelerator: Accelerator,
    config: Any,
    fresh_model: Callable[[], ImageClassifier],
    train_set: ImageDataset,
    eval_view: ImageView,
    run_dir: Path,
) -> dict[float, float]:
    """The held-out accuracy of each learning rate of ``config.finetune.sweep_lrs`` (App. B.1.1): each trains a
    ``fresh_model()`` on ``train_set`` less a seeded slice of it and is scored on that slice, seen through
    ``eval_view`` (the averaged weights' accuracy when the run averages). Each point is a run of its own in
    ``run_dir/sweep/lr_<lr>``; a finished one (its metrics.json) is read back when resuming."""
    sweep = config.finetune
    if not isinstance(train_set, ImageDataset):
        raise DataError("a learning-rate sweep holds out part of the training images; it needs data.streaming=false")
    kept, held_out = holdout_split(len(train_set), sweep.sweep_holdout_fraction, config.data.subset_seed)
    sweep_train, holdout = train_set.subset(kept), train_set.subset(held_out, eval_view)
    score = "holdout_accuracy_averaged" if sweep.ema_decay else "holdout_accuracy"
    scores = {}
    for lr in sweep.sweep_lrs:
        point_dir = run_dir / "sweep" / f"lr_{lr:g}"
        finished = read_metrics(point_dir)
        if finished is not None:
            scores[lr] = finished[score]
            continue
        point_dir.mkdir(parents=True, exist_ok=True)
        checkpoint = resume_checkpoint("auto" if config.resume else "", point_dir)
        if checkpoint is not None:
            check_resume_compatible(checkpoint, config)
        metrics = train_classifier(accelerator, fresh_model(), sweep_train, holdout, "holdout", config, lr, point_dir,
                                   checkpoint, sweep.ema_decay, log_prefix=f"sweep/lr_{lr:g}/")
        write_metrics(point_dir, metrics)
        scores[lr] = metrics[score]
    return scores
