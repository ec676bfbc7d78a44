"""What a pre-training run reports besides its loss, every so many steps (``monitor.*``): few-shot accuracy of the
encoder as it trains, and for MPP, mosaics of its predictions. The training loop calls each as
``report(step, images_seen)`` before the first step and after every ``report.every`` steps. ``monitored_images``
is what they read, and what MPP's closing comparison with the encoder at initialisation reads.
"""

from __future__ import annotations

from pathlib import Path

from accelerate import Accelerator

from mpp.config import ConfigError, DataConfig, MonitorConfig, MPPMonitorConfig
from mpp.data.image_dataset import ImageDataset
from mpp.data.loading import build_dataset, sample_images
from mpp.evaluation.few_shot import FewShotMonitor
from mpp.evaluation.mpp_mosaic import MPPMosaic
from mpp.models.encoder import ImageEncoder


def pre_training_monitors(accelerator: Accelerator, model: ImageEncoder, cfg: MonitorConfig, data: DataConfig,
                          run_dir: Path, seed: int, dataset: ImageDataset | None = None
                          ) -> list[FewShotMonitor | MPPMosaic]:
    """The reports ``cfg`` asks for, on ``model`` (unwrapped: its ``encoder`` and ``normalise`` are used in place).
    They read ``dataset``, by default ``monitored_images`` (pass it where the caller reads it too); built before the
    run starts, so that data they cannot use (a stream, no labels, too few images per class) is refused before
    anything is written."""
    mosaic_every = cfg.mosaic_every if isinstance(cfg, MPPMonitorConfig) else 0
    if not (cfg.few_shot_every or mosaic_every):
        return []
    if dataset is None:
        dataset = monitored_images(model, data, seed)
    reports: list[FewShotMonitor | MPPMosaic] = []
    if cfg.few_shot_every:
        reports.append(FewShotMonitor(accelerator, model, dataset, cfg, seed))
    if mosaic_every:
        images = next(iter(sample_images(dataset, cfg.mosaic_images, seed)))
        reports.append(MPPMosaic(accelerator, model, images, run_dir, seed, mosaic_every))
    return reports


def monitored_images(model: ImageEncoder, data: DataConfig, seed: int) -> ImageDataset:
    """The training split through the evaluation view (no augmentation), as ``model``'s encoder reads it."""
    if data.streaming:
        raise ConfigError("monitor.few_shot_every, monitor.mosaic_every and monitor.final_few_shot_draws pick images "
                          "of the training split by position, which a stream cannot; set them to 0 with "
                          "data.streaming=true")
    encoder = model.encoder
    return build_dataset(data, "train", encoder.patch_embed.img_size[0], encoder.patch_embed.proj.in_channels,
                         augment=False, seed=seed)
