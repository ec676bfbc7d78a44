"""What training a classifier adds to a run (supervised pre-training, fine-tuning): its top-1 accuracy on another
split once trained, and the learning-rate sweep of fine-tuning (App. B.1.1), each point a run of its own."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, Dataset

from mpp.config.runs import FinetuneRunConfig
from mpp.data.image_dataset import ImageDataset, ImageView
from mpp.data.loading import build_loader, check_batch_fits, holdout_split, prepare_loader
from mpp.errors import ConfigError, DataError
from mpp.metrics import scores_of
from mpp.models.classifier import ImageClassifier
from mpp.run import PREDICTIONS_FILE, SWEEP_DIR, Session, local_processes, read_metrics, write_metrics, write_whole
from mpp.training.trainer import Monitor, Trainer

logger = logging.getLogger(__name__)


@torch.no_grad()
def top1_predictions(accelerator: Accelerator, model: torch.nn.Module, loader: DataLoader
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(n) the class of each of ``loader``'s images with the highest logit, and (n) its label, in the loader's order.
    ``loader`` is prepared: each process scores its share, and ``gather_for_metrics`` drops the samples repeated to
    even out the last batch."""
    was_training = model.training
    model.eval()
    predicted, known = [], []
    for images, labels, random_keys in loader:
        with accelerator.autocast():  # a model accelerate did not prepare (the averaged weights) needs it too
            logits = model(images, labels, random_keys).logits
        predictions, labels = accelerator.gather_for_metrics((logits.argmax(dim=-1), labels))
        predicted.append(predictions)
        known.append(labels)
    model.train(was_training)
    return torch.cat(predicted), torch.cat(known)


def scored_models(trainer: Trainer) -> dict[str, torch.nn.Module]:
    """The weights a trained classifier is scored with: its final ones, and its averaged ones where it keeps them."""
    return {"final": trainer.model} | ({"averaged": trainer.averaged.module} if trainer.averaged is not None else {})


def eval_loader(trainer: Trainer, eval_set: Dataset) -> DataLoader:
    """``eval_set`` in its order, prepared: each process reads its share."""
    accelerator = trainer.accelerator
    batch = trainer.train_config.eval_batch_size or trainer.plan.micro_batch_size
    return prepare_loader(accelerator, build_loader(eval_set, batch, trainer.run_config.data, train=False,
                                                    device_type=accelerator.device.type,
                                                    local_processes=local_processes(accelerator)))


def score_classifier(trainer: Trainer, eval_set: Dataset, eval_name: str) -> dict[str, Any]:
    """``<eval_name>_accuracy``, ``..._balanced_accuracy`` and ``..._per_class_accuracy`` of the classifier
    ``trainer`` trained (and ``<eval_name>_accuracy_averaged``, ``..._balanced_accuracy_averaged`` of its averaged
    weights), logged and sent to TensorBoard as ``eval/...``."""
    accelerator, loader = trainer.accelerator, eval_loader(trainer, eval_set)
    scores = {}
    for weights, model in scored_models(trainer).items():
        found = scores_of(*top1_predictions(accelerator, model, loader), eval_set.num_classes, f"{eval_name}_")
        scores |= found if weights == "final" else {f"{eval_name}_{kind}_averaged": found[f"{eval_name}_{kind}"]
                                                    for kind in ("accuracy", "balanced_accuracy")}
    plain = {key: value for key, value in scores.items() if not isinstance(value, list)}
    images_seen = trainer.train_config.steps * trainer.plan.global_batch_size
    accelerator.log({f"{trainer.log_prefix}eval/{key}": value for key, value in plain.items()}, step=images_seen)
    logger.info("%s%s on %d %s images", trainer.log_prefix,
                ", ".join(f"{key} {value:.4f}" for key, value in plain.items()), len(eval_set), eval_name)
    return scores


def seal_predictions(trainer: Trainer, eval_set: Dataset, eval_name: str) -> dict[str, Any]:
    """The classifier's predictions on ``eval_set``, with its labels, written to the run's ``PREDICTIONS_FILE``
    unscored (``finetune.sealed``): a registered test reads its seeds' predictions once, after the last. Nothing
    is scored, logged or sent to TensorBoard; the metrics say where the predictions are."""
    accelerator, loader = trainer.accelerator, eval_loader(trainer, eval_set)
    sealed: dict[str, Any] = {"split": eval_name, "class_names": list(getattr(eval_set, "class_names", ())) or
                              [str(label) for label in range(eval_set.num_classes)]}
    for weights, model in scored_models(trainer).items():
        predictions, labels = top1_predictions(accelerator, model, loader)
        sealed |= {"labels": labels.tolist(), weights: predictions.tolist()}
    if accelerator.is_main_process:
        path = trainer.run_dir / PREDICTIONS_FILE
        write_whole(path, lambda partial: partial.write_text(json.dumps(sealed) + "\n"))
    logger.info("%s%d %s images predicted and sealed, not scored, in %s", trainer.log_prefix, len(eval_set),
                eval_name, PREDICTIONS_FILE)
    return {f"{eval_name}_predictions": PREDICTIONS_FILE}


def train_classifier(trainer: Trainer, eval_set: Dataset, eval_name: str, monitors: Sequence[Monitor] = (),
                     sealed: bool = False) -> dict[str, Any]:
    """Train, then score top-1 on ``eval_set`` (``sealed``: write its predictions unscored): the run's metrics with
    its peak ``lr`` and its scores."""
    metrics = trainer.fit(monitors)
    metrics["lr"] = trainer.train_config.lr
    metrics.update((seal_predictions if sealed else score_classifier)(trainer, eval_set, eval_name))
    return metrics


def chosen_learning_rate(run_dir: Path) -> float:
    """The learning rate a finished fine-tuning run's sweep chose (finetune.lr_from)."""
    metrics = read_metrics(run_dir)
    if metrics is None or not metrics.get("chosen_lr"):
        raise ConfigError(f"finetune.lr_from={run_dir}: no fine-tuning run there has finished a learning-rate sweep "
                          "(its metrics.json with chosen_lr); run that one first, with finetune.sweep_lrs")
    return float(metrics["chosen_lr"])


def grid_edge(rate: float, rates: Sequence[float]) -> Optional[str]:
    """"highest" or "lowest" where a sweep chose the end of its grid (the best rate may lie beyond it), else None."""
    if len(rates) < 2 or min(rates) < rate < max(rates):
        return None
    return "highest" if rate == max(rates) else "lowest"


def sweep_split(config: FinetuneRunConfig, train_set: Dataset, eval_view: ImageView, global_batch_size: int
                ) -> tuple[ImageDataset, ImageDataset]:
    """The learning-rate sweep's training images and its held-out slice of ``train_set`` (seeded by
    ``data.subset_seed``), the slice seen through ``eval_view``; refused, before the run writes anything, where the
    training images left would not fill one global batch."""
    if not isinstance(train_set, ImageDataset):
        raise DataError("a learning-rate sweep holds out part of the training images; it needs data.streaming=false")
    kept, held_out = holdout_split(len(train_set), config.finetune.sweep_holdout_fraction, config.data.subset_seed)
    sweep_train = train_set.subset(kept)
    check_batch_fits(sweep_train, global_batch_size, described=(
        f"the learning-rate sweep holds out finetune.sweep_holdout_fraction={config.finetune.sweep_holdout_fraction:g}"
        " of the training images: the rest"))
    return sweep_train, train_set.subset(held_out, eval_view)


def sweep_learning_rates(session: Session, config: FinetuneRunConfig, fresh_model: Callable[[], ImageClassifier],
                         split: tuple[ImageDataset, ImageDataset]) -> dict[float, float]:
    """The held-out score (``finetune.sweep_score``) of each learning rate of ``config.finetune.sweep_lrs`` (App.
    B.1.1): each trains a ``fresh_model()`` on the sweep's training images and is scored on its held-out slice
    (``sweep_split``; the averaged weights' score when the run averages). Each point is a run of its own in
    ``<run>/sweep/lr_<lr>``; a finished one (its metrics.json) is read back when resuming."""
    sweep = config.finetune
    sweep_train, holdout = split
    score = f"holdout_{sweep.sweep_score}" + ("_averaged" if sweep.ema_decay else "")
    scores = {}
    for lr in sweep.sweep_lrs:
        point_dir = session.run_dir / SWEEP_DIR / f"lr_{lr:g}"
        finished = read_metrics(point_dir)
        if finished is not None:
            scores[lr] = finished[score]
            continue
        point_dir.mkdir(parents=True, exist_ok=True)
        trainer = Trainer(session, fresh_model(), sweep_train, config, train=dataclasses.replace(config.train, lr=lr),
                          run_dir=point_dir, resume="auto" if config.resume else "", ema_decay=sweep.ema_decay,
                          layer_decay=sweep.layer_decay, log_prefix=f"sweep/lr_{lr:g}/")
        metrics = train_classifier(trainer, holdout, "holdout")
        write_metrics(point_dir, metrics)
        scores[lr] = metrics[score]
    return scores
