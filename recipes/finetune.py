"""Fine-tuning a pre-trained (or, without init, a fresh) ViT encoder on a classification task (ViT paper Sec. 3.2,
App. B.1.1, Table 4).

    accelerate launch recipes/finetune.py [--config recipes/configs/<preset>.yaml] init=<run dir> [key=value ...]

The pre-training head is dropped and a zero-initialised linear head is trained with the encoder by SGD with
momentum; the resolution may be higher than in pre-training (position embeddings are 2-D interpolated). Every
starting point (MPP, supervised, none) goes through the same code, so comparisons differ only in the weights.
With finetune.sweep_lrs, each learning rate is first trained on the training images less a held-out slice and
scored on it (sweep/lr_<lr>/ in the run directory); the best is then trained on all of them and tested. With
finetune.lr_from=<run dir>, the rate that run's sweep chose is trained instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Python puts this script's folder first on sys.path, where recipes/mpp.py would shadow the `mpp` package.
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from mpp.command_line import run_recipe
from mpp.config.runs import FinetuneRunConfig
from mpp.presets import default_preset

DEFAULT_PRESET = default_preset("finetune")


def cli() -> None:
    """The command line; what each process runs under `accelerate launch --tpu --main_training_function cli`."""
    run_recipe("mpp.recipes.finetune_run:fine_tune", FinetuneRunConfig, DEFAULT_PRESET, description=__doc__)


if __name__ == "__main__":
    cli()
