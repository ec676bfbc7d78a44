"""Supervised pre-training of a Vision Transformer classifier (ViT paper Sec. 4.1, App. B.1, Table 3).

    accelerate launch recipes/supervised.py [--config recipes/configs/<preset>.yaml] [--resume] [key=value ...]

With no arguments: the tiny CPU preset on the embedded shapes data. The run directory gets what recipes/mpp.py
writes (config.yaml, log.txt, TensorBoard events, checkpoints/, export/ with the encoder, metrics.json), with the
test split's top-1 accuracy in metrics.json. Fine-tune the result with recipes/finetune.py init=<run directory>.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Python puts this script's folder first on sys.path, where recipes/mpp.py would shadow the `mpp` package.
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from mpp.command_line import run_recipe
from mpp.config.runs import SupervisedRunConfig
from mpp.presets import default_preset

DEFAULT_PRESET = default_preset("supervised")


def cli() -> None:
    """The command line; what each process runs under `accelerate launch --tpu --main_training_function cli`."""
    run_recipe("mpp.recipes.supervised_run:pretrain_supervised", SupervisedRunConfig, DEFAULT_PRESET,
               description=__doc__)


if __name__ == "__main__":
    cli()
