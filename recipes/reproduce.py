"""The paper's masked patch prediction findings (Sec. 4.6), reproduced at a scale this machine can run.

    python recipes/reproduce.py [--config recipes/configs/reproduce_<preset>.yaml] [key=value ...]

Rows: from scratch; MPP (3-bit mean colour, downsized patch or L2 pixels, 50% corrupted; mean colour 15%);
supervised. Each is pre-trained, fine-tuned on a few labels and scored by few-shot regression on frozen features,
once per seed, by the other recipes in subprocesses (``launcher`` prefixes their command, e.g. accelerate launch);
the raw pixels are scored by the same few-shot regression, logistic regression and kNN. Writes results.md,
results.json and PNG plots to output_dir (and to publish_dir and results_page's section, where set); running the command
again continues a stopped experiment.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from mpp.command_line import run_recipe
from mpp.experiments.config import ReproductionConfig
from mpp.presets import default_preset

DEFAULT_PRESET = default_preset("reproduce")


def main(cfg: ReproductionConfig) -> None:
    from mpp.experiments.reproduction import reproduce  # with torch, once the config is valid
    from mpp.run.session import configure_logging

    configure_logging()
    reproduce(cfg, Path(__file__).resolve().parents[1])  # the repository whose recipes it runs



def cli() -> None:
    """The command line."""
    run_recipe(main, ReproductionConfig, DEFAULT_PRESET, description=__doc__)


if __name__ == "__main__":
    cli()
