"""Pre-training, one run of either kind: masked patch prediction (recipes/mpp.py; ``mpp.pretrain``) and supervised
pre-training of a ViT classifier (recipes/supervised.py; ``mpp.pretrain(method="supervised")``), each in its fixed
order: the model, data and monitors checked before anything is written, training, the export. MPP adds the floor it
must beat (always predicting the most frequent colour) and its closing comparison with the encoder at initialisation;
supervised pre-training, top-1 on the test split.

The monitors of a pre-training run: what it measures besides its loss, every so many steps (``monitor.*``): few-shot
accuracy of the encoder as it trains, and for MPP, mosaics of its predictions. The training loop calls each monitor
as ``monitor(step, images_seen)`` before the first step and after every ``monitor.every`` steps.
``monitored_images`` is what they read, and what MPP's closing comparison with the encoder at initialisation reads.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import torch
from accelerate import Accelerator

from mpp.config.data import DataConfig
from mpp.config.runs import MPPRunConfig, SupervisedRunConfig
from mpp.config.training import MonitorConfig, MPPMonitorConfig
from mpp.data.augmentation import image_augmentation
from mpp.data.image_dataset import ImageDataset
from mpp.data.loading import build_dataset, class_label, sample_images, warn_if_tested_on_training_images
from mpp.errors import ConfigError
from mpp.evaluation.few_shot_regression import FewShotAgainstInitialisation, FewShotMonitor
from mpp.evaluation.mpp_mosaic import MPPMosaic
from mpp.models.classifier import ImageClassifier
from mpp.models.encoder import BuiltOnEncoder, count_parameters, create_encoder
from mpp.models.masked_patch_prediction import MaskedPatchPredictor, mpp_majority_class_accuracy
from mpp.models.mixing import batch_mixing
from mpp.models.model_card import model_card
from mpp.models.pretrained import export_encoder
from mpp.recipes.run_result import RunResult
from mpp.run import EXPORT_DIR, Session
from mpp.training.classifier_training import train_classifier
from mpp.training.trainer import Trainer

logger = logging.getLogger(__name__)

# MPP pre-training.
BASELINE_IMAGES = 2048  # sampled to measure the accuracy of always predicting the most frequent colour class


def pretrain_mpp(cfg: MPPRunConfig) -> RunResult:
    """One MPP pre-training run of ``cfg``: its metrics and run directory (with export/)."""
    with Session(cfg, cfg.train, prefix="mpp") as session:
        accelerator = session.accelerator
        # Model, data, optimizer, monitors: everything that can be wrong with the config fails here, before anything
        # is written.
        encoder = create_encoder(cfg.model)
        model = MaskedPatchPredictor(encoder, cfg.mpp, mean=cfg.data.mean, std=cfg.data.std)
        dataset = build_dataset(cfg.data, "train", image_size=encoder.patch_embed.img_size[0],
                                channels=cfg.model.in_chans, augment=True, seed=cfg.seed,
                                process_index=accelerator.process_index, num_processes=accelerator.num_processes)
        trainer = Trainer(session, model, dataset, cfg, accuracy_name="mpp_accuracy")
        monitor = cfg.monitor
        monitored = (monitored_images(model, cfg.data, cfg.seed)
                     if monitor.few_shot_every or monitor.mosaic_every or monitor.final_few_shot_draws else None)
        if monitored is not None:  # a small folder of images: the few-shot slices shrink to it, with a warning
            monitor = monitor_fitted_to_classes(monitor, monitored)
        monitors = pre_training_monitors(accelerator, model, monitor, cfg.data, session.run_dir, cfg.seed, monitored)
        # Copies the encoder before its first step (a resumed run draws the same one: the session seeds it).
        against_init = (FewShotAgainstInitialisation(accelerator, model, monitored, monitor, cfg.seed)
                        if monitor.final_few_shot_draws else None)

        session.start()
        logger.info("plan: %s", trainer.describe())
        logger.info("data: %s", dataset.description)
        logger.info("encoder: %s, %.2fM parameters, %d patches per image; target %s", cfg.model.name,
                    count_parameters(encoder) / 1e6, encoder.patch_embed.num_patches, cfg.mpp.target)
        baseline = mpp_majority_class_accuracy(model, sample_images(dataset, BASELINE_IMAGES, cfg.seed))
        logger.info("always predicting the most frequent colour class scores mpp_accuracy %.4f (on up to %d images)",
                    baseline, BASELINE_IMAGES)

        metrics = trainer.fit(monitors)
        metrics["mpp_majority_class_accuracy"] = baseline
        metrics["mpp_accuracy_above_floor"] = metrics["mpp_accuracy"] > baseline
        if against_init is not None:
            metrics |= against_init()
            accelerator.log({"few_shot/final_trained": metrics["few_shot_accuracy"],
                             "few_shot/final_at_init": metrics["few_shot_accuracy_at_init"]}, step=0)
        encoder = trainer.trained_encoder(cfg.model)  # on every process: under FSDP it gathers the shards
        if accelerator.is_main_process:  # the encoder alone, in timm's hub format
            export_encoder(encoder, session.run_dir / EXPORT_DIR, cfg.data.mean, cfg.data.std,
                           tag="mpp", eval_crop_fraction=cfg.data.eval_crop_fraction, pool=cfg.export.features,
                           card=model_card(cfg, trainer.train_config, metrics, encoder, session.run_dir.name))
        session.finish(metrics)
    logger.info("done: loss %s, mpp_accuracy %s (most frequent class: %.4f), %.1f images/s; encoder exported to %s",
                metrics["loss"], metrics["mpp_accuracy"], baseline, metrics["images_per_second"] or 0,
                session.run_dir / EXPORT_DIR)
    if not metrics["mpp_accuracy_above_floor"]:
        logger.warning("mpp_accuracy %.4f is not above always predicting the most frequent colour (%.4f): MPP has "
                       "learned nothing it measures yet; train longer (train.steps or train.epochs), or check "
                       "train.lr and the data", metrics["mpp_accuracy"], baseline)
    return RunResult(session.run_dir, metrics)


# Supervised pre-training.
def pretrain_supervised(cfg: SupervisedRunConfig) -> RunResult:
    """One supervised pre-training run of ``cfg``: its metrics and run directory (with export/)."""
    with Session(cfg, cfg.train, prefix="supervised") as session:
        accelerator = session.accelerator
        # Model, data, optimizer, monitors: everything that can be wrong with the config fails here, before anything
        # is written.
        encoder = create_encoder(cfg.model)
        split = dict(image_size=encoder.patch_embed.img_size[0], channels=cfg.model.in_chans, seed=cfg.seed,
                     process_index=accelerator.process_index, num_processes=accelerator.num_processes)
        train_set = build_dataset(cfg.data, "train", augment=True, **split, per_image=image_augmentation(
            cfg.augment, cfg.data.mean, cfg.data.std))
        test_set = build_dataset(cfg.data, "test", augment=False, **split)
        model = ImageClassifier(encoder, train_set.num_classes, cfg.classifier, cfg.data.mean, cfg.data.std,
                                batch_mixing(cfg.augment, train_set.num_classes, cfg.classifier.label_smoothing))
        trainer = Trainer(session, model, train_set, cfg)
        monitors = pre_training_monitors(accelerator, model, cfg.monitor, cfg.data, session.run_dir, cfg.seed)

        session.start()
        warn_if_tested_on_training_images(train_set, test_set)
        logger.info("plan: %s", trainer.describe())
        logger.info("data: %s; test: %s%s", train_set.description, test_set.description,
                    f"; each pass mixed: {model.mixing.description}" if model.mixing is not None else "")
        logger.info("encoder: %s, %.2fM parameters, %d patches per image; %s head on the %s, %d classes",
                    cfg.model.name, count_parameters(encoder) / 1e6, encoder.patch_embed.num_patches,
                    cfg.classifier.head, "[class] token" if cfg.classifier.pool == "token" else "mean patch token",
                    train_set.num_classes)

        metrics = train_classifier(trainer, test_set, "test", monitors)
        encoder = trainer.trained_encoder(cfg.model)  # on every process: under FSDP it gathers the shards
        if accelerator.is_main_process:  # the encoder alone: fine-tuning replaces the pre-training head (Sec. 3.2)
            export_encoder(encoder, session.run_dir / EXPORT_DIR, cfg.data.mean, cfg.data.std,
                           tag="supervised", eval_crop_fraction=cfg.data.eval_crop_fraction, pool=cfg.classifier.pool,
                           card=model_card(cfg, trainer.train_config, metrics, encoder, session.run_dir.name))
        session.finish(metrics)
    logger.info("done: loss %s, test_accuracy %.4f, %.1f images/s; encoder exported to %s", metrics["loss"],
                metrics["test_accuracy"], metrics["images_per_second"] or 0, session.run_dir / EXPORT_DIR)
    return RunResult(session.run_dir, metrics)


# The monitors of a pre-training run.
def pre_training_monitors(accelerator: Accelerator, model: BuiltOnEncoder, cfg: MonitorConfig, data: DataConfig,
                          run_dir: Path, seed: int, dataset: ImageDataset | None = None
                          ) -> list[FewShotMonitor | MPPMosaic]:
    """The monitors ``cfg`` asks for, on ``model`` (unwrapped: its ``encoder`` and ``normalise`` are used in place).
    They read ``dataset``, by default ``monitored_images`` (pass it where the caller reads it too); built before the
    run starts, so that data they cannot use (a stream, no labels, too few images per class) is refused before
    anything is written."""
    mosaic_every = cfg.mosaic_every if isinstance(cfg, MPPMonitorConfig) else 0
    if not (cfg.few_shot_every or mosaic_every):
        return []
    if dataset is None:
        dataset = monitored_images(model, data, seed)
    cfg = monitor_fitted_to_classes(cfg, dataset)
    monitors: list[FewShotMonitor | MPPMosaic] = []
    if cfg.few_shot_every:
        monitors.append(FewShotMonitor(accelerator, model, dataset, cfg, seed))
    if mosaic_every:
        images = next(iter(sample_images(dataset, cfg.mosaic_images, seed)))
        monitors.append(MPPMosaic(accelerator, model, images, run_dir, seed, mosaic_every))
    return monitors


def monitored_images(model: BuiltOnEncoder, data: DataConfig, seed: int) -> ImageDataset:
    """The training split through the evaluation view (no augmentation), as ``model``'s encoder reads it."""
    if data.streaming:
        raise ConfigError("monitor.few_shot_every, monitor.mosaic_every and monitor.final_few_shot_draws pick images "
                          "of the training split by position, which a stream cannot; set them to 0 with "
                          "data.streaming=true")
    encoder = model.encoder
    return build_dataset(data, "train", encoder.patch_embed.img_size[0], encoder.patch_embed.proj.in_channels,
                         augment=False, seed=seed)


def monitor_fitted_to_classes(cfg: MonitorConfig, dataset: ImageDataset) -> MonitorConfig:
    """``cfg`` with its few-shot slices (shots, hold-out, test images per class) shrunk to the smallest class of
    ``dataset``, or the few-shot monitor off where it cannot hold one shot, one image to choose the penalty on and one
    to score, or has no labels; one warning line when anything changes. A monitor nobody asked for by name (the
    presets' defaults) never stops a run on a small folder of images."""
    wanted = cfg.few_shot_every or getattr(cfg, "final_few_shot_draws", 0)
    asked = (cfg.few_shot_shots, cfg.few_shot_holdout_per_class, cfg.few_shot_test_per_class)
    if not wanted or not len(dataset):
        return cfg
    labels = dataset.labels
    off = {"few_shot_every": 0, **({"final_few_shot_draws": 0} if isinstance(cfg, MPPMonitorConfig) else {})}
    if (labels < 0).any():
        logger.warning("monitor.few_shot_*: the training split has unlabelled images, and few-shot accuracy needs "
                       "labels; the few-shot monitor is off")
        return dataclasses.replace(cfg, **off)
    counts = torch.bincount(labels, minlength=dataset.num_classes)
    smallest = int(torch.where(counts > 0, counts, counts.max() + 1).argmin())
    fewest = int(counts[smallest])
    if fewest >= sum(asked):
        return cfg
    said = (f"monitor.few_shot_*: the smallest class of the training split, "
            f"{class_label(smallest, dataset.class_names)}, has {fewest} images, fewer than the {sum(asked)} per "
            f"class its slices ask ({asked[0]} shots, "
            f"{asked[1]} to choose the penalty on, {asked[2]} to score on)")
    shots = min(asked[0], fewest - 2)
    if shots < 1:
        logger.warning("%s; the few-shot monitor is off", said)
        return dataclasses.replace(cfg, **off)
    holdout = max(1, (fewest - shots) * asked[1] // (asked[1] + asked[2]))
    fitted = dataclasses.replace(cfg, few_shot_shots=shots, few_shot_holdout_per_class=holdout,
                                 few_shot_test_per_class=fewest - shots - holdout)
    logger.warning("%s; they use %d, %d and %d", said, fitted.few_shot_shots, fitted.few_shot_holdout_per_class,
                   fitted.few_shot_test_per_class)
    return fitted
