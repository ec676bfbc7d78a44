from __future__ import annotations

import pytest
import torch

from mpp.data.shapes import (AREA_RANGE, COPIES, MAX_STRETCH, MAX_TURN, REACH, SHAPE_NAMES, UNIT_AREAS, WAVES,
                             ShapeParams, ShapesSource, copy_masks, render_shapes)

CLASSES = len(SHAPE_NAMES)


def test_images_are_a_pure_function_of_seed_split_and_index():
    train, again = ShapesSource("train", 24), ShapesSource("train", 24)
    index = torch.tensor([5, 0, 17])
    assert torch.equal(train.images(index), torch.cat([again.images(index[i:i + 1]) for i in range(3)]))
    assert train.labels[index].tolist() == [5, 0, 7]
    first = torch.tensor([0])
    assert not torch.equal(train.images(first), ShapesSource("test", 24).images(first))
    assert not torch.equal(train.images(first), ShapesSource("train", 24, seed=1).images(first))


def test_images_are_rgb_in_the_unit_range_with_ten_balanced_classes():
    source = ShapesSource("test", 32)
    images = source.images(torch.arange(64))
    assert images.shape == (64, 3, 32, 32) and images.min() >= 0 and images.max() <= 1
    assert CLASSES == 10 and len(source) == 10_000 and torch.bincount(source.labels).tolist() == [1000] * 10
    assert images.std(dim=(2, 3)).mean() > 0.05  # not flat: shapes against a textured background


def centred(radius: float, turn: float = 0.0, stretch: float = 1.0) -> ShapeParams:
    """One copy of a shape at the image's centre, white on a black background."""
    waves = torch.zeros(1, 3, WAVES)
    return ShapeParams(centre=torch.tensor([[[0.5, 0.5]]]), radius=torch.tensor([[radius]]),
                       stretch=torch.tensor([[stretch]]), turn=torch.tensor([[turn]]),
                       colour=torch.tensor([[1.0, 1.0, 1.0]]), background=torch.zeros(1, 2, 3),
                       wave_angle=waves, wave_frequency=waves, wave_phase=waves)


def shape_mask(label: int, params: ShapeParams, size: int) -> torch.Tensor:
    """(h w) bool: where the shape of class ``label`` is drawn (white on black, no noise)."""
    return render_shapes(torch.tensor([label]), params, size, torch.zeros(1, 3, size, size))[0, 0] > 0.5


@pytest.mark.parametrize(("shape", "unit_area"), [("circle", torch.pi / 4), ("square", 0.64), ("diamond", 0.5),
                                                  ("ring", torch.pi / 4 * (1 - 0.6**2)), ("frame", 0.85**2 - 0.5**2)])
def test_each_shape_covers_its_unit_area_of_its_square(shape, unit_area):
    label = SHAPE_NAMES.index(shape)
    assert UNIT_AREAS[label].item() == pytest.approx(unit_area, rel=0.01)
    covered = shape_mask(label, centred(0.3), 256).float().mean().item()
    assert covered == pytest.approx(unit_area * 0.6**2, rel=0.03)  # the shape's square has side 2 x 0.3


def test_every_shape_draws_differently_at_every_turn_and_stretch():
    # A square turned by 45 degrees is a diamond: the turns allowed must keep the classes apart.
    poses = [(turn, stretch) for turn in torch.linspace(-MAX_TURN, MAX_TURN, 7).tolist()
             for stretch in (1 / MAX_STRETCH, 1.0, MAX_STRETCH)]
    masks = torch.stack([torch.stack([shape_mask(label, centred(0.3, turn, stretch), 64) for turn, stretch in poses])
                         for label in range(CLASSES)])  # (classes poses h w)
    for i in range(CLASSES):
        for j in range(i + 1, CLASSES):
            closest = (masks[i, :, None] ^ masks[j, None, :]).float().mean(dim=(2, 3)).min()
            assert closest > 0.03, (SHAPE_NAMES[i], SHAPE_NAMES[j], closest)  # a fifth of a shape, or more


def test_every_class_covers_as_much_of_the_image_with_copies_inside_it_and_apart():
    source = ShapesSource("train", 32)
    params = source.params
    assert params.radius.shape == (len(source), COPIES)
    reach = REACH * params.radius * torch.maximum(params.stretch, 1 / params.stretch)  # (b copies)
    assert ((params.centre - reach[..., None]) >= 0).all() and ((params.centre + reach[..., None]) <= 1).all()
    area = 4 * UNIT_AREAS[source.labels, None] * params.radius**2
    assert area.min() >= AREA_RANGE[0] - 1e-6 and area.max() <= AREA_RANGE[1] + 1e-6
    per_class = torch.stack([area[source.labels == label].mean() for label in range(CLASSES)])
    assert per_class.max() - per_class.min() < 0.002  # the same distribution for every shape (its mean: 0.055)
    # Copies are placed apart by a bound on their reach; most images keep them apart to the pixel.
    masks = copy_masks(source.labels[:2000], params.select(torch.arange(2000)), 32)  # (b copies h w)
    overlap = masks.sum(dim=1) > 1  # (b h w)
    assert overlap.flatten(1).any(dim=1).float().mean() < 0.2
    assert overlap.sum() < 0.01 * masks.any(dim=1).sum()


def ridge_accuracies(features: torch.Tensor, labels: torch.Tensor, fit: slice, evaluations: list[slice]) -> list[float]:
    """A linear classifier (ridge regression onto +-1 one-hot labels, with a bias) fitted on rows ``fit`` of
    ``features``; its accuracy on each evaluation slice of rows."""
    x = torch.cat([features, torch.ones(len(features), 1)], dim=1).double()
    targets = torch.nn.functional.one_hot(labels[fit], CLASSES).double() * 2 - 1
    weights = torch.linalg.solve(x[fit].T @ x[fit] + torch.eye(x.shape[1], dtype=x.dtype), x[fit].T @ targets)
    return [((x[rows] @ weights).argmax(dim=1) == labels[rows]).float().mean().item() for rows in evaluations]


def pixels_of_both_splits(size: int, train_images: int, test_images: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first images of the training split, then the first of the test split: (n 3 h w), (n)."""
    train, test = ShapesSource("train", size), ShapesSource("test", size)
    images = torch.cat([train.images(torch.arange(train_images)), test.images(torch.arange(test_images))])
    return images, torch.cat([train.labels[:train_images], test.labels[:test_images]])


def test_nothing_but_the_shape_tells_the_class_so_held_out_training_images_score_as_test_images():
    # The leak this catches: noise pattern i % 16 for image i, whose label was i % 8, and patterns of each split's
    # own. This probe then scored 99.7% on training images it had not seen and 11% on the test split.
    images, labels = pixels_of_both_splits(16, 5000, 1000)
    holdout, test_accuracy = ridge_accuracies(images.flatten(1), labels, slice(0, 4000),
                                              [slice(4000, 5000), slice(5000, 6000)])
    assert abs(holdout - test_accuracy) < 0.03, (holdout, test_accuracy)
    train, test = ShapesSource("train", 16), ShapesSource("test", 16)
    assert torch.equal(train.noise, test.noise)  # one set of noise patterns, drawn the same way for every split
    pattern_per_class = torch.zeros(CLASSES, train.noise.shape[0])
    pattern_per_class.index_put_((train.labels, train.noise_pattern), torch.ones(len(train)), accumulate=True)
    assert (pattern_per_class > 0).all()  # every class sees every pattern


def colour_histograms(images: torch.Tensor, levels: int = 4) -> torch.Tensor:
    """(n 3 h w) -> (n levels^3): the fraction of each image's pixels in each cell of a levels^3 RGB grid."""
    cells = (images * levels).long().clamp(max=levels - 1)
    index = (cells[:, 0] * levels + cells[:, 1]) * levels + cells[:, 2]  # (n h w)
    counts = torch.zeros(len(images), levels**3).scatter_add_(1, index.flatten(1), torch.ones(index.flatten(1).shape))
    return counts / index[0].numel()


def test_colour_tells_nothing_of_the_class():
    images, labels = pixels_of_both_splits(16, 5000, 1000)
    (test_accuracy,) = ridge_accuracies(colour_histograms(images), labels, slice(0, 5000), [slice(5000, 6000)])
    assert abs(test_accuracy - 1 / CLASSES) < 0.05, test_accuracy
