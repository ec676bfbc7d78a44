"""Supervised pre-training of a Vision Transformer classifier (ViT paper Sec. 4.1, App. B.1, Table 3).

    accelerate launch recipes/supervised.py [--config recipes/configs/<preset>.yaml] [--resume] [key=value ...]

With no arguments: the tiny CPU preset on the embedded shapes data. The run directory gets what recipes/mpp.py
writes (config.yaml, log.txt, TensorBoard events, checkpoints/, export/ with the encoder, metrics.json), with the
test split's top-1 accuracy in metrics.json. Fine-tune the result with recipes/finetune.py init=<run directory>.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

# Python puts this script's folder first on sys.path, where recipes/mpp.py would shadow the `mpp` package.
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from mpp.command_line import run_recipe
from mpp.config.runs import SupervisedRunConfig
from mpp.data.loading import build_dataset, warn_if_tested_on_training_images
from mpp.evaluation.monitors import pre_training_monitors
from mpp.models.classifier import ImageClassifier
from mpp.models.encoder import count_parameters, create_encoder
from mpp.models.model_card import model_card
from mpp.models.pretrained import export_encoder
from mpp.run.directory import EXPORT_DIR
from mpp.run.session import Session
from mpp.training.classifier_training import train_classifier
from mpp.training.trainer import Trainer

DEFAULT_PRESET = Path(__file__).parent / "configs" / "supervised_tiny_cpu.yaml"
logger = logging.getLogger("mpp.recipes.supervised")


def main(cfg: SupervisedRunConfig) -> dict[str, Any]:
    with Session(cfg, cfg.train, prefix="supervised") as session:
        accelerator = session.accelerator
        # Model, data, optimizer, monitors: everything that can be wrong with the config fails here, before anything
        # is written.
        encoder = create_encoder(cfg.model)
        split = dict(image_size=encoder.patch_embed.img_size[0], channels=cfg.model.in_chans, seed=cfg.seed,
                     process_index=accelerator.process_index, num_processes=accelerator.num_processes)
        train_set = build_dataset(cfg.data, "train", augment=True, **split)
        test_set = build_dataset(cfg.data, "test", augment=False, **split)
        model = ImageClassifier(encoder, train_set.num_classes, cfg.classifier, cfg.data.mean, cfg.data.std)
        trainer = Trainer(session, model, train_set, cfg)
        monitors = pre_training_monitors(accelerator, model, cfg.monitor, cfg.data, session.run_dir, cfg.seed)

        session.start()
        warn_if_tested_on_training_images(train_set, test_set)
        logger.info("plan: %s", trainer.describe())
        logger.info("data: %s; test: %s", train_set.description, test_set.description)
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
    return metrics



def cli() -> None:
    """The command line; what each process runs under `accelerate launch --tpu --main_training_function cli`."""
    run_recipe(main, SupervisedRunConfig, DEFAULT_PRESET, description=__doc__)


if __name__ == "__main__":
    cli()
