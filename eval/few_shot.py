"""Few-shot linear accuracy of a frozen encoder (ViT paper Sec. 4.1 "Metrics"): for k images per class, their
features are regressed onto {-1, 1}^K targets in closed form, the penalty chosen on a hold-out slice of other
training images; test accuracy over several seeds, mean and standard deviation.

    accelerate launch eval/few_shot.py [--config recipes/configs/<preset>.yaml] [init=<run dir>] [key=value ...]

No init: a randomly initialised encoder, the baseline. The run directory gets config.yaml, log.txt, TensorBoard
scalars few_shot/<k>shot, the cached features and metrics.json.
"""

from __future__ import annotations


from mpp.command_line import run_recipe
from mpp.config.runs import FewShotRunConfig
from mpp.presets import default_preset

DEFAULT_PRESET = default_preset("eval")


def cli() -> None:
    """The command line; what each process runs under `accelerate launch --tpu --main_training_function cli`."""
    run_recipe("mpp.recipes.few_shot_run:evaluate_few_shot", FewShotRunConfig, DEFAULT_PRESET, description=__doc__)


if __name__ == "__main__":
    cli()
