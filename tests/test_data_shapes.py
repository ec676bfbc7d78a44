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


def ridge_accuracies(train: ShapesSource, fit: torch.Tensor, evaluations: list[tuple[ShapesSource, torch.Tensor]]):
    """A linear classifier on raw pixels (ridge regression onto +-1 one-hot labels) fitted on ``fit``; its accuracy
    on each evaluation slice."""
    def features(source: ShapesSource, index: torch.Tensor) -> torch.Tensor:
        pixels = source.images(index).flatten(1)
        return torch.cat([pixels, torch.ones(len(pixels), 1)], dim=1)  # with a bias

    x = features(train, fit)
    targets = torch.nn.functional.one_hot(train.labels[fit], len(SHAPE_NAMES)).float() * 2 - 1
    weights = torch.linalg.solve(x.T @ x + torch.eye(x.shape[1]), x.T @ targets)
    return [((features(source, index) @ weights).argmax(dim=1) == source.labels[index]).float().mean().item()
            for source, index in evaluations]


def test_nothing_but_the_shape_tells_the_class_so_held_out_training_images_score_as_test_images():
    # The leak this catches: noise pattern i % 16 for image i, whose label is i % 8, and patterns of each split's
    # own. This probe then scored 99.7% on training images it had not seen and 11% on the test split.
    train, test = ShapesSource("train", 16), ShapesSource("test", 16)
    holdout, test_accuracy = ridge_accuracies(train, torch.arange(4000),
                                              [(train, torch.arange(4000, 5000)), (test, torch.arange(1000))])
    assert abs(holdout - test_accuracy) < 0.05, (holdout, test_accuracy)
    assert torch.equal(train.noise, test.noise)  # one set of noise patterns, drawn the same way for every split
    pattern_per_class = torch.zeros(len(SHAPE_NAMES), train.noise.shape[0])
    pattern_per_class.index_put_((train.labels, train.noise_pattern), torch.ones(len(train)), accumulate=True)
    assert (pattern_per_class > 0).all()  # every class sees every pattern
