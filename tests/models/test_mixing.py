"""Mixup and cutmix of a training pass (augment.mixup_alpha, augment.cutmix_alpha): the label mass each image keeps,
cutmix's area, pairs within the pass, the same draw for the same seeded step, and a classifier that mixes only while
it trains."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mpp.config.model import ClassifierConfig
from mpp.config.training import AugmentConfig
from mpp.models.classifier import ImageClassifier
from mpp.models.encoder import create_encoder
from mpp.models.mixing import BatchMixing, batch_mixing

CLASSES = 5


def batch(size: int = 8, side: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.rand(size, 3, side, side, generator=generator), torch.arange(size) % CLASSES


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_mixup_blends_each_image_with_its_mirror_in_the_pass_and_its_label_mass_follows(smoothing):
    mixing = BatchMixing(AugmentConfig(mixup_alpha=0.8), CLASSES, smoothing)
    images, labels = batch()
    for seed in range(5):
        np.random.seed(seed)
        mixed, targets = mixing(images, labels)
        weight = (mixed[0] - images[-1]) / (images[0] - images[-1])  # image 0 is paired with the pass's last
        weight = weight.flatten().median()
        assert torch.allclose(mixed, weight * images + (1 - weight) * images.flip(0), atol=1e-5)
        assert torch.allclose(targets.sum(dim=1), torch.ones(len(labels)))
        own = torch.nn.functional.one_hot(labels, CLASSES).float() * (1 - smoothing) + smoothing / CLASSES
        assert torch.allclose(targets, weight * own + (1 - weight) * own.flip(0), atol=1e-5)


def test_cutmix_pastes_one_box_of_the_partner_and_each_label_keeps_the_share_of_its_own_pixels():
    mixing = BatchMixing(AugmentConfig(cutmix_alpha=1.0), CLASSES, 0.0)
    images, labels = batch(side=32)
    areas = []
    for seed in range(20):
        np.random.seed(seed)
        mixed, targets = mixing(images, labels)
        from_partner = (mixed != images).any(dim=1)[0] & (mixed == images.flip(0)).all(dim=1)[0]  # (h w)
        assert torch.equal(mixed[:, :, ~from_partner], images[:, :, ~from_partner])
        assert torch.equal(mixed[:, :, from_partner], images.flip(0)[:, :, from_partner])
        rows, columns = from_partner.any(dim=1).sum(), from_partner.any(dim=0).sum()
        assert rows * columns == from_partner.sum()  # a box
        own_share = 1 - from_partner.float().mean()
        assert torch.isclose(targets[0, labels[0]] - targets[0, labels[-1]] * (labels[0] == labels[-1]),
                             own_share, atol=1e-5)
        areas.append(float(own_share))
    assert min(areas) < 0.6 and max(areas) > 0.9  # Beta(1, 1): boxes of many sizes


def test_the_same_seeded_step_mixes_the_same_and_another_step_otherwise():
    mixing = BatchMixing(AugmentConfig(mixup_alpha=0.8, cutmix_alpha=1.0), CLASSES, 0.1)
    images, labels = batch()
    np.random.seed(7)
    first = mixing(images, labels)
    np.random.seed(7)  # as the loop seeds each (seed, step, pass, process), so a resumed run draws the same
    again = mixing(images, labels)
    np.random.seed(8)
    other = mixing(images, labels)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[1], other[1])


def test_uint8_images_are_mixed_as_float_in_the_unit_interval():
    mixing = BatchMixing(AugmentConfig(mixup_alpha=1.0), CLASSES, 0.0)
    images, labels = batch()
    np.random.seed(0)
    from_uint8, _ = mixing((images * 255).round().to(torch.uint8), labels)
    assert from_uint8.dtype == torch.float32 and 0 <= from_uint8.min() and from_uint8.max() <= 1


def test_a_classifier_mixes_its_training_passes_only_and_scores_each_image_against_its_own_label(tiny_model_config):
    cfg = AugmentConfig(mixup_alpha=0.8, cutmix_alpha=1.0)
    assert batch_mixing(AugmentConfig(), CLASSES, 0.1) is None
    model = ImageClassifier(create_encoder(tiny_model_config), CLASSES, ClassifierConfig(label_smoothing=0.1),
                            (0.5,) * 3, (0.5,) * 3, batch_mixing(cfg, CLASSES, 0.1))
    images, labels = batch()
    model.eval()
    plain = model(images, labels)
    assert torch.isclose(plain.loss, torch.log(torch.tensor(float(CLASSES))))  # zero head: uniform
    model.train()
    np.random.seed(0)
    mixed_images, targets = model.mixing(images, labels)
    np.random.seed(0)
    output = model(images, labels)
    logits = model.head(model.features(mixed_images, "token"))
    expected = -(targets * logits.log_softmax(dim=-1)).sum(dim=1).mean()  # soft-target cross-entropy
    assert torch.isclose(output.loss, expected)
    assert torch.isclose(output.accuracy, (logits.argmax(dim=-1) == labels).float().mean())
