"""model.grad_checkpointing: the blocks' activations recomputed in the backward pass, with the loss and gradients
of a run without it, under every model built on the encoder."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mpp.config.model import ClassifierConfig, MPPConfig
from mpp.models.classifier import ImageClassifier
from mpp.models.encoder import create_encoder
from mpp.models.masked_patch_prediction import MaskedPatchPredictor


def loss_gradients_and_block_calls(model_config, kind: str, checkpointing: bool):
    torch.manual_seed(0)
    encoder = create_encoder(dataclasses.replace(model_config, grad_checkpointing=checkpointing, dropout=0.1))
    mean, std = (0.5,) * 3, (0.25,) * 3
    if kind == "mpp":
        model = MaskedPatchPredictor(encoder, MPPConfig(), mean, std).train()
    else:
        model = ImageClassifier(encoder, 4, ClassifierConfig(), mean, std).train()
    calls = []
    model.encoder.blocks[0].register_forward_pre_hook(lambda *_: calls.append(1))  # recomputation may stop early
    images = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([0, 1, 3])
    torch.manual_seed(2)  # the corruption and dropout draws: alike in both runs, and replayed by the recomputation
    loss = model(images, labels).loss
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}, len(calls)


@pytest.mark.parametrize("kind", ["mpp", "classifier"])
def test_checkpointing_recomputes_the_blocks_with_the_same_loss_and_gradients(tiny_model_config, kind):
    loss, gradients, calls = loss_gradients_and_block_calls(tiny_model_config, kind, checkpointing=False)
    checkpointed_loss, checkpointed_gradients, checkpointed_calls = loss_gradients_and_block_calls(
        tiny_model_config, kind, checkpointing=True)
    assert (calls, checkpointed_calls) == (1, 2)  # the block ran again in the backward pass
    assert torch.allclose(loss, checkpointed_loss)
    assert gradients.keys() == checkpointed_gradients.keys() and len(gradients) > 10
    for name, gradient in gradients.items():
        assert torch.allclose(gradient, checkpointed_gradients[name], atol=1e-6), name
