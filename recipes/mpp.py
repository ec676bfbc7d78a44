"""Masked patch prediction pre-training of a Vision Transformer (ViT paper Sec. 4.6, App. B.1.2).

    accelerate launch recipes/mpp.py [--config recipes/configs/<preset>.yaml] [--resume] [key=value ...]

With no arguments: the tiny CPU preset on the embedded shapes data. The run directory gets config.yaml, log.txt,
TensorBoard events, checkpoints/, export/ (the encoder in timm's hub format) and metrics.json.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

# Python puts this script's folder first on sys.path, where this file, mpp.py, would shadow the `mpp` package.
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from accelerate.utils import set_seed

from mpp.checkpoint import EXPORT_DIR, check_resume_compatible, export_encoder, load_checkpoint, resume_checkpoint
from mpp.command_line import run_recipe
from mpp.config import MPPRunConfig
from mpp.data import build_dataset, build_loader, prepare_loader, sample_images
from mpp.encoder import count_parameters, create_encoder
from mpp.engine import create_accelerator, describe_plan, local_processes, plan_batches, set_cpu_threads, train
from mpp.masked_patch_prediction import MaskedPatchPredictor, most_frequent_class_accuracy
from mpp.monitors import pre_training_monitors
from mpp.non_finite import NonFiniteStep
from mpp.optimizer import create_optimizer
from mpp.preemption import Preempted
from mpp.run_directory import configure_logging, resolve_output_dir, start_run, write_metrics

DEFAULT_PRESET = Path(__file__).parent / "configs" / "mpp_tiny_cpu.yaml"
BASELINE_IMAGES = 2048  # sampled to measure the accuracy of always predicting the most frequent colour class
logger = logging.getLogger("mpp.recipes.mpp")


def main(cfg: MPPRunConfig) -> dict[str, Any]:
    accelerator = create_accelerator(cfg.train, cfg.seed, cfg.output_dir)
    configure_logging()
    # Run directory and batch split: derived once, logged once.
    run_dir = resolve_output_dir(cfg.output_dir, prefix="mpp")
    plan = plan_batches(cfg.train, accelerator.num_processes)
    accelerator.gradient_accumulation_steps = plan.accumulation_steps
    set_seed(cfg.seed)
    threads = set_cpu_threads(accelerator, cfg.train.cpu_threads)

    # Model and data: everything that can be wrong with the config fails here, before anything is written.
    encoder = create_encoder(cfg.model)
    model = MaskedPatchPredictor(encoder, cfg.mpp, mean=cfg.data.mean, std=cfg.data.std)
    dataset = build_dataset(cfg.data, "train", image_size=encoder.patch_embed.img_size[0], channels=cfg.model.in_chans,
                            augment=True, seed=cfg.seed, process_index=accelerator.process_index,
                            num_processes=accelerator.num_processes)
    loader = build_loader(dataset, plan.micro_batch_size, cfg.data, train=True, device_type=accelerator.device.type,
                          local_processes=local_processes(accelerator))
    optimizer = create_optimizer(model, cfg.train)
    checkpoint = resume_checkpoint(cfg.resume, run_dir)
    if checkpoint is not None:
        check_resume_compatible(checkpoint, cfg)
    monitors = pre_training_monitors(accelerator, model, cfg.monitor, cfg.data, run_dir, cfg.seed)

    start_run(accelerator, cfg, run_dir)
    logger.info("run directory %s; %s on %s, %d threads per process", run_dir, cfg.model.name, accelerator.device,
                threads)
    logger.info("plan: %s", describe_plan(plan, cfg.train))
    logger.info("data: %s", dataset.description)
    logger.info("encoder: %.2fM parameters, %d patches per image; target %s", count_parameters(encoder) / 1e6,
                encoder.patch_embed.num_patches, cfg.mpp.target)
    baseline = most_frequent_class_accuracy(model, sample_images(dataset, BASELINE_IMAGES, cfg.seed))
    logger.info("always predicting the most frequent colour class scores mpp_accuracy %.4f (on up to %d images)",
                baseline, BASELINE_IMAGES)

    model, optimizer = accelerator.prepare(model, optimizer)
    loader = prepare_loader(accelerator, loader)
    start_step = 0
    if checkpoint is not None:
        start_step = load_checkpoint(accelerator, checkpoint)
        logger.info("resumed from %s at step %d", checkpoint, start_step)

    try:
        metrics = train(accelerator, model, optimizer, loader, cfg.train, plan, run_dir, cfg, cfg.seed, start_step,
                        periodic=monitors)
    except (Preempted, NonFiniteStep):
        accelerator.end_training()  # TensorBoard flushed; the checkpoints stay as they are
        raise
    metrics["mpp_accuracy_most_frequent_class"] = baseline

    if accelerator.is_main_process:
        encoder = accelerator.unwrap_model(model).encoder
        export_encoder(encoder, run_dir / EXPORT_DIR, cfg.data.mean, cfg.data.std, tag="mpp")
    accelerator.wait_for_everyone()
    write_metrics(run_dir, metrics)
    logger.info("done: loss %s, mpp_accuracy %s (most frequent class: %.4f), %.1f images/s; encoder exported to %s",
                metrics["loss"], metrics["mpp_accuracy"], baseline, metrics["images_per_second"] or 0,
                run_dir / EXPORT_DIR)
    accelerator.end_training()
    return metrics


if __name__ == "__main__":
    run_recipe(main, MPPRunConfig, DEFAULT_PRESET, description=__doc__)
