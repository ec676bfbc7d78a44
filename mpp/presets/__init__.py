"""The presets: YAML files of a run's settings, installed with the package (``recipes/configs/`` in a checkout links
to this folder). The preset each entry point reads without ``--config``, and the CPU preset a run on a CPU is pointed
to, are named here and nowhere else."""

from __future__ import annotations

from pathlib import Path

PRESETS = Path(__file__).parent

# Each entry point's preset without --config (the eval/ scripts share one): the tiny CPU presets on the embedded
# shapes data, so that a first run needs nothing but the install; the comparison, sized for a CPU.
DEFAULTS = {"mpp": "mpp_tiny_cpu", "supervised": "supervised_tiny_cpu", "finetune": "finetune_tiny_cpu",
            "eval": "eval_tiny_cpu", "compare": "compare_own_images_cpu"}
# The preset sized for a CPU that a run of each kind on a CPU asking for a GPU's settings is pointed to.
FOR_A_CPU = {"mpp": "mpp_own_images_cpu", "finetune": "finetune_own_images_cpu", "supervised": "supervised_tiny_cpu",
             "eval": "eval_own_images_cpu"}


def preset_file(name: str) -> Path:
    """The installed preset of that name (without ``.yaml``)."""
    return PRESETS / f"{name}.yaml"


def default_preset(entry_point: str) -> Path:
    """What ``entry_point`` (a key of ``DEFAULTS``) reads without ``--config``."""
    return preset_file(DEFAULTS[entry_point])
