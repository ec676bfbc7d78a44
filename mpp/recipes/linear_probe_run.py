"""Linear-probe accuracy of a frozen encoder, one run (eval/linear_probe.py; ``mpp.evaluate()``)."""

from __future__ import annotations

import logging

from mpp.config.runs import LinearProbeRunConfig
from mpp.evaluation.frozen_encoder import open_evaluation_run
from mpp.evaluation.logistic_regression import linear_probe_evaluation
from mpp.metrics import floors_said
from mpp.recipes.run_result import RunResult

logger = logging.getLogger(__name__)


def evaluate_linear_probe(cfg: LinearProbeRunConfig) -> RunResult:
    """Linear-probe accuracy of ``cfg.init``'s frozen encoder."""
    with open_evaluation_run(cfg, prefix="linear-probe") as run:
        train, test = run.features(run.train_set, "train"), run.features(run.test_set, "test")
        metrics = linear_probe_evaluation(train, test, run.train_set.num_classes, cfg.linear_probe, cfg.seed)
        logger.info("linear probe: test accuracy %.4f, balanced %.4f (train %.4f) with L2 penalty %g; hold-out "
                    "accuracy per penalty: %s; %s", metrics["test_accuracy"], metrics["test_balanced_accuracy"],
                    metrics["train_accuracy"], metrics["chosen_l2"],
                    ", ".join(f"{wd}: {score:.4f}" for wd, score in metrics["holdout_accuracy"].items()),
                    floors_said(metrics, "test_"))
        metrics = {"linear_probe": metrics, "train_images": len(train[1]), "test_images": len(test[1])}
        run.finish(metrics, {f"linear_probe/test_{name}": metrics["linear_probe"][f"test_{name}"]
                             for name in ("accuracy", "balanced_accuracy")})
    return RunResult(run.run_dir, metrics)
