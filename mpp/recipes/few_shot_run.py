"""Few-shot linear accuracy of a frozen encoder, one run (eval/few_shot.py; ``mpp.evaluate(protocol="few_shot")``)."""

from __future__ import annotations

import logging

from mpp.config.runs import FewShotRunConfig
from mpp.evaluation.few_shot_regression import few_shot_evaluation
from mpp.evaluation.frozen_encoder import open_evaluation_run
from mpp.metrics import floors_said, label_floors
from mpp.recipes.run_result import RunResult

logger = logging.getLogger(__name__)


def evaluate_few_shot(cfg: FewShotRunConfig) -> RunResult:
    """Few-shot accuracy of ``cfg.init``'s frozen encoder, over ``cfg.few_shot.seeds`` draws."""
    with open_evaluation_run(cfg, prefix="few-shot") as run:
        test = run.features(run.test_set, "test")
        results = few_shot_evaluation(lambda positions: run.features(run.train_set.subset(positions), "train-shots"),
                                      run.train_set.labels, test, run.train_set.num_classes, cfg.few_shot, cfg.seed,
                                      run.train_set.class_names)
        floors = label_floors(test[1].cpu())
        for k, result in results.items():
            logger.info("%s-shot accuracy %.4f +- %.4f, balanced %.4f +- %.4f over %d seeds (per seed: %s; chosen l2: "
                        "%s); %s", k, result["mean"], result["std"], result["balanced_mean"], result["balanced_std"],
                        cfg.few_shot.seeds, ", ".join(f"{score:.4f}" for score in result["per_seed"]),
                        ", ".join(f"{l2:g}" for l2 in result["chosen_l2"]), floors_said(floors))
        metrics = {"few_shot": results, "test_images": len(test[1]), **floors}
        run.finish(metrics, {f"few_shot/{k}shot": result["mean"] for k, result in results.items()})
    return RunResult(run.run_dir, metrics)
