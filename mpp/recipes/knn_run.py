"""kNN accuracy of a frozen encoder, one run (eval/knn.py; ``mpp.evaluate(protocol="knn")``)."""

from __future__ import annotations

import logging

from mpp.config.runs import KnnRunConfig
from mpp.evaluation.frozen_encoder import open_evaluation_run
from mpp.evaluation.frozen_feature_classifiers import knn_predictions
from mpp.metrics import floors_said, scores_of
from mpp.recipes.run_result import RunResult

logger = logging.getLogger(__name__)


def evaluate_knn(cfg: KnnRunConfig) -> RunResult:
    """kNN accuracy of ``cfg.init``'s frozen encoder."""
    with open_evaluation_run(cfg, prefix="knn") as run:
        (train_features, train_labels), (features, labels) = (run.features(run.train_set, "train"),
                                                              run.features(run.test_set, "test"))
        predictions = knn_predictions(train_features, train_labels, features, run.train_set.num_classes, cfg.knn.k,
                                      cfg.knn.temperature)
        scores = scores_of(predictions, labels, run.train_set.num_classes, "test_")
        logger.info("kNN (k=%d, temperature %g): test accuracy %.4f, balanced %.4f; %s", cfg.knn.k,
                    cfg.knn.temperature, scores["test_accuracy"], scores["test_balanced_accuracy"],
                    floors_said(scores, "test_"))
        metrics = {"knn": {**scores, "k": cfg.knn.k, "temperature": cfg.knn.temperature},
                   "train_images": len(train_labels), "test_images": len(labels)}
        run.finish(metrics, {"knn/test_accuracy": scores["test_accuracy"],
                             "knn/test_balanced_accuracy": scores["test_balanced_accuracy"]})
    return RunResult(run.run_dir, metrics)
