"""What MPP pre-training buys on your own images, over seeds: per seed an MPP run on the unlabelled images and a draw
of the labelled ones; then, fine-tuned with one recipe each at its own swept rate, the MPP encoder against the same
architecture trained from scratch to its plateau (and at random weights as briefly as MPP's fine-tuning), and, frozen,
the encoder, its random weights and the raw pixels by a linear probe and kNN. results.md opens with the verdict (what
pre-training bought; whether each encoder clears logistic regression on the raw pixels), then per protocol each arm's
mean ± SD, the paired differences with their 95% intervals and the floors.

    python recipes/compare.py unlabelled=hf:<images> labelled=hf:<labelled images> [seeds=[0,1,2]]
        [output_dir=runs/comparison] [key=value ...]

Every setting and both image sets are checked before the first run. Each run is a run of recipes/mpp.py,
recipes/finetune.py or eval/ in a subprocess, in a folder of its own under output_dir; results.md and results.json
follow. Running the command again continues a stopped comparison, and with more seeds adds them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from mpp.command_line import run_recipe
from mpp.experiments.config import ComparisonConfig
from mpp.presets import default_preset

DEFAULT_PRESET = default_preset("compare")


def main(cfg: ComparisonConfig) -> None:
    from mpp.experiments.comparison import compare  # with torch, once the config is valid
    from mpp.run.session import configure_logging

    configure_logging()
    compare(cfg, Path(__file__).resolve().parents[1])  # the repository whose recipes it runs


def cli() -> None:
    """The command line."""
    run_recipe(main, ComparisonConfig, DEFAULT_PRESET, description=__doc__)


if __name__ == "__main__":
    cli()
