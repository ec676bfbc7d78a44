"""Pictures of what an encoder learned (ViT paper Sec. 4.5, Fig. 6-7, App. D.7-D.8), as PNG files in
<output_dir>/pictures/ and in TensorBoard's images tab:

- patch_embedding_filters.png: RGB principal components of the patch-embedding filters;
- position_embedding_similarity.png: for each patch position, its embedding's cosine similarity to all others;
- mean_attention_distance.png: how far each head attends, in pixels, against depth;
- attention_rollout.png: test images, and each weighted by its attention rollout from the [class] token.

    accelerate launch eval/inspect_encoder.py [--config recipes/configs/<preset>.yaml] [init=<run dir>] [key=value ...]

No init: a randomly initialised encoder, for comparison. metrics.json holds the mean attention distances.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from mpp.command_line import run_recipe
from mpp.config.runs import InspectionRunConfig
from mpp.data.loading import sample_images
from mpp.evaluation.frozen_encoder import open_evaluation_run
from mpp.evaluation.inspection import inspect_encoder

DEFAULT_PRESET = Path(__file__).parents[1] / "recipes" / "configs" / "eval_tiny_cpu.yaml"
logger = logging.getLogger("mpp.eval.inspect_encoder")


def main(cfg: InspectionRunConfig) -> dict[str, Any]:
    with open_evaluation_run(cfg, prefix="inspect") as run:
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
    return metrics



def cli() -> None:
    """The command line; what each process runs under `accelerate launch --tpu --main_training_function cli`."""
    run_recipe(main, InspectionRunConfig, DEFAULT_PRESET, description=__doc__)


if __name__ == "__main__":
    cli()
