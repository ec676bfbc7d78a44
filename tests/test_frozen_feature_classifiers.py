"""Classifiers on frozen features: the closed-form few-shot solver and kNN votes."""

from __future__ import annotations

import numpy as np
import torch

from mpp.frozen_feature_classifiers import knn_predictions, ridge_predictions, ridge_regression


def test_the_closed_form_solver_matches_a_reference_least_squares_solution():
    generator = torch.Generator().manual_seed(0)
    features, labels = torch.randn(40, 6, generator=generator), torch.randint(0, 3, (40,), generator=generator)
    l2 = 0.7
    weights = ridge_regression(features, labels, 3, l2).numpy()
    # The same problem as plain least squares: the penalty as extra rows sqrt(l2) * I (bias column unpenalised).
    x = np.hstack([features.double().numpy(), np.ones((40, 1))])
    y = 2 * np.eye(3)[labels.numpy()] - 1
    penalty_rows = np.hstack([np.sqrt(l2) * np.eye(6), np.zeros((6, 1))])
    reference = np.linalg.lstsq(np.vstack([x, penalty_rows]), np.vstack([y, np.zeros((6, 3))]), rcond=None)[0]
    np.testing.assert_allclose(weights, reference, rtol=1e-9, atol=1e-12)


def separable(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Four classes, each a cluster around its own direction in 16 dimensions."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(count) % 4
    centres = torch.eye(16)[:4] * 5
    return centres[labels] + torch.randn(count, 16, generator=generator), labels


def test_both_classifiers_separate_separable_features():
    train_features, train_labels = separable(400, seed=0)
    test_features, test_labels = separable(400, seed=1)
    weights = ridge_regression(train_features, train_labels, 4, l2=1.0)
    assert (ridge_predictions(weights, test_features) == test_labels).float().mean() > 0.98
    assert (knn_predictions(train_features, train_labels, test_features, 4) == test_labels).float().mean() > 0.98


def test_both_classifiers_stay_at_chance_when_labels_say_nothing_about_features():
    generator = torch.Generator().manual_seed(3)
    train_features, test_features = torch.randn(2, 1000, 16, generator=generator)
    train_labels, test_labels = torch.randint(0, 4, (2, 1000), generator=generator)
    weights = ridge_regression(train_features, train_labels, 4, l2=1.0)
    assert abs((ridge_predictions(weights, test_features) == test_labels).float().mean() - 0.25) < 0.06
    knn = knn_predictions(train_features, train_labels, test_features, 4)
    assert abs((knn == test_labels).float().mean() - 0.25) < 0.06
