"""Few-shot linear evaluation (paper Sec. 4.1 "Metrics"): k labelled images per class, their frozen features
regressed onto {-1, 1}^K targets in closed form (``ridge_regressions``), the penalty chosen on a hold-out slice of
other training images, scored on test images; repeated over seeds.

``few_shot_evaluation`` is eval/few_shot.py's protocol; ``FewShotMonitor`` runs the same fit on a fixed small slice
during pre-training, so representation quality can be watched as it rises; ``FewShotAgainstInitialisation`` ends an
MPP run by scoring the trained encoder against itself at initialisation.
"""

from __future__ import annotations

import copy
import logging
import statistics
from typing import Any, Callable, Optional, Sequence

import torch
from accelerate import Accelerator

from mpp.config.evaluation import FewShotConfig
from mpp.config.training import MonitorConfig, MPPMonitorConfig
from mpp.data.image_dataset import ImageDataset
from mpp.data.loading import disjoint_per_class, shots_per_class
from mpp.evaluation.frozen_feature_classifiers import accuracy, fitting_device, ridge_predictions, ridge_regressions
from mpp.evaluation.statistics import describe_difference, paired_difference
from mpp.metrics import scores_of
from mpp.models.encoder import BuiltOnEncoder, ImageEncoder

DEFAULT_L2_GRID = FewShotConfig().l2_grid
logger = logging.getLogger(__name__)


def ridge_scores(
    train: tuple[torch.Tensor, torch.Tensor],
    holdout: tuple[torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    num_classes: int,
    l2_grid: Sequence[float],
) -> tuple[dict[str, Any], float]:
    """(test scores, chosen penalty): the ridge regression fitted to ``train`` (features, labels) with each penalty
    of ``l2_grid``, the one best on ``holdout`` (the smallest among ties) scored on ``test`` (``mpp.metrics``:
    accuracy, balanced and per-class accuracy); on ``fitting_device``."""
    device = fitting_device(train[0].device)
    train, holdout, test = ((values.to(device), classes.to(device)) for values, classes in (train, holdout, test))
    fits = ridge_regressions(*train, num_classes, l2_grid)
    scores = [accuracy(ridge_predictions(weights, holdout[0]), holdout[1]) for weights in fits]
    best = scores.index(max(scores))
    return scores_of(ridge_predictions(fits[best], test[0]), test[1], num_classes), float(l2_grid[best])


def few_shot_evaluation(
    features_of: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    train_labels: torch.Tensor,
    test: tuple[torch.Tensor, torch.Tensor],
    num_classes: int,
    cfg: FewShotConfig,
    seed: int,
    class_names: Sequence[str] = (),
) -> dict[str, dict]:
    """Per k of ``cfg.shots``: test accuracy and balanced accuracy (mean and standard deviation over ``cfg.seeds``
    draws) and each draw's, and its chosen penalty. ``features_of(positions)`` gives the (features, labels) of those
    training images.

    Each seed draws a hold-out slice of ``cfg.holdout_per_class`` images per class, then the shots from the rest."""
    draws = []
    for draw in range(cfg.seeds):
        holdout, pool = disjoint_per_class(train_labels, [cfg.holdout_per_class, max(cfg.shots)], seed + draw,
                                           "few_shot.holdout_per_class and few_shot.shots", class_names)
        draws.append((holdout, {k: pool[shots_per_class(train_labels[pool], k, seed + draw, class_names=class_names)]
                                for k in cfg.shots}))
    needed = torch.cat([torch.cat([holdout, *shots.values()]) for holdout, shots in draws]).unique()  # sorted
    features, labels = features_of(needed)
    # Gathered where the fits run (the host, for XLA's features): each gather on XLA's device is a graph of its own.
    device = fitting_device(features.device)
    features, labels, test = features.to(device), labels.to(device), tuple(part.to(device) for part in test)

    def rows(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.searchsorted(needed, positions).to(features.device)
        return features[index], labels[index]

    results = {}
    for k in cfg.shots:
        runs = [ridge_scores(rows(shots[k]), rows(holdout), test, num_classes, cfg.l2_grid)
                for holdout, shots in draws]
        results[str(k)] = {"chosen_l2": [l2 for _, l2 in runs]}
        for name in ("accuracy", "balanced_accuracy"):
            scores = [run[name] for run, _ in runs]
            prefix = "" if name == "accuracy" else "balanced_"
            results[str(k)] |= {f"{prefix}mean": statistics.fmean(scores),
                                f"{prefix}std": statistics.stdev(scores) if len(scores) > 1 else 0.0,
                                f"{prefix}per_seed": scores}
    return results


class FewShotMonitor:
    """Few-shot accuracy of a model's encoder on a fixed slice of ``dataset`` (shots, hold-out and test images per
    class, disjoint), for TensorBoard during pre-training. The slice is read from ``dataset`` at every report, a
    batch at a time, so a large one (many classes) costs loading time, not memory."""

    def __init__(self, accelerator: Accelerator, model: BuiltOnEncoder, dataset: ImageDataset, cfg: MonitorConfig,
                 seed: int, batch_size: int = 256):
        """``model``: the (unwrapped) model being trained, read with ``cfg.features`` pooling; ``dataset``: images
        through the evaluation view, labelled."""
        self.accelerator, self.cfg, self.dataset, self.batch_size = accelerator, cfg, dataset, batch_size
        self.every = cfg.few_shot_every
        self.extractor = ImageEncoder(model.encoder, model.normalise, cfg.features)  # shares the weights
        counts = [cfg.few_shot_shots, cfg.few_shot_holdout_per_class, cfg.few_shot_test_per_class]
        self.positions = torch.cat(disjoint_per_class(dataset.labels, counts, seed, "monitor.few_shot_*",
                                                      dataset.class_names))
        # Features and labels are sliced where the fit runs (the host, for XLA's features): a slice taken on XLA's
        # device compiles the encoder's graph again for each slice, at every report.
        self.fitting_device = fitting_device(accelerator.device)
        self.labels = dataset.labels[self.positions].to(self.fitting_device)
        self.bounds = torch.tensor([0] + counts).mul(dataset.num_classes).cumsum(0).tolist()
        self.num_classes = dataset.num_classes

    @torch.no_grad()
    def accuracy(self, extractor: Optional[ImageEncoder] = None) -> float:
        """Few-shot accuracy of ``extractor`` (by default the model being trained) on this monitor's slices."""
        extractor = extractor or self.extractor
        was_training = extractor.encoder.training
        extractor.eval()
        features = []
        for batch in self.positions.split(self.batch_size):
            images = self.dataset.__getitems__(batch.tolist())[0].to(self.accelerator.device)
            with self.accelerator.autocast():
                features.append(extractor(images))
        extractor.train(was_training)
        features = torch.cat(features).to(self.fitting_device)
        shots, holdout, test = ((features[a:b], self.labels[a:b])
                                for a, b in zip(self.bounds, self.bounds[1:], strict=False))
        return ridge_scores(shots, holdout, test, self.num_classes, DEFAULT_L2_GRID)[0]["accuracy"]

    def __call__(self, step: int, images_seen: int) -> None:
        score = self.accuracy()
        self.accelerator.log({f"few_shot/{self.cfg.few_shot_shots}shot": score}, step=images_seen)
        logger.info("step %d: few-shot accuracy %.4f (%d images per class, ridge regression on the %s features)",
                    step, score, self.cfg.few_shot_shots, self.cfg.features)


class FewShotAgainstInitialisation:
    """What pre-training bought: few-shot accuracy of the trained encoder and of the same encoder before its first
    step, both scored on the same images in each of ``cfg.final_few_shot_draws`` seeded draws of the monitor's
    slices. Made before training (it copies the encoder then, and a dataset too small for its slices is refused
    before anything is written); called once training has ended."""

    def __init__(self, accelerator: Accelerator, model: BuiltOnEncoder, dataset: ImageDataset, cfg: MPPMonitorConfig,
                 seed: int):
        """``model``: the (unwrapped) model about to be trained; ``dataset``: the training split through the
        evaluation view, labelled."""
        self.cfg = cfg
        self.draws = [FewShotMonitor(accelerator, model, dataset, cfg, seed + draw)
                      for draw in range(cfg.final_few_shot_draws)]
        initial = copy.deepcopy(model.encoder)
        self.at_init = ImageEncoder(initial.to(accelerator.device), model.normalise, cfg.features)

    def __call__(self) -> dict[str, Any]:
        trained = [draw.accuracy() for draw in self.draws]
        untrained = [draw.accuracy(self.at_init) for draw in self.draws]
        gain = paired_difference(trained, untrained, scale=100)  # in points, paired by draw

        def spread(values: list[float]) -> float:
            return statistics.stdev(values) if len(values) > 1 else 0.0

        logger.info("%d-shot accuracy over %d draws: trained %.4f +- %.4f, at initialisation %.4f +- %.4f; gain in "
                    "points, 95%% interval: %s", self.cfg.few_shot_shots, len(trained), statistics.fmean(trained),
                    spread(trained), statistics.fmean(untrained), spread(untrained), describe_difference(gain, True))
        return {"few_shot_accuracy": statistics.fmean(trained),
                "few_shot_accuracy_at_init": statistics.fmean(untrained),
                "few_shot_comparison": {"shots": self.cfg.few_shot_shots, "features": self.cfg.features,
                                        "trained": trained, "at_init": untrained,
                                        "gain_mean": gain.mean / 100, "gain_std": gain.sd / 100,
                                        "gain_interval": [gain.low / 100, gain.high / 100],
                                        "gain_shown": gain.shown and gain.mean > 0}}
