from __future__ import annotations

import pytest
import torch

from mpp.images import KeyedDraws, keys_of
from mpp.models.masked_patch_prediction import (
    MASK,
    RANDOM,
    UNCHANGED,
    corrupt_patch_embeddings,
    draw_corruption,
    num_corrupted,
    select_patches,
)


def draws(batch: int, seed: int) -> KeyedDraws:
    return KeyedDraws(keys_of(seed, torch.arange(batch)))


@pytest.mark.parametrize(
    ("rate", "mask_fraction", "random_fraction"), [(0.5, 0.8, 0.1), (0.15, 0.8, 0.1), (0.4, 0.6, 0.3)]
)
def test_corrupted_fraction_and_split_match_the_configuration(rate, mask_fraction, random_fraction):
    batch, patches = 2000, 64
    corruption = draw_corruption(draws(batch, seed=1), patches, rate, mask_fraction, random_fraction)

    k = round(rate * patches)
    assert corruption.positions.shape == (batch, k)
    # Distinct positions within every image: exactly the configured fraction is corrupted.
    assert all(len(set(row.tolist())) == k for row in corruption.positions[:100])
    assert corruption.positions.sort(dim=1).values.diff(dim=1).gt(0).all()

    # Uniform choice: every patch position is corrupted with probability `rate`.
    hits = torch.zeros(patches).index_add_(0, corruption.positions.flatten(), torch.ones(batch * k))
    assert torch.allclose(hits / batch, torch.full((patches,), k / patches), atol=0.04)

    kinds = corruption.replacement.flatten()
    total = kinds.numel()
    assert abs((kinds == MASK).sum() / total - mask_fraction) < 0.01
    assert abs((kinds == RANDOM).sum() / total - random_fraction) < 0.01
    assert abs((kinds == UNCHANGED).sum() / total - (1 - mask_fraction - random_fraction)) < 0.01


def test_random_sources_are_uniform_over_the_other_patches_never_the_patch_itself():
    corruption = draw_corruption(draws(4000, seed=2), 16, 0.5)
    assert (corruption.sources != corruption.positions).all()
    assert ((corruption.sources >= 0) & (corruption.sources < 16)).all()
    offsets = (corruption.sources - corruption.positions) % 16  # 1..15, each equally likely
    counts = torch.bincount(offsets.flatten(), minlength=16).float()
    assert counts[0] == 0
    assert torch.allclose(counts[1:] / counts[1:].sum(), torch.full((15,), 1 / 15), atol=0.01)


def test_each_kind_of_corruption_writes_what_it_should():
    batch, patches, dim = 64, 16, 8
    embeddings = torch.randn(batch, patches, dim)  # every patch embedding distinct
    mask_embedding = torch.randn(dim)
    corruption = draw_corruption(draws(batch, seed=3), patches, 0.5)
    corrupted = corrupt_patch_embeddings(embeddings, mask_embedding, corruption)

    assert corrupted.shape == embeddings.shape
    is_corrupted = torch.zeros(batch, patches, dtype=torch.bool).scatter(1, corruption.positions, True)
    assert torch.equal(corrupted[~is_corrupted], embeddings[~is_corrupted])  # the rest untouched

    rows = torch.arange(batch)[:, None].expand_as(corruption.positions)
    received = corrupted[rows, corruption.positions]  # (b k d)
    original = embeddings[rows, corruption.positions]
    kind = corruption.replacement
    assert torch.equal(received[kind == MASK], mask_embedding.expand(int((kind == MASK).sum()), dim))
    assert torch.equal(received[kind == UNCHANGED], original[kind == UNCHANGED])
    # A random position holds exactly one other patch's (uncorrupted) embedding of its image, never its own.
    matches = (received[:, :, None, :] == embeddings[:, None, :, :]).all(dim=-1)  # (b k n)
    random = kind == RANDOM
    assert random.any()
    assert (matches[random].sum(dim=-1) == 1).all()
    assert (matches[random].float().argmax(dim=-1) != corruption.positions[random]).all()
    assert torch.equal(received[random], embeddings[rows, corruption.sources][random])  # the drawn source's
    assert (kind == MASK).any() and (kind == UNCHANGED).any()


def test_gradients_reach_the_mask_embedding_and_the_patch_embeddings():
    embeddings = torch.randn(4, 16, 8, requires_grad=True)
    mask_embedding = torch.randn(8, requires_grad=True)
    corruption = draw_corruption(draws(4, seed=4), 16, 0.5)
    corrupt_patch_embeddings(embeddings, mask_embedding, corruption).sum().backward()
    kind = corruption.replacement
    assert torch.equal(mask_embedding.grad, torch.full((8,), float((kind == MASK).sum())))
    # Each patch's gradient counts the outputs that read its embedding: itself unless masked or replaced, plus each
    # position that received it as a random replacement.
    reads = torch.ones(4, 16).scatter(1, corruption.positions, (kind == UNCHANGED).float())
    reads = reads.scatter_add(1, corruption.sources, (kind == RANDOM).float())
    assert torch.equal(embeddings.grad, reads.unsqueeze(-1).expand(4, 16, 8))


@pytest.mark.parametrize("shape", [(), (3,), (4, 2)])
def test_select_patches_picks_each_images_own_positions(shape):
    values = torch.randn(5, 16, *shape)
    positions = draw_corruption(draws(5, seed=6), 16, 0.5).positions
    rows = torch.arange(5)[:, None].expand_as(positions)
    assert torch.equal(select_patches(values, positions), values[rows, positions])


def test_an_images_corruption_is_a_function_of_its_key_whatever_its_batch_and_at_least_one_patch():
    first = draw_corruption(draws(8, seed=5), 16, 0.5)
    second = draw_corruption(draws(8, seed=5), 16, 0.5)
    assert torch.equal(first.positions, second.positions) and torch.equal(first.sources, second.sources)
    # The images of one batch of 8, drawn as two batches of 4 (two processes' halves): the same corruption.
    halves = [draw_corruption(KeyedDraws(keys_of(5, torch.arange(8)[rows])), 16, 0.5) for rows in (slice(0, 4),
                                                                                                  slice(4, 8))]
    for part in ("positions", "replacement", "sources"):
        assert torch.equal(torch.cat([getattr(half, part) for half in halves]), getattr(first, part))
    other = draw_corruption(draws(8, seed=6), 16, 0.5)
    assert not torch.equal(first.positions, other.positions)
    assert num_corrupted(16, 0.01) == 1
    assert num_corrupted(196, 0.15) == 29
