"""The monitors of a pre-training run: what it measures besides its loss, every so many steps (``monitor.*``):
few-shot accuracy of the encoder as it trains, and for MPP, mosaics of its predictions. The training loop calls each
monitor as ``monitor(step, images_seen)`` before the first step and after every ``monitor.every`` steps.
``monitored_images`` is what they read, and what MPP's closing comparison with the encoder at initialisation reads.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import torch
from accelerate import Accelerator

from mpp.config.data import DataConfig
from mpp.config.training import MonitorConfig, MPPMonitorConfig
from mpp.data.image_dataset import ImageDataset
from mpp.data.loading import build_dataset, class_label, sample_images
from mpp.errors import ConfigError
from mpp.evaluation.few_shot_regression import FewShotMonitor
from mpp.evaluation.mpp_mosaic import MPPMosaic
from mpp.models.encoder import BuiltOnEncoder

logger = logging.getLogger(__name__)


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
