"""Each private API of the libraries underneath (mpp/private_apis.py) still exists and still does what the package
relies on: a release that changes one fails here, by name."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

from devices import USE_CPU
from mpp.models.encoder import create_encoder
from mpp.private_apis import (
    add_position_embeddings,
    capturable_optimizer_devices,
    forget_prepared_loader,
    fused_optimizer_devices,
    prepared_models_and_optimizers,
)


def test_accelerate_lists_what_it_prepared_and_save_state_writes_without_a_forgotten_loader(tmp_path):
    accelerator = Accelerator(cpu=USE_CPU)
    layer = torch.nn.Linear(2, 2)
    model, optimizer = accelerator.prepare(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
    models, optimizers = prepared_models_and_optimizers(accelerator)
    assert models == [model] and optimizers == [optimizer]
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2))
    forget_prepared_loader(accelerator, loader)
    with pytest.raises(ValueError):  # it was on accelerate's list of loaders to checkpoint, and is no longer
        forget_prepared_loader(accelerator, loader)
    accelerator.save_state(str(tmp_path / "state"))
    assert {"model.safetensors", "optimizer.bin"} <= {path.name for path in (tmp_path / "state").iterdir()}


def test_torch_names_the_devices_of_its_fused_and_capturable_optimizers():
    assert {"cuda", "cpu"} <= set(fused_optimizer_devices())  # fused AdamW/SGD on the CPU and GPUs
    assert {"cuda", "xla"} <= set(capturable_optimizer_devices())  # a step count on an XLA device
    assert "xla" not in fused_optimizer_devices()


def test_timm_prepends_the_class_token_and_adds_the_position_embeddings(tiny_model_config):
    encoder = create_encoder(tiny_model_config).eval()
    patches = torch.randn(3, encoder.patch_embed.num_patches, encoder.embed_dim)
    expected = torch.cat([encoder.cls_token.expand(3, -1, -1), patches], dim=1) + encoder.pos_embed
    assert torch.allclose(add_position_embeddings(encoder, patches), expected)
