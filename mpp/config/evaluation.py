"""Evaluation sections: the frozen-encoder protocols (few-shot, logistic regression, kNN) and the pictures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mpp.config.model import EvaluationFeatures
from mpp.config.runtime import RuntimeConfig
from mpp.errors import ConfigError


@dataclass
class EvaluationConfig(RuntimeConfig):
    """How an encoder is evaluated frozen (eval/)."""

    features: EvaluationFeatures = "auto"  # what the protocols read
    batch_size: int = 256  # images per forward pass and process, extracting features
    # Features are cached under a fingerprint of the encoder's weights and the images: a folder shared between
    # runs (e.g. runs/feature-cache) extracts each encoder's features once. Empty: <output_dir>/features.
    feature_cache: str = ""

    section: ClassVar[str] = "eval"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size < 1:
            raise ConfigError(f"eval.batch_size={self.batch_size} must be at least 1")


@dataclass
class FewShotConfig:
    """Few-shot linear evaluation (Sec. 4.1 "Metrics"): ridge regression of frozen features onto {-1, 1}^K."""

    shots: tuple[int, ...] = (1, 5, 10, 25)  # labelled training images per class
    seeds: int = 3  # independent draws of the shots (and of the hold-out slice); mean and standard deviation
    holdout_per_class: int = 10  # training images per class, never among the shots, the regulariser is chosen on
    l2_grid: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3, 1e4)  # candidate ridge penalties

    def __post_init__(self) -> None:
        if not self.shots or min(self.shots) < 1 or self.seeds < 1 or self.holdout_per_class < 1:
            raise ConfigError(f"few_shot.shots={list(self.shots)}, few_shot.seeds={self.seeds} and "
                              f"few_shot.holdout_per_class={self.holdout_per_class} must all be at least 1")
        if not self.l2_grid or min(self.l2_grid) <= 0:
            raise ConfigError(f"few_shot.l2_grid={list(self.l2_grid)} must hold positive penalties")


@dataclass
class LinearProbeConfig:
    """A linear classifier (multinomial logistic regression) fitted to frozen, standardised features of the whole
    training split by L-BFGS, its L2 penalty chosen on a hold-out slice of them."""

    l2_grid: tuple[float, ...] = (0.0, 1e-5, 1e-4, 1e-3)  # penalties on the weights, added to the mean cross-entropy
    max_iterations: int = 1000  # L-BFGS function evaluations per fit
    holdout_fraction: float = 0.1  # of the training features; the best penalty is then fitted to all of them

    def __post_init__(self) -> None:
        if not self.l2_grid or min(self.l2_grid) < 0:
            raise ConfigError(f"linear_probe.l2_grid={list(self.l2_grid)} must hold penalties >= 0")
        if self.max_iterations < 1:
            raise ConfigError(f"linear_probe.max_iterations={self.max_iterations} must be at least 1")
        if not 0 < self.holdout_fraction < 1:
            raise ConfigError(f"linear_probe.holdout_fraction={self.holdout_fraction} must lie in (0, 1)")


@dataclass
class KnnConfig:
    """k-nearest-neighbour classification of frozen features: cosine similarity, votes weighted exp(s / T)."""

    k: int = 20  # neighbours that vote
    temperature: float = 0.07  # T of the votes' weights exp(similarity / T)

    def __post_init__(self) -> None:
        if self.k < 1 or self.temperature <= 0:
            raise ConfigError(f"knn.k={self.k} must be at least 1 and knn.temperature={self.temperature} positive")


@dataclass
class InspectionConfig:
    """The paper's pictures of a trained ViT (Sec. 4.5, App. D.7-D.8)."""

    filter_components: int = 28  # principal components of the patch-embedding filters shown (Fig. 7 left: 28)
    attention_images: int = 64  # test images the mean attention distance is averaged over
    rollout_images: int = 8  # test images shown with their attention rollout maps

    def __post_init__(self) -> None:
        for name in ("filter_components", "attention_images", "rollout_images"):
            if getattr(self, name) < 1:
                raise ConfigError(f"inspect.{name}={getattr(self, name)} must be at least 1")
