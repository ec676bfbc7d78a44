from __future__ import annotations

import math

import pytest
import torch

from mpp.data.shapes import SHAPE_NAMES, ShapeParams, ShapesSource, render_shapes


def test_images_are_a_pure_function_of_seed_split_and_index():
    train, again = ShapesSource("train", 24), ShapesSource("train", 24)
    index = torch.tensor([5, 0, 17])
    assert torch.equal(train.images(index), torch.cat([again.images(index[i:i + 1]) for i in range(3)]))
    assert train.labels[index].tolist() == [5, 0, 1]
    first = torch.tensor([0])
    assert not torch.equal(train.images(first), ShapesSource("test", 24).images(first))
    assert not torch.equal(train.images(first), ShapesSource("train", 24, seed=1).images(first))


def test_images_are_rgb_in_the_unit_range_with_balanced_classes():
    source = ShapesSource("test", 32)
    images = source.images(torch.arange(64))
    assert images.shape == (64, 3, 32, 32) and images.min() >= 0 and images.max() <= 1
    assert len(source) == 10_000 and torch.bincount(source.labels).tolist() == [1250] * 8
    assert images.std(dim=(2, 3)).mean() > 0.05  # not flat: shape against a gradient background


def centred(angle: float = 0.0) -> ShapeParams:
    return ShapeParams(
        centre=torch.tensor([[0.5, 0.5]]), radius=torch.tensor([0.3]), angle=torch.tensor([angle]),
        colour=torch.tensor([[1.0, 1.0, 1.0]]), background=torch.zeros(1, 2, 3), gradient_angle=torch.zeros(1),
    )


@pytest.mark.parametrize(
    ("shape", "area"),
    [("circle", math.pi * 0.3**2), ("square", (2 * 0.8 * 0.3) ** 2), ("diamond", 2 * 0.3**2),
     ("ring", math.pi * 0.3**2 * (1 - 0.6**2))],
)
def test_the_class_is_the_shape(shape, area):
    image = render_shapes(torch.tensor([SHAPE_NAMES.index(shape)]), centred(), 128, torch.zeros(1, 3, 128, 128))
    assert (image[0, 0] > 0.5).float().mean().item() == pytest.approx(area, rel=0.03)


def test_every_shape_draws_differently():
    size = 64
    masks = [
        render_shapes(torch.tensor([label]), centred(0.3), size, torch.zeros(1, 3, size, size))[0, 0] > 0.5
        for label in range(len(SHAPE_NAMES))
    ]
    for i in range(len(masks)):
        for j in range(i + 1, len(masks)):
            assert (masks[i] ^ masks[j]).float().mean() > 0.01, (SHAPE_NAMES[i], SHAPE_NAMES[j])
