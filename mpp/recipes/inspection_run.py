"""The paper's pictures of what an encoder learned, one run (eval/inspect_encoder.py;
``mpp.evaluate(protocol="inspect")``)."""

from __future__ import annotations

import logging

import torch

from mpp.config.runs import InspectionRunConfig
from mpp.data.loading import sample_images
from mpp.evaluation.frozen_encoder import open_evaluation_run
from mpp.evaluation.inspection import inspect_encoder
from mpp.recipes.run_result import RunResult

logger = logging.getLogger(__name__)


def inspect_frozen_encoder(cfg: InspectionRunConfig) -> RunResult:
    """The pictures of ``cfg.init``'s encoder, and its mean attention distances as metrics."""
    with open_evaluation_run(cfg, prefix="inspect", classifies=False) as run:
        count = max(cfg.inspect.attention_images, cfg.inspect.rollout_images)
        images = torch.cat(list(sample_images(run.test_set, count, cfg.seed))).to(run.accelerator.device)
        extractor = run.accelerator.unwrap_model(run.extractor)
        metrics = inspect_encoder(run.accelerator, extractor.encoder, extractor.normalise, images, run.run_dir,
                                  cfg.inspect)
        for layer, distances in enumerate(metrics["mean_attention_distance"], start=1):
            logger.info("layer %d: mean attention distance per head %s px", layer,
                        ", ".join(f"{distance:.1f}" for distance in distances))
        logger.info("pictures: %s", ", ".join(metrics["pictures"].values()))
        run.finish(metrics, {})
    return RunResult(run.run_dir, metrics)
