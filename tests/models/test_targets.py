from __future__ import annotations

import pytest
import torch

from mpp.models.masked_patch_prediction import colour_targets, num_colour_classes, pixel_targets, quantise_colours


def reference_colour_targets(images: torch.Tensor, patch_size: int, cells: int, bits: int) -> torch.Tensor:
    """Patch by patch, cell by cell, channel by channel, in plain Python."""
    batch, channels, height, width = images.shape
    levels, cell = 2**bits, patch_size // cells
    out = []
    for b in range(batch):
        patches = []
        for top in range(0, height, patch_size):
            for left in range(0, width, patch_size):
                classes = []
                for row in range(cells):
                    for col in range(cells):
                        index = 0
                        for c in range(3):
                            channel = c if channels == 3 else 0  # grayscale: the one channel, three times
                            y, x = top + row * cell, left + col * cell
                            mean = images[b, channel, y : y + cell, x : x + cell].mean().item()
                            index = index * levels + min(int(mean * levels), levels - 1)
                        classes.append(index)
                patches.append(classes)
        out.append(patches)
    return torch.tensor(out)


@pytest.mark.parametrize(
    ("channels", "size", "patch_size", "cells", "bits"),
    [(3, 16, 4, 1, 3), (3, 32, 16, 4, 3), (3, 24, 8, 1, 2), (3, 16, 8, 2, 4), (1, 16, 4, 1, 3), (1, 16, 8, 4, 3)],
)
def test_colour_targets_match_a_per_patch_loop(channels, size, patch_size, cells, bits):
    images = torch.rand(3, channels, size, size)
    expected = reference_colour_targets(images, patch_size, cells, bits)
    targets = colour_targets(images, patch_size, cells_per_side=cells, bits=bits)
    assert targets.dtype == torch.long
    assert targets.shape == (3, (size // patch_size) ** 2, cells * cells)
    assert torch.equal(targets, expected)
    assert targets.max() < num_colour_classes(bits)


def test_mean_colour_index_is_r_g_b_in_base_eight():
    # One 4x4 patch per image with known channel means: 0.0 -> 0, 0.5 -> 4, 0.999 -> 7, 1.0 -> 7 (clamped).
    means = torch.tensor([[0.0, 0.5, 0.999], [1.0, 0.126, 0.0], [0.3, 0.3, 0.3]])
    images = means[:, :, None, None].expand(3, 3, 4, 4)
    targets = colour_targets(images, patch_size=4)[:, 0, 0]
    assert targets.tolist() == [0 * 64 + 4 * 8 + 7, 7 * 64 + 1 * 8 + 0, 2 * 64 + 2 * 8 + 2]
    assert num_colour_classes(3) == 512


def test_grayscale_counts_as_rgb_with_equal_channels():
    gray = torch.rand(2, 1, 16, 16)
    assert torch.equal(colour_targets(gray, 4), colour_targets(gray.expand(-1, 3, -1, -1), 4))
    assert torch.equal(pixel_targets(gray, 4), pixel_targets(gray.repeat(1, 3, 1, 1), 4))


def test_pixel_targets_match_a_per_patch_loop():
    images = torch.rand(2, 3, 8, 12)
    targets = pixel_targets(images, patch_size=4)
    assert targets.shape == (2, 6, 4 * 4 * 3)
    for b in range(2):
        for n in range(6):
            top, left = (n // 3) * 4, (n % 3) * 4  # patches row by row, as timm numbers them
            patch = images[b, :, top : top + 4, left : left + 4]  # (c p p)
            assert torch.equal(targets[b, n], patch.permute(1, 2, 0).flatten())


def test_quantisation_and_cells_validate_their_input():
    assert quantise_colours(torch.tensor([[0.2, 0.9, 0.5]]), bits=1).tolist() == [0 * 4 + 1 * 2 + 1]
    with pytest.raises(ValueError, match="not divisible"):
        colour_targets(torch.rand(1, 3, 12, 12), patch_size=6, cells_per_side=4)
    with pytest.raises(ValueError, match="1 or 3 channels"):
        colour_targets(torch.rand(1, 2, 8, 8), patch_size=4)
