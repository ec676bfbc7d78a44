"""Supervised pre-training of a ViT classifier, one run (recipes/supervised.py; ``mpp.pretrain(method="supervised")``):
training on the labels, top-1 on the test split, the encoder exported."""

from __future__ import annotations

import logging

from mpp.config.runs import SupervisedRunConfig
from mpp.data.augmentation import image_augmentation
from mpp.data.loading import build_dataset, warn_if_tested_on_training_images
from mpp.evaluation.monitors import pre_training_monitors
from mpp.models.classifier import ImageClassifier
from mpp.models.encoder import count_parameters, create_encoder
from mpp.models.mixing import batch_mixing
from mpp.models.model_card import model_card
from mpp.models.pretrained import export_encoder
from mpp.recipes.run_result import RunResult
from mpp.run import EXPORT_DIR, Session
from mpp.training.classifier_training import train_classifier
from mpp.training.trainer import Trainer

logger = logging.getLogger(__name__)


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
