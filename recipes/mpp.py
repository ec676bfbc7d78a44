"""Masked patch prediction pre-training of a Vision Transformer (ViT paper Sec. 4.6, App. B.1.2).

    accelerate launch recipes/mpp.py [--config recipes/configs/<preset>.yaml] [--resume] [key=value ...]

With no arguments: the tiny CPU preset on the embedded shapes data. The run directory gets config.yaml, log.txt,
TensorBoard events, checkpoints/, export/ (the encoder in timm's hub format) and metrics.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Python puts this script's folder first on sys.path, where this file, mpp.py, would shadow the `mpp` package.
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from mpp.command_line import run_recipe
from mpp.config.runs import MPPRunConfig
from mpp.presets import default_preset

DEFAULT_PRESET = default_preset("mpp")


def cli() -> None:
    """The command line; what each process runs under `accelerate launch --tpu --main_training_function cli`."""
    run_recipe("mpp.recipes.mpp_run:pretrain_mpp", MPPRunConfig, DEFAULT_PRESET, description=__doc__)


if __name__ == "__main__":
    cli()
