"""Frozen-feature quality as MPP pre-training grows: linear probe (every label) and few-shot accuracy of the encoder at
initialisation and after 1, 2, 4, 8 and 16 epochs of MPP, over seeds, with the gain's 95% interval at each length.

    python recipes/pretraining_curve.py [--config recipes/configs/curve_<preset>.yaml] [key=value ...]

Writes results.md, results.json and pretraining_curve.png to output_dir (and to publish_dir and results_page's
section, where set); running the command again continues a stopped experiment.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from mpp.command_line import run_recipe
from mpp.experiments.config import PretrainingCurveConfig
from mpp.presets import default_preset

DEFAULT_PRESET = default_preset("pretraining_curve")


def main(cfg: PretrainingCurveConfig) -> None:
    from mpp.experiments.curve import pretraining_curve  # with torch, once the config is valid
    from mpp.run.session import configure_logging

    configure_logging()
    pretraining_curve(cfg, Path(__file__).resolve().parents[1])  # the repository whose recipes it runs


def cli() -> None:
    """The command line."""
    run_recipe(main, PretrainingCurveConfig, DEFAULT_PRESET, description=__doc__)


if __name__ == "__main__":
    cli()
