"""Fine-tuning a pre-trained (or, without init, a fresh) ViT encoder on a classification task (ViT paper Sec. 3.2,
App. B.1.1, Table 4).

    accelerate launch recipes/finetune.py [--config recipes/configs/<preset>.yaml] init=<run dir> [key=value ...]

The pre-training head is dropped and a zero-initialised linear head is trained with the encoder by SGD with
momentum; the resolution may be higher than in pre-training (position embeddings are 2-D interpolated). Every
starting point (MPP, supervised, none) goes through the same code, so comparisons differ only in the weights.
With finetune.sweep_lrs, each learning rate is first trained on the training images less a held-out slice and
scored on it (sweep/lr_<lr>/ in the run directory); the best is then trained on all of them and tested.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

# Python puts this script's folder first on sys.path, where recipes/mpp.py would shadow the `mpp` package.
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from accelerate.utils import set_seed
from timm.models.vision_transformer import VisionTransformer

from mpp.checkpoint import check_resume_compatible, resume_checkpoint
from mpp.classifier import ImageClassifier
from mpp.classifier_training import sweep_learning_rates, train_classifier
from mpp.command_line import run_recipe
from mpp.config import FinetuneRunConfig
from mpp.data import build_dataset, image_view
from mpp.encoder import count_parameters
from mpp.engine import create_accelerator, describe_plan, plan_batches, set_cpu_threads
from mpp.non_finite import NonFiniteStep
from mpp.preemption import Preempted
from mpp.pretrained import fine_tuning_encoder, fine_tuning_model_config, input_normalisation, read_pretrained
from mpp.run_directory import configure_logging, resolve_output_dir, start_run, write_metrics

DEFAULT_PRESET = Path(__file__).parent / "configs" / "finetune_tiny_cpu.yaml"
logger = logging.getLogger("mpp.recipes.finetune")


def main(cfg: FinetuneRunConfig) -> dict[str, Any]:
    accelerator = create_accelerator(cfg.train, cfg.seed, cfg.output_dir)
    configure_logging()
    run_dir = resolve_output_dir(cfg.output_dir, prefix="finetune")
    plan = plan_batches(cfg.train, accelerator.num_processes)
    threads = set_cpu_threads(accelerator, cfg.train.cpu_threads)

    # Starting weights, model and data: everything that can be wrong fails here, before anything is written.
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
    train_set = build_dataset(cfg.data, "train", augment=True, **split)
    test_set = build_dataset(cfg.data, "test", augment=False, **split)
    model = ImageClassifier(encoder, train_set.num_classes, cfg.classifier, mean, std)
    checkpoint = resume_checkpoint(cfg.resume, run_dir)
    if checkpoint is not None:
        check_resume_compatible(checkpoint, cfg)

    start_run(accelerator, cfg, run_dir)
    logger.info("run directory %s on %s, %d threads per process; init: %s", run_dir, accelerator.device, threads,
                pretrained.location if pretrained else "none (training from scratch)")
    logger.info("plan: %s; %s optimizer, weight decay %g%s", describe_plan(plan, cfg.train), cfg.train.optimizer,
                cfg.train.weight_decay,
                f"; weights averaged (decay {cfg.finetune.ema_decay})" if cfg.finetune.ema_decay else "")
    logger.info("data: %s; test: %s", train_set.description, test_set.description)
    logger.info("encoder: %s, %.2fM parameters, %d patches of %d px at %d px; zero-initialised %s head, %d classes",
                model_cfg.name, count_parameters(model.encoder) / 1e6, model.encoder.patch_embed.num_patches,
                model.encoder.patch_embed.patch_size[0], image_size, cfg.classifier.head, train_set.num_classes)

    try:
        lr, sweep = cfg.train.lr, {}
        if cfg.finetune.sweep_lrs:
            sweep = sweep_learning_rates(
                accelerator, cfg, lambda: ImageClassifier(fresh_encoder(), train_set.num_classes, cfg.classifier, mean,
                                                          std),
                train_set, image_view(cfg.data, image_size, augment=False), run_dir)
            lr = max(sweep, key=sweep.get)
            logger.info("sweep: holdout accuracy %s; training with lr %g on all %d training images",
                        ", ".join(f"lr {rate:g}: {score:.4f}" for rate, score in sweep.items()), lr, len(train_set))
        metrics = train_classifier(accelerator, model, train_set, test_set, "test", cfg, lr, run_dir, checkpoint,
                                   cfg.finetune.ema_decay)
    except (Preempted, NonFiniteStep):
        accelerator.end_training()  # TensorBoard flushed; the checkpoints stay as they are
        raise
    metrics.update(init=cfg.init or None, chosen_lr=lr if sweep else None,
                   sweep_holdout_accuracy={f"{rate:g}": score for rate, score in sweep.items()} or None)
    write_metrics(run_dir, metrics)  # last: a run with metrics.json is complete
    logger.info("done: test_accuracy %.4f%s with lr %g", metrics["test_accuracy"],
                f" (averaged weights: {metrics['test_accuracy_averaged']:.4f})" if cfg.finetune.ema_decay else "", lr)
    accelerator.end_training()
    return metrics


if __name__ == "__main__":
    run_recipe(main, FinetuneRunConfig, DEFAULT_PRESET, description=__doc__)
