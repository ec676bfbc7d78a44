"""Masked patch prediction pre-training for Vision Transformers (ViT paper, Sec. 4.6), on timm and accelerate.

Start at ``mpp/commands.py``, the table of commands ``python -m mpp <command>`` runs;
``mpp.models.masked_patch_prediction`` holds the objective. Imports flow one way, each layer using only those before
it (tests/test_architecture.py holds the package to it):

    commands, presets  ->  config  ->  run  ->  data, models  ->  training, evaluation  ->  command_line, experiments
            ->  recipes  ->  benchmark  ->  __main__

From Python, in the calling process (mpp/recipes/python_api.py): ``mpp.pretrain``, ``mpp.finetune``,
``mpp.evaluate``, each returning a ``mpp.RunResult``; ``mpp.compare``, those runs over seeds on your own images.
"""

from importlib.metadata import version
from typing import Any

__version__ = version("mpp")  # pyproject.toml's project.version, the one place the version is written
PYTHON_API = ("pretrain", "finetune", "evaluate", "compare", "RunResult")
__all__ = ["__version__", *PYTHON_API]


def __getattr__(name: str) -> Any:
    # Imported on first use: `import mpp.<module>` (every entry point and tool) stays free of what the recipes import.
    if name in PYTHON_API:
        from mpp.recipes import python_api

        return getattr(python_api, name)
    raise AttributeError(f"module 'mpp' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *PYTHON_API])
