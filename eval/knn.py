"""kNN accuracy of a frozen encoder: each test image takes the class with the most weight among its k nearest
training images by cosine similarity of their features, each neighbour voting exp(similarity / temperature).

    accelerate launch eval/knn.py [--config recipes/configs/<preset>.yaml] [init=<run dir>] [key=value ...]

No init: a randomly initialised encoder, the baseline.
"""

from __future__ import annotations


from mpp.command_line import run_recipe
from mpp.config.runs import KnnRunConfig
from mpp.presets import default_preset

DEFAULT_PRESET = default_preset("eval")


def cli() -> None:
    """The command line; what each process runs under `accelerate launch --tpu --main_training_function cli`."""
    run_recipe("mpp.recipes.knn_run:evaluate_knn", KnnRunConfig, DEFAULT_PRESET, description=__doc__)


if __name__ == "__main__":
    cli()
