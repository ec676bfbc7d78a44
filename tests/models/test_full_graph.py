"""The training steps compile whole: ``torch.compile(fullgraph=True)`` traces the MPP model (every target) and the
classifier, loss included, as one graph and differentiates it, as ``train.compile`` on a GPU wants. A graph break
would raise here; no GPU is needed to see it (the aot_eager backend traces as inductor does, without generating
code)."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from mpp.config.model import ClassifierConfig, MPPConfig
from mpp.models.classifier import ImageClassifier
from mpp.models.encoder import create_encoder
from mpp.models.masked_patch_prediction import MaskedPatchPredictor

pytestmark = pytest.mark.slow  # compiles the training step (pytest -m "not slow" leaves it out)

MODELS = {
    "mpp-mean_colour": lambda encoder: MaskedPatchPredictor(encoder, MPPConfig(), (0.5,) * 3, (0.5,) * 3),
    "mpp-downsampled": lambda encoder: MaskedPatchPredictor(encoder, MPPConfig(target="downsampled",
                                                                               downsampled_size=2), (0.5,) * 3,
                                                            (0.5,) * 3),
    "mpp-pixels": lambda encoder: MaskedPatchPredictor(encoder, MPPConfig(target="pixels"), (0.5,) * 3, (0.5,) * 3),
    "classifier-mlp": lambda encoder: ImageClassifier(encoder, 5, ClassifierConfig(), (0.5,) * 3, (0.5,) * 3),
    "classifier-avg": lambda encoder: ImageClassifier(encoder, 5, ClassifierConfig(head="linear", pool="avg"),
                                                      (0.5,) * 3, (0.5,) * 3),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_the_training_step_compiles_as_one_graph(tiny_model_config, name):
    model = MODELS[name](create_encoder(tiny_model_config)).train()
    images, labels = torch.rand(4, 3, 16, 16), torch.randint(0, 5, (4,))
    torch._dynamo.reset()
    output = torch.compile(model, fullgraph=True, backend="aot_eager")(images, labels)
    output.loss.backward()
    assert torch.isfinite(output.loss)
    assert all(parameter.grad is not None for parameter in model.head.parameters())
    torch._dynamo.reset()
    assert torch._dynamo.explain(model)(images, labels).graph_break_count == 0
