"""The optimizer every recipe makes: which parameters decay, and how steps the fp16 scaler skips are counted."""

from __future__ import annotations

import torch

from mpp.config.model import MPPConfig
from mpp.config.training import TrainConfig
from mpp.models.encoder import create_encoder
from mpp.models.masked_patch_prediction import MaskedPatchPredictor
from mpp.training.non_finite import NonFiniteGuard
from mpp.training.optimizer import create_optimizer


def test_weight_decay_skips_biases_norms_tokens_and_position_embeddings(tiny_model_config):
    model = MaskedPatchPredictor(create_encoder(tiny_model_config), MPPConfig(), (0.5,) * 3, (0.5,) * 3)
    optimizer = create_optimizer(model, TrainConfig(weight_decay=0.1), torch.device("cpu"))
    name_of = {id(parameter): name for name, parameter in model.named_parameters()}
    decay = {group["weight_decay"]: {name_of[id(p)] for p in group["params"]} for group in optimizer.param_groups}
    assert set(decay) == {0.0, 0.1}
    assert decay[0.0] | decay[0.1] == set(name_of.values()) and not decay[0.0] & decay[0.1]
    assert all(name.endswith(".weight") and model.get_parameter(name).ndim >= 2 for name in decay[0.1])
    kept = {name for name in decay[0.0] if not name.endswith(".bias") and "norm" not in name}
    assert kept == {"encoder.cls_token", "encoder.pos_embed", "mask_embedding"}
    assert "encoder.blocks.0.attn.qkv.weight" in decay[0.1] and "encoder.blocks.0.norm1.weight" in decay[0.0]


def test_steps_the_fp16_scaler_skips_are_counted_and_never_stop_the_run():
    """In fp16 accelerate's gradient scaler skips a step with an overflowing gradient (and lowers its scale): the
    guard counts such steps for the log and metrics, and never stops the run for them, even with on_nonfinite=stop."""
    layer = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    guard = NonFiniteGuard(optimizer, torch.device("cpu"), stop=True, scaler_skips=True)
    for grad_norm in (1.0, float("inf"), 2.0, float("nan")):
        layer(torch.ones(1, 2)).sum().backward()
        with guard.only_if_finite(torch.tensor(grad_norm)):
            optimizer.step()
        optimizer.zero_grad()
    assert guard.check(step=4, window_steps=4) == 2
    assert guard.describe(2).strip() == "(2 steps with a non-finite loss or gradient skipped)"
    guard.reset()
    assert guard.check(step=4, window_steps=0) == 0
