"""Linear-probe accuracy of a frozen encoder: logistic regression on the standardised features of the whole training
split, fitted by L-BFGS, its L2 penalty chosen on a hold-out slice; top-1 on the test split. Features are extracted
once and cached (eval.feature_cache), so trying other probe settings costs only the fits.

    accelerate launch eval/linear_probe.py [--config recipes/configs/<preset>.yaml] [init=<run dir>] [key=value ...]

No init: a randomly initialised encoder, the baseline.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mpp.command_line import run_recipe
from mpp.config.runs import LinearProbeRunConfig
from mpp.evaluation.frozen_encoder import open_evaluation_run
from mpp.evaluation.logistic_regression import linear_probe_evaluation

DEFAULT_PRESET = Path(__file__).parents[1] / "recipes" / "configs" / "eval_tiny_cpu.yaml"
logger = logging.getLogger("mpp.eval.linear_probe")


def main(cfg: LinearProbeRunConfig) -> dict[str, Any]:
    with open_evaluation_run(cfg, prefix="linear-probe") as run:
        train, test = run.features(run.train_set, "train"), run.features(run.test_set, "test")
        metrics = linear_probe_evaluation(train, test, run.train_set.num_classes, cfg.linear_probe, cfg.seed)
        logger.info("linear probe: test accuracy %.4f, balanced %.4f (train %.4f) with L2 penalty %g; hold-out "
                    "accuracy per penalty: %s", metrics["test_accuracy"], metrics["test_balanced_accuracy"],
                    metrics["train_accuracy"], metrics["chosen_l2"],
                    ", ".join(f"{wd}: {score:.4f}" for wd, score in metrics["holdout_accuracy"].items()))
        metrics = {"linear_probe": metrics, "train_images": len(train[1]), "test_images": len(test[1])}
        run.finish(metrics, {f"linear_probe/test_{name}": metrics["linear_probe"][f"test_{name}"]
                             for name in ("accuracy", "balanced_accuracy")})
    return metrics



def cli() -> None:
    """The command line; what each process runs under `accelerate launch --tpu --main_training_function cli`."""
    run_recipe(main, LinearProbeRunConfig, DEFAULT_PRESET, description=__doc__)


if __name__ == "__main__":
    cli()
