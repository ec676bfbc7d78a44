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

from accelerate.utils import set_seed

from mpp.checkpoint import EXPORT_DIR, check_resume_compatible, export_encoder, resume_checkpoint
from mpp.classifier import ImageClassifier
from mpp.classifier_training import train_classifier
from mpp.command_line import run_recipe
from mpp.config import SupervisedRunConfig
from mpp.data import build_dataset
from mpp.encoder import count_parameters, create_encoder
from mpp.engine import create_accelerator, describe_plan, plan_batches, set_cpu_threads
from mpp.monitors import pre_training_monitors
from mpp.non_finite import NonFiniteStep
from mpp.preemption import Preempted
from mpp.run_directory import configure_logging, resolve_output_dir, start_run, write_metrics

DEFAULT_PRESET = Path(__file__).parent / "configs" / "supervised_tiny_cpu.yaml"
logger = logging.getLogger("mpp.recipes.supervised")


def main(cfg: SupervisedRunConfig) -> dict[str, Any]:
    accelerator = create_accelerator(cfg.train, cfg.seed, cfg.output_dir)
    configure_logging()
    run_dir = resolve_output_dir(cfg.output_dir, prefix="supervised")
    plan = plan_batches(cfg.train, accelerator.num_processes)
    set_seed(cfg.seed)
    threads = set_cpu_threads(accelerator, cfg.train.cpu_threads)

    # Model and data: everything that can be wrong with the config fails here, before anything is written.
    encoder = create_encoder(cfg.model)
    image_size = encoder.patch_embed.img_size[0]
    split = dict(image_size=image_size, channels=cfg.model.in_chans, seed=cfg.seed,
                 process_index=accelerator.process_index, num_processes=accelerator.num_processes)
    train_set = build_dataset(cfg.data, "train", augment=True, **split)
    test_set = build_dataset(cfg.data, "test", augment=False, **split)
    model = ImageClassifier(encoder, train_set.num_classes, cfg.classifier, cfg.data.mean, cfg.data.std)
    checkpoint = resume_checkpoint(cfg.resume, run_dir)
    if checkpoint is not None:
        check_resume_compatible(checkpoint, cfg)
    monitors = pre_training_monitors(accelerator, model, cfg.monitor, cfg.data, run_dir, cfg.seed)

    start_run(accelerator, cfg, run_dir)
    logger.info("run directory %s; %s on %s, %d threads per process", run_dir, cfg.model.name, accelerator.device,
                threads)
    logger.info("plan: %s; %s optimizer, weight decay %g", describe_plan(plan, cfg.train), cfg.train.optimizer,
                cfg.train.weight_decay)
    logger.info("data: %s; test: %s", train_set.description, test_set.description)
    logger.info("encoder: %.2fM parameters, %d patches per image; %s head on the %s, %d classes",
                count_parameters(encoder) / 1e6, encoder.patch_embed.num_patches, cfg.classifier.head,
                "[class] token" if cfg.classifier.pool == "token" else "mean patch token", train_set.num_classes)

    try:
        metrics = train_classifier(accelerator, model, train_set, test_set, "test", cfg, cfg.train.lr, run_dir,
                                   checkpoint, periodic=monitors)
    except (Preempted, NonFiniteStep):
        accelerator.end_training()  # TensorBoard flushed; the checkpoints stay as they are
        raise

    if accelerator.is_main_process:  # the encoder alone: fine-tuning replaces the pre-training head (Sec. 3.2)
        export_encoder(model.encoder, run_dir / EXPORT_DIR, cfg.data.mean, cfg.data.std, tag="supervised")
    accelerator.wait_for_everyone()
    write_metrics(run_dir, metrics)  # last: a run with metrics.json is complete
    logger.info("done: loss %s, test_accuracy %.4f, %.1f images/s; encoder exported to %s", metrics["loss"],
                metrics["test_accuracy"], metrics["images_per_second"] or 0, run_dir / EXPORT_DIR)
    accelerator.end_training()
    return metrics


if __name__ == "__main__":
    run_recipe(main, SupervisedRunConfig, DEFAULT_PRESET, description=__doc__)
