"""Fine-tuning an encoder (pre-trained, or fresh without init) on a classification task, one run
(recipes/finetune.py; ``mpp.finetune``): the learning-rate sweep when asked, then training on all the training images
and top-1 on the test split (or on a held-out slice of the training split; or its predictions, sealed)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from accelerate.utils import set_seed
from timm.models.vision_transformer import VisionTransformer

from mpp.config.runs import FinetuneRunConfig
from mpp.data.augmentation import image_augmentation
from mpp.data.image_dataset import image_view
from mpp.data.loading import build_dataset, check_classes_to_learn, warn_if_tested_on_training_images
from mpp.metrics import floors_said
from mpp.models.classifier import ImageClassifier
from mpp.models.encoder import count_parameters
from mpp.models.mixing import batch_mixing
from mpp.models.pretrained import fine_tuning_encoder, fine_tuning_model_config, input_normalisation, read_pretrained
from mpp.recipes.run_result import RunResult
from mpp.run import Session
from mpp.training.classifier_training import (
    chosen_learning_rate,
    grid_edge,
    sweep_learning_rates,
    sweep_split,
    train_classifier,
)
from mpp.training.trainer import Trainer

logger = logging.getLogger(__name__)


def fine_tune(cfg: FinetuneRunConfig) -> RunResult:
    """One fine-tuning run of ``cfg`` (its sweep first, if asked): its metrics and run directory."""
    with Session(cfg, cfg.train, prefix="finetune") as session:
        accelerator = session.accelerator
        # Starting weights, model, data, optimizer: everything that can be wrong fails here, before anything is
        # written.
        pretrained = read_pretrained(cfg.init) if cfg.init else None
        model_cfg = fine_tuning_model_config(cfg.model, pretrained)
        mean, std = input_normalisation(pretrained, cfg.data.mean, cfg.data.std)

        def fresh_encoder() -> VisionTransformer:
            """The same starting point for every run of the sweep and the final run."""
            set_seed(cfg.seed)
            return fine_tuning_encoder(model_cfg, pretrained)

        encoder = fresh_encoder()
        image_size = encoder.patch_embed.img_size[0]
        split = dict(image_size=image_size, channels=model_cfg.in_chans, seed=cfg.seed,
                     process_index=accelerator.process_index, num_processes=accelerator.num_processes)
        # The scored split first (the test split, or the training split's held-out slice): its classes must be the
        # training data's, and a classifier needs two of them, which matter more to fix than the shots per class.
        scored = cfg.finetune.scored_split
        test_set = build_dataset(cfg.data, scored, augment=False, **split)
        check_classes_to_learn(test_set)
        train_set = build_dataset(cfg.data, "train", augment=True, **split,
                                  per_image=image_augmentation(cfg.augment, mean, std))

        mixing = batch_mixing(cfg.augment, train_set.num_classes, cfg.classifier.label_smoothing)

        def classifier(encoder: VisionTransformer) -> ImageClassifier:
            return ImageClassifier(encoder, train_set.num_classes, cfg.classifier, mean, std, mixing)

        def trainer_at(lr: float) -> Trainer:
            return Trainer(session, classifier(encoder), train_set, cfg, train=dataclasses.replace(cfg.train, lr=lr),
                           ema_decay=cfg.finetune.ema_decay, layer_decay=cfg.finetune.layer_decay)

        # Made now so that a config that cannot train fails before any write.
        trainer = trainer_at(chosen_learning_rate(Path(cfg.finetune.lr_from)) if cfg.finetune.lr_from else cfg.train.lr)
        sweep_images = (sweep_split(cfg, train_set, image_view(cfg.data, image_size, augment=False),
                                    trainer.plan.global_batch_size) if cfg.finetune.sweep_lrs else None)

        session.start()
        warn_if_tested_on_training_images(train_set, test_set)
        logger.info("init: %s", pretrained.location if pretrained else "none (training from scratch)")
        logger.info("plan: %s%s", trainer.describe(),
                    f" (the learning rate {cfg.finetune.lr_from} chose)" if cfg.finetune.lr_from else "")
        logger.info("data: %s; %s: %s%s", train_set.description, scored, test_set.description,
                    f"; each pass mixed: {mixing.description}" if mixing is not None else "")
        logger.info("encoder: %s, %.2fM parameters, %d patches of %d px at %d px; zero-initialised %s head, %d "
                    "classes", model_cfg.name, count_parameters(encoder) / 1e6, encoder.patch_embed.num_patches,
                    encoder.patch_embed.patch_size[0], image_size, cfg.classifier.head, train_set.num_classes)

        sweep = {}
        if sweep_images is not None:
            logger.info("sweep: learning rates %s, each trained on %d of the training images and scored on the %d "
                        "held out, then the best on all of them", ", ".join(f"{lr:g}" for lr in cfg.finetune.sweep_lrs),
                        len(sweep_images[0]), len(sweep_images[1]))
            sweep = sweep_learning_rates(session, cfg, lambda: classifier(fresh_encoder()), sweep_images)
            trainer = trainer_at(max(sweep, key=sweep.get))  # the best rate, on all images
            logger.info("sweep: holdout %s %s; training with lr %g on all %d training images",
                        cfg.finetune.sweep_score.replace("_", " "),
                        ", ".join(f"lr {rate:g}: {score:.4f}" for rate, score in sweep.items()),
                        trainer.train_config.lr, len(train_set))
            edge = grid_edge(trainer.train_config.lr, cfg.finetune.sweep_lrs)
            if edge:
                logger.warning("sweep: lr %g is the %s rate of finetune.sweep_lrs, so the best rate may lie beyond it; "
                               "add a rate %s it and run again", trainer.train_config.lr, edge,
                               "above" if edge == "highest" else "below")
        metrics = train_classifier(trainer, test_set, scored, sealed=cfg.finetune.sealed)
        metrics.update(init=cfg.init or None, chosen_lr=max(sweep, key=sweep.get) if sweep else None,
                       **{f"sweep_holdout_{cfg.finetune.sweep_score}": {f"{rate:g}": score for rate, score in
                                                                         sweep.items()} or None})
        session.finish(metrics)
    if cfg.finetune.sealed:
        logger.info("done: with lr %g; the %s split's predictions sealed in %s", trainer.train_config.lr, scored,
                    metrics[f"{scored}_predictions"])
    else:
        logger.info("done: %s_accuracy %.4f%s, balanced %.4f, with lr %g; %s", scored, metrics[f"{scored}_accuracy"],
                    f" (averaged weights: {metrics[f'{scored}_accuracy_averaged']:.4f})" if cfg.finetune.ema_decay
                    else "", metrics[f"{scored}_balanced_accuracy"], trainer.train_config.lr,
                    floors_said(metrics, f"{scored}_"))
    return RunResult(session.run_dir, metrics)
