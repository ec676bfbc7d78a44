"""What a classifier's training view adds per image (augment.auto_augment, augment.random_erasing): each image's
draws come from its own key, so a view is the same in any batch, worker or resumed run, and nothing else's draws
change."""

from __future__ import annotations

import pytest
import torch

from mpp.config.data import DataConfig
from mpp.config.training import AugmentConfig
from mpp.data.augmentation import image_augmentation
from mpp.data.loading import build_dataset
from mpp.errors import ConfigError
from mpp.images import keys_of

MEAN, STD = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)


def views(batch: int, seed: int = 0, channels: int = 3) -> torch.Tensor:
    return torch.randint(0, 256, (batch, channels, 16, 16), generator=torch.Generator().manual_seed(seed),
                         dtype=torch.uint8)


@pytest.mark.parametrize("settings", [dict(auto_augment="randaugment"), dict(auto_augment="trivialaugment"),
                                      dict(random_erasing=0.5), dict(auto_augment="randaugment", random_erasing=0.25)])
def test_each_images_augmentation_is_its_own_whatever_the_batch_and_leaves_other_draws_alone(settings):
    augmentation = image_augmentation(AugmentConfig(**settings), MEAN, STD)
    images, keys = views(8), keys_of(3, 0, torch.arange(8))
    torch.manual_seed(1)
    whole = augmentation(images, keys)
    after = torch.rand(1)
    torch.manual_seed(1)
    assert torch.equal(after, torch.rand(1))  # the generator as it was
    order = torch.tensor([5, 2, 7, 0])
    assert torch.equal(augmentation(images[order], keys[order]), whole[order])  # another batch, the same views
    assert torch.equal(augmentation(images[:1], keys[:1]), whole[:1])
    again = augmentation(images, keys_of(3, 1, torch.arange(8)))  # the next epoch draws afresh
    assert not torch.equal(again, whole)
    assert not torch.equal(whole, images.float() / 255)


def test_randaugment_changes_most_images_more_at_a_larger_magnitude_and_keeps_uint8():
    images, keys = views(64), keys_of(0, 0, torch.arange(64))
    change = {}
    for magnitude in (2, 9):
        augmentation = image_augmentation(AugmentConfig(auto_augment="randaugment", randaugment_magnitude=magnitude),
                                          MEAN, STD)
        augmented = augmentation(images, keys)
        assert augmented.dtype == torch.uint8 and augmented.shape == images.shape
        assert (augmented != images).flatten(1).any(dim=1).float().mean() > 0.6  # two operations each: most change
        change[magnitude] = (augmented.float() - images.float()).abs().mean()
    assert change[9] > 1.3 * change[2]  # (operations without a magnitude, equalize or auto-contrast, change both)


def test_float_views_are_augmented_as_float_and_grey_ones_as_grey():
    augmentation = image_augmentation(AugmentConfig(auto_augment="randaugment"), (0.3,), (0.3,))
    grey = views(6, channels=1)
    augmented = augmentation(grey.float() / 255, keys_of(0, 0, torch.arange(6)))
    assert augmented.dtype == torch.float32 and augmented.shape == (6, 1, 16, 16)
    assert augmented.min() >= 0 and augmented.max() <= 1


def test_random_erasing_fills_a_box_of_the_asked_area_with_noise_of_the_normalised_input():
    augmentation = image_augmentation(AugmentConfig(random_erasing=1.0), MEAN, STD)
    images = torch.full((200, 3, 64, 64), 128, dtype=torch.uint8)  # one grey level: anything else was erased
    erased = augmentation(images, keys_of(0, 0, torch.arange(200)))
    assert erased.dtype == torch.float32
    box = (erased != 128 / 255).any(dim=1)  # (b h w)
    share = box.flatten(1).float().mean(dim=1)
    assert (share > 0.015).all() and (share < 0.34).all() and share.std() > 0.03  # torchvision's 2% to 33%
    normalised = (erased - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]
    noise = normalised.permute(1, 0, 2, 3)[:, box]  # (c pixels in boxes)
    assert abs(noise.mean()) < 0.05 and abs(noise.std() - 1) < 0.05  # DeiT's: N(0, 1) once normalised
    rows = box.any(dim=2).sum(dim=1)
    columns = box.any(dim=1).sum(dim=1)
    assert torch.equal(rows * columns, box.flatten(1).sum(dim=1))  # a rectangle


def test_erasing_at_probability_one_half_erases_about_half_the_images():
    augmentation = image_augmentation(AugmentConfig(random_erasing=0.5), MEAN, STD)
    erased = augmentation(torch.full((400, 3, 32, 32), 0.5), keys_of(0, 0, torch.arange(400)))
    share = (erased != 0.5).flatten(1).any(dim=1).float().mean()
    assert 0.42 < share < 0.58


def test_nothing_asked_is_no_augmentation_and_settings_out_of_range_are_refused_by_name():
    assert image_augmentation(AugmentConfig(), MEAN, STD) is None
    with pytest.raises(ConfigError, match=r"augment.randaugment_magnitude=12 lie in \[0, 10\]"):
        AugmentConfig(auto_augment="randaugment", randaugment_magnitude=12)
    with pytest.raises(ConfigError, match=r"augment.random_erasing=1.5 must lie in \[0, 1\]"):
        AugmentConfig(random_erasing=1.5)
    with pytest.raises(ConfigError, match="augment.mixup_alpha=-1"):
        AugmentConfig(mixup_alpha=-1)


def test_a_training_set_with_augmentation_gives_each_image_its_view_in_any_batch_and_says_what_it_adds():
    augmentation = image_augmentation(AugmentConfig(auto_augment="randaugment", random_erasing=0.25), MEAN, STD)
    dataset = build_dataset(DataConfig(source="shapes"), "train", 32, 3, augment=True, seed=4, per_image=augmentation)
    batch = [(2, position) for position in range(6)]  # (epoch, position), as a training run samples them
    images, labels, keys = dataset.__getitems__(batch)
    again, _, _ = dataset.__getitems__(batch[3:] + batch[:3])
    assert torch.equal(again, torch.cat([images[3:], images[:3]]))
    plain = build_dataset(DataConfig(source="shapes"), "train", 32, 3, augment=True, seed=4)
    assert not torch.equal(plain.__getitems__(batch)[0], images)
    assert "then RandAugment (2 operations at magnitude 9 of 10), random erasing 0.25" in dataset.description
    with pytest.raises(ValueError, match="evaluation view"):
        build_dataset(DataConfig(source="shapes"), "test", 32, 3, augment=False, per_image=augmentation)
