"""One config per entry point, made of the sections: what every run has, and what each recipe and evaluation adds."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from mpp.config.data import DataConfig
from mpp.errors import ConfigError
from mpp.config.evaluation import EvaluationConfig, FewShotConfig, InspectionConfig, KnnConfig, LinearProbeConfig
from mpp.config.model import ClassifierConfig, ExportConfig, ModelConfig, MPPConfig
from mpp.config.training import (
    AugmentConfig,
    FinetuneConfig,
    MonitorConfig,
    MPPMonitorConfig,
    TrainConfig,
    finetune_classifier,
    finetune_training,
    supervised_training,
)

# what study/, tools/ and users may import from here
__all__ = [
    "FewShotRunConfig", "FinetuneRunConfig", "InspectionRunConfig", "KnnRunConfig", "LinearProbeRunConfig",
    "MPPRunConfig", "SupervisedRunConfig",
]



@dataclass
class RunConfig:
    """What every run has: its directory, seed, encoder and data."""

    output_dir: str = ""  # the run's directory; empty: runs/<recipe>-<date>-<time>
    seed: int = 0  # seeds the weights, the data order, the views and the corruption
    overwrite: bool = False  # start again in an output_dir that holds an earlier run, deleting it
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)


@dataclass
class TrainingRunConfig(RunConfig):
    """What every training run adds: continuing from its checkpoints."""

    RESUME_MUST_MATCH: ClassVar[tuple[str, ...]] = ("model",)  # sections (or top-level keys) a resume may not change
    resume: str = ""  # "auto": continue from the latest checkpoint(s) in output_dir, if any; or a checkpoint path


@dataclass
class MPPRunConfig(TrainingRunConfig):
    """Everything one masked-patch-prediction pre-training run needs (recipes/mpp.py)."""

    RESUME_MUST_MATCH: ClassVar[tuple[str, ...]] = ("model", "mpp")
    mpp: MPPConfig = field(default_factory=MPPConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    monitor: MPPMonitorConfig = field(default_factory=MPPMonitorConfig)
    export: ExportConfig = field(default_factory=ExportConfig)


@dataclass
class SupervisedRunConfig(TrainingRunConfig):
    """Everything one supervised pre-training run needs (recipes/supervised.py)."""

    RESUME_MUST_MATCH: ClassVar[tuple[str, ...]] = ("model", "classifier", "augment")
    classifier: ClassifierConfig = field(default_factory=ClassifierConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    train: TrainConfig = field(default_factory=supervised_training)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)


class EncoderFromInit:
    """A run whose encoder may come from ``init``. A folder there (a run, its export, a timm folder, or ``random:``
    one) records the encoder's architecture, so a preset's architecture keys give way to it; one given on the command
    line (or in the Python call) stays, and is refused if the folder's encoder differs. A bare weights file records no
    architecture: the preset's keys describe it."""

    ARCHITECTURE_KEYS: ClassVar[tuple[str, ...]] = (
        "model.name", "model.patch_size", "model.embed_dim", "model.depth", "model.num_heads", "model.in_chans")

    @classmethod
    def preset_keys_giving_way(cls, settings: dict[str, Any]) -> tuple[str, ...]:
        """The preset's keys that ``settings`` (the dotted keys preset and overrides set) make void."""
        init = str(settings.get("init") or "")
        folder = Path(init.removeprefix("random:").removeprefix("local-dir:"))
        return cls.ARCHITECTURE_KEYS if init and folder.is_dir() else ()


@dataclass
class FinetuneRunConfig(EncoderFromInit, TrainingRunConfig):
    """Everything one fine-tuning run needs (recipes/finetune.py)."""

    RESUME_MUST_MATCH: ClassVar[tuple[str, ...]] = ("init", "model", "classifier", "augment", "finetune")
    # The starting weights: a run directory or its export/ folder from recipes/mpp.py or recipes/supervised.py,
    # local-dir:<timm folder>, or a checkpoint file (.safetensors, .pth, .bin). Empty: from scratch, the
    # model.* encoder. random:<run dir>: from scratch, that run's encoder (its architecture with fresh seeded
    # weights), the like-with-like baseline. With a folder, the encoder's architecture is the folder's;
    # model.img_size still sets the resolution.
    init: str = ""
    classifier: ClassifierConfig = field(default_factory=finetune_classifier)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    train: TrainConfig = field(default_factory=finetune_training)

    def __post_init__(self) -> None:
        if self.finetune.scored_split == "holdout" and not self.data.holdout_fraction:
            raise ConfigError("finetune.scored_split=holdout scores the held-out slice of the training split: set "
                              "data.holdout_fraction (e.g. 0.2)")


@dataclass
class EvaluationRunConfig(EncoderFromInit, RunConfig):
    """What every evaluation of a frozen encoder needs (eval/)."""

    # The encoder: a run directory or its export/ folder (recipes/mpp.py, supervised.py, finetune.py),
    # local-dir:<timm folder> or a checkpoint file. Empty: a randomly initialised model.* encoder (seeded).
    # random:<run dir>: that run's encoder (architecture, normalisation, readout) with fresh seeded weights, the
    # like-with-like baseline.
    init: str = ""
    eval: EvaluationConfig = field(default_factory=EvaluationConfig)


@dataclass
class FewShotRunConfig(EvaluationRunConfig):
    """eval/few_shot.py."""

    few_shot: FewShotConfig = field(default_factory=FewShotConfig)


@dataclass
class LinearProbeRunConfig(EvaluationRunConfig):
    """eval/linear_probe.py."""

    linear_probe: LinearProbeConfig = field(default_factory=LinearProbeConfig)


@dataclass
class KnnRunConfig(EvaluationRunConfig):
    """eval/knn.py."""

    knn: KnnConfig = field(default_factory=KnnConfig)


@dataclass
class InspectionRunConfig(EvaluationRunConfig):
    """eval/inspect_encoder.py."""

    inspect: InspectionConfig = field(default_factory=InspectionConfig)
