"""Linear-probe accuracy of a frozen encoder: logistic regression on the standardised features of the whole training
split, fitted by L-BFGS, its L2 penalty chosen on a hold-out slice; top-1 on the test split. Features are extracted
once and cached (eval.feature_cache), so trying other probe settings costs only the fits.

    accelerate launch eval/linear_probe.py [--config recipes/configs/<preset>.yaml] [init=<run dir>] [key=value ...]

No init: a randomly initialised encoder, the baseline.
"""

from __future__ import annotations


from mpp.command_line import run_recipe
from mpp.config.runs import LinearProbeRunConfig
from mpp.presets import default_preset

DEFAULT_PRESET = default_preset("eval")


def cli() -> None:
    """The command line; what each process runs under `accelerate launch --tpu --main_training_function cli`."""
    run_recipe("mpp.recipes.linear_probe_run:evaluate_linear_probe", LinearProbeRunConfig, DEFAULT_PRESET,
               description=__doc__)


if __name__ == "__main__":
    cli()
