"""Masked patch prediction pre-training for Vision Transformers (ViT paper, Sec. 4.6), on timm and accelerate.

Start at ``recipes/mpp.py`` for a whole run; ``mpp.masked_patch_prediction`` holds the objective.
"""

__version__ = "0.1.0"
