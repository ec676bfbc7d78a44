"""Masked patch prediction pre-training, one run (recipes/mpp.py; ``mpp.pretrain``): the model, data and monitors
checked before anything is written, the floor MPP must beat, training, the closing comparison with the encoder at
initialisation, the export."""

from __future__ import annotations

import logging

from mpp.config.runs import MPPRunConfig
from mpp.data.loading import build_dataset, sample_images
from mpp.evaluation.few_shot_regression import FewShotAgainstInitialisation
from mpp.evaluation.monitors import monitor_fitted_to_classes, monitored_images, pre_training_monitors
from mpp.models.encoder import count_parameters, create_encoder
from mpp.models.masked_patch_prediction import MaskedPatchPredictor, mpp_majority_class_accuracy
from mpp.models.model_card import model_card
from mpp.models.pretrained import export_encoder
from mpp.recipes.run_result import RunResult
from mpp.run import EXPORT_DIR, Session
from mpp.training.trainer import Trainer

BASELINE_IMAGES = 2048  # sampled to measure the accuracy of always predicting the most frequent colour class
logger = logging.getLogger(__name__)


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
