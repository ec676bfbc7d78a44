"""kNN accuracy of a frozen encoder: each test image takes the class with the most weight among its k nearest
training images by cosine similarity of their features, each neighbour voting exp(similarity / temperature).

    accelerate launch eval/knn.py [--config recipes/configs/<preset>.yaml] [init=<run dir>] [key=value ...]

No init: a randomly initialised encoder, the baseline.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mpp.command_line import run_recipe
from mpp.config.runs import KnnRunConfig
from mpp.evaluation.frozen_encoder import open_evaluation_run
from mpp.evaluation.frozen_feature_classifiers import knn_predictions
from mpp.metrics import scores_of

DEFAULT_PRESET = Path(__file__).parents[1] / "recipes" / "configs" / "eval_tiny_cpu.yaml"
logger = logging.getLogger("mpp.eval.knn")


def main(cfg: KnnRunConfig) -> dict[str, Any]:
    with open_evaluation_run(cfg, prefix="knn") as run:
        (train_features, train_labels), (features, labels) = (run.features(run.train_set, "train"),
                                                              run.features(run.test_set, "test"))
        predictions = knn_predictions(train_features, train_labels, features, run.train_set.num_classes, cfg.knn.k,
                                      cfg.knn.temperature)
        scores = scores_of(predictions, labels, run.train_set.num_classes, "test_")
        logger.info("kNN (k=%d, temperature %g): test accuracy %.4f, balanced %.4f", cfg.knn.k, cfg.knn.temperature,
                    scores["test_accuracy"], scores["test_balanced_accuracy"])
        metrics = {"knn": {**scores, "k": cfg.knn.k, "temperature": cfg.knn.temperature},
                   "train_images": len(train_labels), "test_images": len(labels)}
        run.finish(metrics, {"knn/test_accuracy": scores["test_accuracy"],
                             "knn/test_balanced_accuracy": scores["test_balanced_accuracy"]})
    return metrics



def cli() -> None:
    """The command line; what each process runs under `accelerate launch --tpu --main_training_function cli`."""
    run_recipe(main, KnnRunConfig, DEFAULT_PRESET, description=__doc__)


if __name__ == "__main__":
    cli()
