"""Linear CKA, each block's features and the relative weight change, on cases whose answers are known."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from mpp.models.encoder import create_encoder
from study.representation_similarity import block_features, block_similarity, linear_cka, relative_weight_change


def test_features_equal_up_to_rotation_scale_and_shift_have_cka_one():
    x = torch.randn(64, 8)
    rotation, _ = torch.linalg.qr(torch.randn(8, 8))  # orthogonal
    assert linear_cka(x, 3.7 * x @ rotation + 5.0) == pytest.approx(1, abs=1e-12)


def test_features_sharing_one_of_two_equal_directions_have_cka_one_over_root_two():
    # Centred, orthogonal columns of equal norm: y^T x = (|u|^2, 0), x^T x = |u|^2 I, so CKA = |u|^4 / (sqrt 2 |u|^4).
    u = torch.tensor([1.0, -1.0, 1.0, -1.0])
    v = torch.tensor([1.0, 1.0, -1.0, -1.0])
    assert linear_cka(torch.stack([u, v], dim=1), u[:, None]) == pytest.approx(1 / math.sqrt(2), abs=1e-12)


def test_independent_features_have_cka_near_zero():
    assert linear_cka(torch.randn(512, 8), torch.randn(512, 8)) < 0.05  # about sqrt(d1 d2) / n = 0.016


def test_cka_is_symmetric():
    x = torch.randn(100, 5)
    y = x[:, :3] @ torch.randn(3, 7) + torch.randn(100, 7)
    assert linear_cka(x, y) == pytest.approx(linear_cka(y, x), abs=1e-12)


def test_block_features_are_each_blocks_mean_patch_token_without_the_class_token_read_in_eval_mode(
        tiny_model_config):
    encoder = create_encoder(dataclasses.replace(tiny_model_config, dropout=0.5)).train()
    images = torch.randn(4, 3, 16, 16)
    features = block_features(encoder, images)
    assert encoder.training  # its mode restored
    assert all(torch.equal(a, b) for a, b in zip(features, block_features(encoder, images), strict=True))  # no dropout
    outputs = []
    for block in encoder.blocks:
        block.register_forward_hook(lambda module, inputs, output: outputs.append(output))
    encoder.eval()(images)
    assert len(features) == len(outputs) == 2 and encoder.num_prefix_tokens == 1
    for feature, tokens in zip(features, outputs, strict=True):  # (b 1+n d): the [class] token first
        assert feature.shape == (4, 32) and torch.allclose(feature, tokens[:, 1:].mean(dim=1))


def test_an_encoder_is_like_itself_in_every_block_and_less_like_another_initialisation(tiny_model_config):
    encoder, other = create_encoder(tiny_model_config), create_encoder(tiny_model_config)
    images = torch.randn(32, 3, 16, 16)
    assert block_similarity(encoder, encoder, images) == pytest.approx([1, 1], abs=1e-9)
    assert all(similarity < 0.9 for similarity in block_similarity(encoder, other, images))  # 0.62 and 0.61


def test_the_weight_change_is_zero_for_the_same_weights_and_its_norm_ratio_otherwise():
    before = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([[4.0]])}  # norm 5
    assert relative_weight_change(before, {name: value.clone() for name, value in before.items()}) == 0
    after = {"a": torch.tensor([3.0, 1.5]), "b": torch.tensor([[6.0]])}  # moved by (0, 1.5, 2): norm 2.5
    assert relative_weight_change(before, after) == pytest.approx(0.5, abs=1e-12)


def test_the_weight_change_leaves_out_a_head_only_one_holds_or_one_of_another_shape():
    before = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([[4.0]]), "head.weight": torch.ones(4, 2)}
    after = {"a": torch.tensor([3.0, 1.5]), "b": torch.tensor([[6.0]]), "head.weight": torch.zeros(10, 2),
             "head.bias": torch.zeros(10)}
    assert relative_weight_change(before, after) == pytest.approx(0.5, abs=1e-12)
    with pytest.raises(ValueError, match="share no tensor"):
        relative_weight_change(before, {f"encoder.{name}": value for name, value in after.items()})
