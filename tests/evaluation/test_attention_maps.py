"""Mean attention distance and attention rollout on attention patterns whose answers are known."""

from __future__ import annotations

import itertools
import math

import torch

from mpp.evaluation.attention_maps import attention_rollout, mean_attention_distance


def test_a_token_attending_only_to_itself_has_distance_zero():
    attention = torch.eye(1 + 9).expand(2, 3, 10, 10)  # (b h t t): 3x3 patches and the [class] token
    assert torch.equal(mean_attention_distance(attention, patch_size=16), torch.zeros(3, dtype=torch.float64))


def test_uniform_attention_has_the_mean_pairwise_patch_distance():
    grid, patch_size = 3, 16
    centres = [(row * patch_size, column * patch_size) for row in range(grid) for column in range(grid)]
    expected = sum(math.dist(a, b) for a, b in itertools.product(centres, centres)) / len(centres) ** 2
    attention = torch.full((2, 4, 10, 10), 1 / 10)  # every token attends to all, the [class] token included
    distances = mean_attention_distance(attention, patch_size)
    assert distances.shape == (4,) and torch.allclose(distances, torch.full((4,), expected, dtype=torch.float64))


def test_the_rollout_of_identity_attention_is_the_identity():
    attention = torch.eye(10).expand(2, 3, 10, 10)
    assert torch.equal(attention_rollout([attention] * 4), torch.eye(10).expand(2, 10, 10))


def test_the_rollout_follows_attention_through_the_layers():
    # Layer 1: every token reads token 2; layer 2: every token reads token 1. With the residual, the [class]
    # token's output draws on itself, on token 1, and through token 1 on token 2.
    reads = [torch.zeros(1, 1, 3, 3), torch.zeros(1, 1, 3, 3)]
    reads[0][..., 2], reads[1][..., 1] = 1, 1
    rollout = attention_rollout(reads)[0]
    assert torch.allclose(rollout.sum(dim=-1), torch.ones(3))
    assert torch.allclose(rollout[0], torch.tensor([0.25, 0.25, 0.5]))
