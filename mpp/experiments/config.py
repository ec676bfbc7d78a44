"""The experiments' configs: what every experiment over the recipes shares, then the reproduction's grid of rows and
claims and the pre-training curve's lengths. Each list holds ``key=value`` overrides of the stage presets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, Optional

from mpp.errors import ConfigError


@dataclass
class ExperimentConfig:
    """What every experiment over the recipes shares: where its runs go, its seeds, how its runs are started, the
    presets and overrides its pre-training and frozen evaluations share, and where it publishes."""

    # Settings an experiment may change when continued: which seeds (each seed's runs are independent of the others',
    # so an experiment at 3 seeds grows to 5 by running again with 5), how many runs at once, where results are
    # published; a kind of experiment adds its own.
    FREE_ON_CONTINUE: ClassVar[tuple[str, ...]] = ("seeds", "parallel_runs", "publish_dir", "results_page",
                                                   "tables_only", "chance_margin")

    output_dir: str = "runs/experiment"  # one folder per run inside, then results.md, results.json and the plots
    seeds: tuple[int, ...] = (0, 1, 2)  # each seed repeats everything: pre-training, labelled subset, fine-tuning
    parallel_runs: int = 1  # runs at once; on a CPU they share its cores equally
    launcher: tuple[str, ...] = ()  # the command each run's script follows, e.g. [accelerate, launch]; empty: python
    mpp_preset: str = "recipes/configs/mpp_fashion_mnist_cpu.yaml"  # each stage's preset, before the lists below
    eval_preset: str = "recipes/configs/eval_fashion_mnist_cpu.yaml"  # few-shot and the raw-pixel baselines
    data: tuple[str, ...] = ()  # every run: the dataset, where it differs from the presets' (data.source, .mean, ...)
    encoder: tuple[str, ...] = ()  # every run: the one encoder all rows share (model.*)
    mpp: tuple[str, ...] = ()  # the MPP runs only (train.*, mpp.*)
    few_shot: tuple[str, ...] = ()  # every few-shot evaluation (few_shot.*)
    linear_probe: tuple[str, ...] = ()  # every logistic regression (linear_probe.*)
    # Where the results are published once the experiment is done: a folder that gets copies of results.md,
    # results.json and the plots, and a Markdown file whose section between "<!-- results: <name> -->" and
    # "<!-- /results: <name> -->" (name: output_dir's last part) is replaced by the tables. Empty: neither.
    publish_dir: str = ""
    results_page: str = ""
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
            if not Path(getattr(self, name)).is_file():
                raise ConfigError(f"{name}={getattr(self, name)} does not exist; give a preset from recipes/configs/ "
                                  "(paths are relative to the current directory)")


@dataclass(frozen=True)
class ReproductionRow:
    """One starting point of a reproduction: pre-trained by a recipe (or not), then fine-tuned and evaluated."""

    name: str = ""  # its runs' folders: <stage>/<name>-seed<seed>
    label: str = ""  # in the tables and plots
    pretraining: Optional[Literal["mpp", "supervised"]] = None  # None: a randomly initialised encoder
    overrides: tuple[str, ...] = ()  # of its pre-training run


@dataclass(frozen=True)
class ReproductionClaim:
    """A claim of the paper, tested as the paired difference ``better`` - ``worse`` (two rows' names)."""

    claim: str = ""  # the sentence tested, as the tables print it
    better: str = ""  # the row the claim says is better (its name)
    worse: str = ""  # the row it says is worse


# The paper's grid (Sec. 4.6): from scratch, MPP with each target at 50% corruption and the colour target at 15%, and
# supervised pre-training; and its claims about them.
PAPER_ROWS = (
    ReproductionRow("scratch", "from scratch"),
    ReproductionRow("mpp-colour-50", "MPP, 3-bit mean colour, 50%", "mpp",
                    ("mpp.target=mean_colour", "mpp.corruption_rate=0.5")),
    ReproductionRow("mpp-downsampled-50", "MPP, downsized patch, 50%", "mpp",
                    ("mpp.target=downsampled", "mpp.corruption_rate=0.5")),
    ReproductionRow("mpp-pixels-50", "MPP, L2 pixels, 50%", "mpp", ("mpp.target=pixels", "mpp.corruption_rate=0.5")),
    ReproductionRow("mpp-colour-15", "MPP, 3-bit mean colour, 15%", "mpp",
                    ("mpp.target=mean_colour", "mpp.corruption_rate=0.15")),
    ReproductionRow("supervised", "supervised, all labels", "supervised"),
)
PAPER_CLAIMS = (
    ReproductionClaim("MPP pre-training beats training from scratch", "mpp-colour-50", "scratch"),
    ReproductionClaim("supervised pre-training beats MPP", "supervised", "mpp-colour-50"),
    ReproductionClaim("the mean-colour target beats L2 pixel regression", "mpp-colour-50", "mpp-pixels-50"),
    ReproductionClaim("the downsized-patch target beats L2 pixel regression", "mpp-downsampled-50", "mpp-pixels-50"),
    ReproductionClaim("50% corruption beats 15%", "mpp-colour-50", "mpp-colour-15"),
)


@dataclass
class ReproductionConfig(ExperimentConfig):
    """recipes/reproduce.py: the paper's MPP findings (Sec. 4.6) tested as a grid of runs of the other recipes, every
    row once per seed."""

    output_dir: str = "runs/reproduce"  # one folder per run inside, then results.md, results.json and the plots
    supervised_preset: str = "recipes/configs/supervised_fashion_mnist_cpu.yaml"  # supervised pre-training's
    finetune_preset: str = "recipes/configs/finetune_fashion_mnist_cpu.yaml"  # fine-tuning's
    pretraining: tuple[str, ...] = ()  # the MPP and supervised runs (train.*, data.*, monitor.*), before ``mpp``
    finetune: tuple[str, ...] = ()  # every row's fine-tuning (with finetune.sweep_lrs: each row's rate from one grid)
    # The from-scratch rows' fine-tuning, after ``finetune``: a randomly initialised ViT needs many more steps than a
    # pre-trained one, so it trains at least as many as pre-training and fine-tuning together (train.steps=...).
    scratch_finetune: tuple[str, ...] = ()
    knn: tuple[str, ...] = ()  # the kNN fits (knn.*), beside ``linear_probe``'s logistic regression
    # The grid: its rows (each a mapping of name, label, pretraining: mpp | supervised | null, overrides) and the
    # claims tested on them (claim, better, worse: rows' names). One row without pre-training is the from-scratch
    # reference of the tables.
    rows: tuple[ReproductionRow, ...] = PAPER_ROWS
    claims: tuple[ReproductionClaim, ...] = PAPER_CLAIMS
    # The experiment fails when a row's mean fine-tuned accuracy ends this close to chance (a fraction: 0.02 is 2
    # points): a row that does not train is a broken baseline, not a result. 0: no check (smoke tests of a few steps).
    chance_margin: float = 0.02

    def presets(self) -> tuple[str, ...]:
        return ("mpp_preset", "supervised_preset", "finetune_preset", "eval_preset")

    def __post_init__(self) -> None:
        super().__post_init__()
        names = [row.name for row in self.rows]
        if not all(names) or len(set(names)) != len(names):
            raise ConfigError(f"rows: every row needs a name of its own; got {names}")
        if not any(row.pretraining is None for row in self.rows):
            raise ConfigError("rows: one row must have no pre-training (pretraining: null): the from-scratch "
                              "reference every table reads the others against")
        for claim in self.claims:
            if {claim.better, claim.worse} - set(names):
                raise ConfigError(f"claims: {claim.claim!r} compares {claim.better!r} with {claim.worse!r}, and the "
                                  f"rows are {', '.join(names)}")


@dataclass
class ComparisonConfig(ExperimentConfig):
    """recipes/compare.py: what MPP pre-training buys on your own images, over seeds. Each seed pre-trains on
    ``unlabelled``, then reads the encoder, the same encoder at fresh random weights (``init=random:<run>``) and the raw
    pixels on ``labelled``: fine-tuned (the two encoders), by a linear probe and by kNN (all three)."""

    output_dir: str = "runs/comparison"  # one folder per run inside, then results.md and results.json
    unlabelled: str = ""  # the images to pre-train on, as data.source: e.g. hf:/data/my-images-64px (required)
    labelled: str = ""  # the labelled images, as data.source, with a train and a test split (required)
    mpp_preset: str = "recipes/configs/mpp_own_images_cpu.yaml"
    finetune_preset: str = "recipes/configs/finetune_own_images_cpu.yaml"
    eval_preset: str = "recipes/configs/eval_own_images_cpu.yaml"  # the linear probe's and kNN's
    finetune: tuple[str, ...] = ()  # every fine-tuning (train.*, finetune.*)
    knn: tuple[str, ...] = ()  # every kNN fit (knn.*), beside ``linear_probe``'s

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
        if self.few_shot:
            raise ConfigError("few_shot: the comparison reads no few-shot regression (eval/few_shot.py runs it "
                              "alone); leave few_shot empty")
        super().__post_init__()
