"""BERT-style corruption of patch embeddings (paper Sec. 4.6, App. B.1.2).

A fixed fraction of each image's patches is chosen uniformly at random; of those, about 80% are replaced by a
learnable [mask] embedding, 10% by the embedding of another patch of the same image, and 10% are left unchanged.
It acts on the embeddings after the linear projection and before position embeddings are added, so a replaced patch
still carries its own position. Every operation is batched: no loop over images or patches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mpp.keyed_random import KeyedDraws

__all__ = ["select_patches"]  # what study/, tools/ and users may import from here

# What a corrupted position receives.
MASK, RANDOM, UNCHANGED = 0, 1, 2


@dataclass
class Corruption:
    """One draw of corruption for a batch; k corrupted patches per image."""

    positions: torch.Tensor  # (b k) long: indices of the corrupted patches, distinct within an image
    replacement: torch.Tensor  # (b k) long: MASK, RANDOM or UNCHANGED
    sources: torch.Tensor  # (b k) long: the patch whose embedding a RANDOM position receives; never itself


def num_corrupted(num_patches: int, rate: float) -> int:
    """Patches corrupted per image: ``rate`` of them, rounded, at least one."""
    return max(1, min(num_patches, round(rate * num_patches)))


def draw_corruption(
    draws: KeyedDraws,
    num_patches: int,
    rate: float,
    mask_fraction: float = 0.8,
    random_fraction: float = 0.1,
) -> Corruption:
    """Choose which patches to corrupt and how, independently per image, from each image's own draws (so an image's
    corruption is the same in any batch: ``mpp.keyed_random``)."""
    if random_fraction > 0 and num_patches < 2:
        raise ValueError("replacing a patch by another patch needs at least two patches per image")
    k = num_corrupted(num_patches, rate)
    # The k smallest of n uniform draws are a uniformly random k-subset.
    positions = draws.uniform(num_patches).argsort(dim=1)[:, :k]
    choice = draws.uniform(k)
    replacement = torch.full_like(positions, UNCHANGED)
    replacement = replacement.masked_fill(choice < mask_fraction + random_fraction, RANDOM)
    replacement = replacement.masked_fill(choice < mask_fraction, MASK)
    # An offset in [1, n) from the patch itself: uniform over the other n - 1 patches, never itself.
    offsets = 1 + (draws.uniform(k) * max(num_patches - 1, 1)).long()
    sources = (positions + offsets) % num_patches
    return Corruption(positions=positions, replacement=replacement, sources=sources)


def select_patches(values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(b n ...) values per patch, (b k) positions -> (b k ...) the values at those positions of each image.

    One ``index_select`` on the batch flattened to rows, faster forward and backward (``index_add``) than
    ``gather`` (docs/measured.md has the timings).
    """
    b, n = values.shape[:2]
    rows = positions + n * torch.arange(b, device=positions.device).unsqueeze(1)
    return values.flatten(0, 1).index_select(0, rows.flatten()).view(*positions.shape, *values.shape[2:])


def corrupt_patch_embeddings(
    embeddings: torch.Tensor, mask_embedding: torch.Tensor, corruption: Corruption
) -> torch.Tensor:
    """Apply ``corruption`` to patch embeddings (b n d); the mask embedding is (d,). Returns a new tensor.

    Each output row is one ``index_select`` from the batch's rows: its own, or another patch's of its image; then
    one ``where`` puts the mask in: faster forward and backward than two gathers, two selects and a scatter
    (docs/measured.md has the timings). The mask enters by ``where``, not as one more row
    to select: its gradient is then a reduction. Summed by ``index_add`` from many rows, compiled code added it in a
    varying order, and a resumed compiled run no longer repeated an uninterrupted one bit for bit.
    """
    b, n, d = embeddings.shape
    first_row = n * torch.arange(b, device=embeddings.device).unsqueeze(1)  # (b 1)
    kind = corruption.replacement
    source = torch.where(kind == RANDOM, corruption.sources, corruption.positions) + first_row
    rows = (torch.arange(n, device=embeddings.device) + first_row).scatter(1, corruption.positions, source)
    masked = torch.zeros_like(rows, dtype=torch.bool).scatter(1, corruption.positions, kind == MASK)
    copied = embeddings.flatten(0, 1).index_select(0, rows.flatten()).view(b, n, d)
    return torch.where(masked.unsqueeze(-1), mask_embedding.to(embeddings.dtype), copied)
