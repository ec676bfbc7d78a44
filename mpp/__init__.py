"""Masked patch prediction pre-training for Vision Transformers (ViT paper, Sec. 4.6), on timm and accelerate.

Start at ``recipes/mpp.py`` for a whole run; ``mpp.models.masked_patch_prediction`` holds the objective. Imports flow
one way, each layer using only those before it (tests/test_architecture.py holds the package to it):

    config  ->  run  ->  data, models  ->  training, evaluation  ->  command_line, experiments  ->  benchmark
"""

from importlib.metadata import version

__version__ = version("mpp")  # pyproject.toml's project.version, the one place the version is written
