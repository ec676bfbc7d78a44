"""What MPP pre-training buys on your own images, over seeds: per seed an MPP run on the unlabelled images, then the
encoder, the same encoder at fresh random weights and the raw pixels read on the labelled images by fine-tuning (the
two encoders), a linear probe and kNN; per protocol each arm's mean ± SD, the paired differences with their 95%
intervals and the floors.

    python recipes/compare.py --config recipes/configs/compare_own_images_cpu.yaml unlabelled=hf:<images>
        labelled=hf:<labelled images> [seeds=[0,1,2]] [output_dir=runs/comparison] [key=value ...]

Each run is a run of recipes/mpp.py, recipes/finetune.py or eval/ in a subprocess, in a folder of its own under
output_dir; results.md and results.json follow. Running the command again continues a stopped comparison, and with
more seeds adds them.
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
