"""The optimizer every recipe makes: which parameters decay, fine-tuning's layer-wise learning rates, and how steps
the fp16 scaler skips are counted."""

from __future__ import annotations

import pytest
import torch
from devices import USE_CPU

from mpp.config.building import build_config
from mpp.config.model import ClassifierConfig, MPPConfig
from mpp.config.runs import FinetuneRunConfig
from mpp.config.training import TrainConfig
from mpp.errors import ConfigError
from mpp.models.classifier import ImageClassifier
from mpp.models.encoder import create_encoder
from mpp.models.masked_patch_prediction import MaskedPatchPredictor
from mpp.training.optimizer import NonFiniteGuard, create_optimizer


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


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_layer_decay_gives_the_head_the_peak_rate_and_each_layer_below_it_a_factor_less(tiny_model_config, kind):
    """BEiT's and MAE's rule with a decay of 0.5 on L = 2 blocks: the head x1, block i x0.5^(L - i), the patch
    embedding, [class] token and position embedding x0.5^(L + 1); weight decay skips the same parameters as without."""
    model = ImageClassifier(create_encoder(tiny_model_config), 3, ClassifierConfig(head="linear"), (0.5,) * 3,
                            (0.5,) * 3)
    train = TrainConfig(optimizer=kind, weight_decay=0.1)
    optimizer = create_optimizer(model, train, torch.device("cpu"), layer_decay=0.5)
    name_of = {id(parameter): name for name, parameter in model.named_parameters()}
    grouped = [(name_of[id(p)], group["lr_scale"], group["weight_decay"]) for group in optimizer.param_groups
               for p in group["params"]]
    assert sorted(name for name, _, _ in grouped) == sorted(name_of.values())  # every parameter, once
    scale = {name: lr_scale for name, lr_scale, _ in grouped}
    assert tiny_model_config.depth == 2
    assert scale["head.weight"] == scale["head.bias"] == 1.0
    assert scale["encoder.blocks.1.attn.qkv.weight"] == scale["encoder.blocks.1.norm1.bias"] == 0.5
    assert scale["encoder.blocks.0.mlp.fc2.weight"] == scale["encoder.blocks.0.norm2.weight"] == 0.25
    for name in ("encoder.patch_embed.proj.weight", "encoder.cls_token", "encoder.pos_embed"):
        assert scale[name] == 0.125, name
    without = create_optimizer(model, train, torch.device("cpu"))
    assert all("lr_scale" not in group for group in without.param_groups)  # one rate for all
    decays = {name_of[id(p)]: group["weight_decay"] for group in without.param_groups for p in group["params"]}
    assert {name: decay for name, _, decay in grouped} == decays


def test_a_layer_decay_outside_zero_to_one_is_refused_naming_the_key():
    assert build_config(FinetuneRunConfig).finetune.layer_decay == 1.0  # off by default: the paper's fine-tuning
    for value in ("0.0", "1.5"):
        with pytest.raises(ConfigError, match=rf"finetune.layer_decay={value} must lie in \(0, 1\]"):
            build_config(FinetuneRunConfig, overrides=[f"finetune.layer_decay={value}"])


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


def test_the_loop_steps_each_group_at_the_scheduled_rate_times_its_scale(train_on_own_batches, tmp_path):
    """Layer-wise decay's groups keep their ratio to the peak through the schedule (here constant: lr = min_lr)."""
    from types import SimpleNamespace

    from accelerate import Accelerator
    from torch.utils.data import DataLoader, TensorDataset


    class Linear(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.second = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)

        def forward(self, images, labels, random_keys):
            loss = self.second(self.first(images)).pow(2).mean()
            return SimpleNamespace(loss=loss, accuracy=loss.new_zeros(()))  # on the loss's device

    cfg = TrainConfig(steps=2, global_batch_size=4, lr=0.1, min_lr=0.1, warmup_steps=0, log_every=1,
                      checkpoint_every=10)
    model = Linear()
    optimizer = torch.optim.SGD([{"params": model.first.parameters(), "lr_scale": 0.25},
                                 {"params": model.second.parameters()}], lr=cfg.lr)
    accelerator = Accelerator(cpu=USE_CPU)
    dataset = TensorDataset(torch.randn(8, 4), torch.zeros(8), torch.arange(8))
    trainer, _ = train_on_own_batches(accelerator, model, optimizer, DataLoader(dataset, batch_size=4), cfg, tmp_path)
    assert [group["lr"] for group in trainer.optimizer.param_groups] == pytest.approx([0.025, 0.1])
