"""Few-shot linear accuracy of a frozen encoder (ViT paper Sec. 4.1 "Metrics"): for k images per class, their
features are regressed onto {-1, 1}^K targets in closed form, the penalty chosen on a hold-out slice of other
training images; test accuracy over several seeds, mean and standard deviation.

    accelerate launch eval/few_shot.py [--config recipes/configs/<preset>.yaml] [init=<run dir>] [key=value ...]

No init: a randomly initialised encoder, the baseline. The run directory gets config.yaml, log.txt, TensorBoard
scalars few_shot/<k>shot, the cached features and metrics.json.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mpp.command_line import run_recipe
from mpp.config.runs import FewShotRunConfig
from mpp.evaluation.few_shot_regression import few_shot_evaluation
from mpp.evaluation.frozen_encoder import open_evaluation_run

DEFAULT_PRESET = Path(__file__).parents[1] / "recipes" / "configs" / "eval_tiny_cpu.yaml"
logger = logging.getLogger("mpp.eval.few_shot")


def main(cfg: FewShotRunConfig) -> dict[str, Any]:
    with open_evaluation_run(cfg, prefix="few-shot") as run:
        test = run.features(run.test_set, "test")
        results = few_shot_evaluation(lambda positions: run.features(run.train_set.subset(positions), "train-shots"),
                                      run.train_set.labels, test, run.train_set.num_classes, cfg.few_shot, cfg.seed,
                                      run.train_set.class_names)
        for k, result in results.items():
            logger.info("%s-shot accuracy %.4f +- %.4f, balanced %.4f +- %.4f over %d seeds (per seed: %s; chosen l2: "
                        "%s)", k, result["mean"], result["std"], result["balanced_mean"], result["balanced_std"],
                        cfg.few_shot.seeds, ", ".join(f"{score:.4f}" for score in result["per_seed"]),
                        ", ".join(f"{l2:g}" for l2 in result["chosen_l2"]))
        metrics = {"few_shot": results, "test_images": len(test[1])}
        run.finish(metrics, {f"few_shot/{k}shot": result["mean"] for k, result in results.items()})
    return metrics



def cli() -> None:
    """The command line; what each process runs under `accelerate launch --tpu --main_training_function cli`."""
    run_recipe(main, FewShotRunConfig, DEFAULT_PRESET, description=__doc__)


if __name__ == "__main__":
    cli()
