"""The reproduction's settings (``python -m study.reproduce``, presets in ``study/configs/reproduce_*.yaml``): its
grid of rows and the claims tested on them, each list of ``key=value`` overrides of the stage presets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from mpp.errors import ConfigError
from study.results_page import PublishedExperimentConfig


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
class ReproductionConfig(PublishedExperimentConfig):
    """``python -m study.reproduce``: the paper's MPP findings (Sec. 4.6) tested as a grid of runs of the recipes,
    every row once per seed."""

    output_dir: str = "runs/reproduce"  # one folder per run inside, then results.md, results.json and the plots
    supervised_preset: str = "supervised_fashion_mnist_cpu"  # supervised pre-training's
    finetune_preset: str = "finetune_fashion_mnist_cpu"  # fine-tuning's
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
