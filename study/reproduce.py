"""The paper's masked patch prediction findings (Sec. 4.6), reproduced at a scale this machine can run.

    python -m study.reproduce [--config study/configs/reproduce_<preset>.yaml] [key=value ...]

Rows: from scratch; MPP (3-bit mean colour, downsized patch or L2 pixels, 50% corrupted; mean colour 15%);
supervised. Each is pre-trained, fine-tuned on a few labels and scored by few-shot regression on frozen features,
once per seed, by the other recipes in subprocesses (``launcher`` prefixes their command, e.g. accelerate launch);
the raw pixels are scored by the same few-shot regression, logistic regression and kNN. Writes results.md,
results.json and PNG plots to output_dir (and to publish_dir and results_page's section, where set); running the command
again continues a stopped experiment.
"""

from __future__ import annotations

from pathlib import Path

from mpp.command_line import run_recipe
from study.reproduction_config import ReproductionConfig

DEFAULT_PRESET = Path(__file__).parent / "configs" / "reproduce_fashion_mnist_cpu.yaml"


def main(cfg: ReproductionConfig) -> None:
    from mpp.run import configure_logging
    from study.reproduction import reproduce  # with torch, once the config is valid

    configure_logging()
    reproduce(cfg)


def cli() -> None:
    """The command line: ``python -m study.reproduce [--config FILE] [key=value ...]``."""
    run_recipe(main, ReproductionConfig, DEFAULT_PRESET, description=__doc__)


if __name__ == "__main__":
    cli()
