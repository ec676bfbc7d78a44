from __future__ import annotations

import pytest
import torch

from mpp.config import ModelConfig


@pytest.fixture
def tiny_model_config() -> ModelConfig:
    """A ViT small enough for unit tests: 16x16 images, 4x4 patches (16 of them), width 32, 2 blocks."""
    return ModelConfig(name="vit_tiny_patch16_224", img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2)


@pytest.fixture(autouse=True)
def seeded() -> None:
    torch.manual_seed(0)
