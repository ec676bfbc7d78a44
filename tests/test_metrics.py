"""Accuracy, balanced accuracy and per-class accuracy (mpp/metrics.py), on labels where always answering the largest
class scores high plain accuracy."""

from __future__ import annotations

import math

import pytest
import torch

from mpp.metrics import class_hits, class_scores, floors_said, label_floors, majority_class_accuracy, scores_of


def test_always_answering_the_largest_class_scores_its_share_but_one_over_classes_balanced():
    labels = torch.tensor([0] * 8 + [1] * 1 + [2] * 1)
    scores = scores_of(torch.zeros(10, dtype=torch.long), labels, 3)
    assert scores["accuracy"] == pytest.approx(0.8) == majority_class_accuracy(labels)
    assert scores["balanced_accuracy"] == pytest.approx(1 / 3)
    assert scores["per_class_accuracy"] == [1.0, 0.0, 0.0]


def test_hits_summed_over_batches_give_the_scores_of_the_whole_and_unseen_classes_are_left_out():
    predictions, labels = torch.tensor([1, 1, 0, 2, 2, 1]), torch.tensor([1, 0, 0, 2, 1, 1])
    hits = class_hits(predictions[:4], labels[:4], 4) + class_hits(predictions[4:], labels[4:], 4)
    assert torch.equal(hits, class_hits(predictions, labels, 4))
    scores = class_scores(hits, "test_")
    assert scores["test_accuracy"] == pytest.approx(4 / 6)
    assert scores["test_per_class_accuracy"] == [0.5, pytest.approx(2 / 3), 1.0, None]  # class 3: no image
    assert scores["test_balanced_accuracy"] == pytest.approx((0.5 + 2 / 3 + 1.0) / 3)
    assert math.isnan(class_scores(torch.zeros(3, 2, dtype=torch.long))["accuracy"])


def test_every_score_comes_with_its_floors_on_the_same_images_from_hits_or_from_the_labels_alike():
    labels = torch.tensor([0] * 8 + [1] * 1 + [2] * 1)
    scores = scores_of(torch.tensor([1] * 10), labels, 4, "test_")  # class 3 never seen: chance over the 3 seen
    assert scores["test_majority_class_accuracy"] == pytest.approx(0.8) and scores["test_chance_balanced_accuracy"] \
        == pytest.approx(1 / 3)
    assert label_floors(labels, "test_") == {key: scores[key] for key in
                                             ("test_majority_class_accuracy", "test_chance_balanced_accuracy")}
    assert floors_said(scores, "test_") == "floors: the largest class 0.8000 (accuracy), chance 0.3333 (balanced)"
