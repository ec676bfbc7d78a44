"""The experiments' configs: what every experiment over the recipes shares, then the comparison on your own images.
Each list holds ``key=value`` overrides of the stage presets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mpp.config.building import preset_names, preset_path
from mpp.errors import ConfigError

# The names meant for use outside the package (study/, tools/ and users)
__all__ = [
    "ComparisonConfig", "ExperimentConfig",
]


@dataclass
class ExperimentConfig:
    """What every experiment over the recipes shares: where its runs go, its seeds, how its runs are started, the
    presets and overrides its pre-training and frozen evaluations share, and where it publishes."""

    # Settings an experiment may change when continued: which seeds (each seed's runs are independent of the others',
    # so an experiment at 3 seeds grows to 5 by running again with 5), how many runs at once, where results are
    # published; a kind of experiment adds its own.
    FREE_ON_CONTINUE: ClassVar[tuple[str, ...]] = ("seeds", "parallel_runs", "publish_dir", "tables_only",
                                                   "chance_margin")
    OVERRIDE_EXAMPLE: ClassVar[str] = "seeds=[0,1,2,3,4]"  # --help's example of a key=value

    output_dir: str = "runs/experiment"  # one folder per run inside, then results.md, results.json and the plots
    seeds: tuple[int, ...] = (0, 1, 2)  # each seed repeats everything: pre-training, labelled subset, fine-tuning
    parallel_runs: int = 1  # runs at once; on a CPU they share its cores equally
    launcher: tuple[str, ...] = ()  # the command each run's script follows, e.g. [accelerate, launch]; empty: python
    # Each stage's preset, by name (or a YAML file's path), before the lists below
    mpp_preset: str = "mpp_fashion_mnist_cpu"
    eval_preset: str = "eval_fashion_mnist_cpu"  # few-shot and the raw-pixel baselines
    data: tuple[str, ...] = ()  # every run: the dataset, where it differs from the presets' (data.source, .mean, ...)
    encoder: tuple[str, ...] = ()  # every run: the one encoder all rows share (model.*)
    mpp: tuple[str, ...] = ()  # the MPP runs only (train.*, mpp.*)
    few_shot: tuple[str, ...] = ()  # every few-shot evaluation (few_shot.*)
    linear_probe: tuple[str, ...] = ()  # every logistic regression (linear_probe.*)
    # Where the results are published once the experiment is done: a folder that gets copies of results.md,
    # results.json and the plots. Empty: none.
    publish_dir: str = ""
    tables_only: bool = False  # write the tables, plots and page section again from results.json, running nothing
    # With finetune.sweep_lrs: each fine-tuning's learning rate is chosen once, on the first seed's validation split,
    # and the other seeds' fine-tuning trains at it (finetune.lr_from) without a sweep of its own. False: every seed
    # sweeps.
    tune_once: bool = False

    def presets(self) -> tuple[str, ...]:
        """The names of the fields that give a stage's preset."""
        return ("mpp_preset", "eval_preset")

    def __post_init__(self) -> None:
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds={list(self.seeds)} must list at least one seed, each once")
        if self.parallel_runs < 1:
            raise ConfigError(f"parallel_runs={self.parallel_runs} must be at least 1")
        for name in self.presets():
            if not preset_path(getattr(self, name)).is_file():
                raise ConfigError(f"{name}={getattr(self, name)} does not exist; give a preset's name "
                                  f"({', '.join(preset_names())}) or the path of a YAML file")


@dataclass
class ComparisonConfig(ExperimentConfig):
    """``python -m mpp compare``: what MPP pre-training buys on your own images, over seeds. Each seed pre-trains on
    ``unlabelled``, then reads the encoder, the same encoder at fresh random weights (``init=random:<run>``) and the raw
    pixels on ``labelled``: fine-tuned (the two encoders), by a linear probe and by kNN (all three)."""

    output_dir: str = "runs/comparison"  # one folder per run inside, then results.md and results.json
    unlabelled: str = ""  # the images to pre-train on, as data.source: e.g. hf:/data/my-images-64px (required)
    labelled: str = ""  # the labelled images, as data.source, with a train and a test split (required)
    mpp_preset: str = "mpp_own_images_cpu"
    finetune_preset: str = "finetune_own_images_cpu"
    eval_preset: str = "eval_own_images_cpu"  # the linear probe's and kNN's
    finetune: tuple[str, ...] = ()  # every fine-tuning (train.*, finetune.*, augment.*): the arms' one recipe
    # The baseline's length beside ``finetune`` (train.steps or train.epochs, their warm-up): a ViT from fresh random
    # weights trained as many optimizer steps as MPP's pre-training and fine-tuning together, as the field would set
    # it beside a pre-trained one
    scratch: tuple[str, ...] = ()
    # Where set: the overrides that make ``finetune``'s recipe the paper's (its regularisers off); MPP and scratch are
    # then fine-tuned with it too, in the same tables, to show what the regularisers alone change
    paper_recipe: tuple[str, ...] = ()
    knn: tuple[str, ...] = ()  # every kNN fit (knn.*), beside ``linear_probe``'s
    # Each seed's labelled images: this many training images of each class, drawn by the seed (so every interval
    # includes which images were labelled); 0: all of them on every seed
    labelled_per_class: int = 0

    def presets(self) -> tuple[str, ...]:
        return ("mpp_preset", "finetune_preset", "eval_preset")

    def check_images(self) -> None:
        """Refuses a comparison without its images (checked when it starts: the config's defaults have none)."""
        missing = [name for name in ("unlabelled", "labelled") if not getattr(self, name)]
        if missing:
            raise ConfigError(f"{' and '.join(missing)} must name your images as data.source does, e.g. "
                              "unlabelled=hf:/data/my-images-64px labelled=hf:/data/labelled-64px (docs/own-images.md "
                              "prepares them)")

    def __post_init__(self) -> None:
        if self.labelled_per_class < 0:
            raise ConfigError(f"labelled_per_class={self.labelled_per_class} must be at least 0 (0: every labelled "
                              "image on every seed)")
        if self.few_shot:
            raise ConfigError("few_shot: the comparison reads no few-shot regression (eval/few_shot.py runs it "
                              "alone); leave few_shot empty")
        super().__post_init__()
