"""Classifiers on frozen features: the closed-form few-shot solver, kNN votes, the linear probe, and the few-shot
protocol around the solver."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mpp.config.evaluation import FewShotConfig, LinearProbeConfig
from mpp.data.loading import disjoint_per_class
from mpp.evaluation import logistic_regression
from mpp.evaluation.few_shot_regression import few_shot_evaluation, ridge_scores
from mpp.evaluation.frozen_feature_classifiers import accuracy, knn_predictions, ridge_predictions, ridge_regressions
from mpp.evaluation.logistic_regression import linear_probe_evaluation


def least_squares_reference(features: torch.Tensor, labels: torch.Tensor, num_classes: int, l2: float) -> np.ndarray:
    """The ridge problem as plain least squares: the penalty as extra rows sqrt(l2) * I, the bias column unpenalised."""
    n, d = features.shape
    x = np.hstack([features.double().numpy(), np.ones((n, 1))])
    y = 2 * np.eye(num_classes)[labels.numpy()] - 1
    penalty_rows = np.hstack([np.sqrt(l2) * np.eye(d), np.zeros((d, 1))])
    return np.linalg.lstsq(np.vstack([x, penalty_rows]), np.vstack([y, np.zeros((d, num_classes))]), rcond=None)[0]


@pytest.mark.parametrize("count, dimension", [(40, 6), (12, 50)], ids=["more-images-than-features", "fewer"])
def test_the_closed_form_solver_matches_a_reference_least_squares_solution_at_every_penalty(count, dimension):
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(count, dimension, generator=generator) + 3  # off-centre: the bias matters
    labels = torch.randint(0, 3, (count,), generator=generator)
    grid = [1e-3, 0.7, 1e3]
    for l2, weights in zip(grid, ridge_regressions(features, labels, 3, grid), strict=True):
        np.testing.assert_allclose(weights.numpy(), least_squares_reference(features, labels, 3, l2), rtol=1e-8,
                                   atol=1e-10)


def separable(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Four classes, each a cluster around its own direction in 16 dimensions."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(count) % 4
    centres = torch.eye(16)[:4] * 5
    return centres[labels] + torch.randn(count, 16, generator=generator), labels


def test_both_classifiers_separate_separable_features():
    train_features, train_labels = separable(400, seed=0)
    test_features, test_labels = separable(400, seed=1)
    weights = ridge_regressions(train_features, train_labels, 4, [1.0])[0]
    assert (ridge_predictions(weights, test_features) == test_labels).float().mean() > 0.98
    assert (knn_predictions(train_features, train_labels, test_features, 4) == test_labels).float().mean() > 0.98


def test_both_classifiers_stay_at_chance_when_labels_say_nothing_about_features():
    generator = torch.Generator().manual_seed(3)
    train_features, test_features = torch.randn(2, 1000, 16, generator=generator)
    train_labels, test_labels = torch.randint(0, 4, (2, 1000), generator=generator)
    weights = ridge_regressions(train_features, train_labels, 4, [1.0])[0]
    assert abs((ridge_predictions(weights, test_features) == test_labels).float().mean() - 0.25) < 0.06
    knn = knn_predictions(train_features, train_labels, test_features, 4)
    assert abs((knn == test_labels).float().mean() - 0.25) < 0.06


def test_knn_in_chunks_predicts_what_knn_in_one_piece_does():
    train_features, train_labels = separable(300, seed=0)
    test_features = torch.randn(50, 16, generator=torch.Generator().manual_seed(5)) * 3
    whole = knn_predictions(train_features, train_labels, test_features, 4, chunk_size=1000)
    assert torch.equal(knn_predictions(train_features, train_labels, test_features, 4, chunk_size=7), whole)


def test_the_linear_probe_separates_separable_features_and_stays_at_chance_on_random_labels():
    cfg = LinearProbeConfig(l2_grid=(0.0, 1e-2))
    result = linear_probe_evaluation(separable(400, seed=0), separable(400, seed=1), 4, cfg, seed=0)
    assert result["test_accuracy"] > 0.98 and result["test_balanced_accuracy"] > 0.98
    assert len(result["test_per_class_accuracy"]) == 4 and min(result["test_per_class_accuracy"]) > 0.9
    assert set(result["holdout_accuracy"]) == {"0", "0.01"} and result["chosen_l2"] in cfg.l2_grid

    generator = torch.Generator().manual_seed(3)
    features = torch.randn(2, 1000, 16, generator=generator)
    labels = torch.randint(0, 4, (2, 1000), generator=generator)
    result = linear_probe_evaluation((features[0], labels[0]), (features[1], labels[1]), 4, cfg, seed=0)
    assert abs(result["test_accuracy"] - 0.25) < 0.06


def test_a_small_probe_fits_on_one_thread_and_gives_the_process_its_threads_back(monkeypatch):
    fitted_on = []
    fit = logistic_regression.train_linear_probe
    monkeypatch.setattr(logistic_regression, "train_linear_probe",
                        lambda *args: fitted_on.append(torch.get_num_threads()) or fit(*args))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        linear_probe_evaluation(separable(40, seed=0), separable(40, seed=1), 4, LinearProbeConfig(l2_grid=(0.0, 1e-3)),
                                seed=0)
        assert fitted_on == [1, 1, 1] and torch.get_num_threads() == 2  # the grid's two fits and the final one
        monkeypatch.setattr(logistic_regression, "ONE_THREAD_BELOW", 10)  # a large fit keeps every thread
        fitted_on.clear()
        linear_probe_evaluation(separable(40, seed=0), separable(40, seed=1), 4, LinearProbeConfig(l2_grid=(0.0,)),
                                seed=0)
        assert fitted_on == [2, 2]
    finally:
        torch.set_num_threads(before)


def test_the_penalty_is_the_one_best_on_the_holdout_slice():
    train, holdout, test = separable(12, seed=0), separable(200, seed=1), separable(200, seed=2)
    noisy = (holdout[0] + 6 * torch.randn(200, 16, generator=torch.Generator().manual_seed(4)), holdout[1])
    grid = [1e-3, 1.0, 1e3]
    scores, chosen = ridge_scores(train, noisy, test, 4, grid)
    score = scores["accuracy"]
    on_holdout = [accuracy(ridge_predictions(ridge_regressions(*train, 4, [l2])[0], noisy[0]), noisy[1]) for l2 in grid]
    assert chosen == grid[on_holdout.index(max(on_holdout))]
    assert score == accuracy(ridge_predictions(ridge_regressions(*train, 4, [chosen])[0], test[0]), test[1])


def test_disjoint_per_class_slices_share_no_image_and_hold_the_counts_asked_for():
    labels = torch.arange(300) % 3
    slices = disjoint_per_class(labels, [2, 5, 10], seed=0, asked_by="test")
    for count, positions in zip([2, 5, 10], slices, strict=True):
        assert torch.equal(torch.bincount(labels[positions], minlength=3), torch.full((3,), count))
    assert len(torch.cat(slices).unique()) == 51
    again = disjoint_per_class(labels, [2, 5, 10], 0, "test")
    assert all(torch.equal(a, b) for a, b in zip(slices, again, strict=True))


def test_few_shot_draws_shots_apart_from_the_holdout_slice_and_reports_every_seed():
    train_features, train_labels = separable(400, seed=0)
    requested = []

    def features_of(positions):
        requested.append(positions)
        return train_features[positions], train_labels[positions]

    cfg = FewShotConfig(shots=(1, 5), seeds=3, holdout_per_class=4)
    results = few_shot_evaluation(features_of, train_labels, separable(200, seed=1), 4, cfg, seed=0)
    assert set(results) == {"1", "5"}
    for result in results.values():
        assert len(result["per_seed"]) == len(result["chosen_l2"]) == 3
        assert result["mean"] > 0.95 and result["std"] == np.std(result["per_seed"], ddof=1)
        assert result["balanced_mean"] > 0.95 and len(result["balanced_per_seed"]) == 3
    # One extraction, of at most (4 hold-out + 5 shots) x 4 classes x 3 seeds images, all distinct.
    assert len(requested) == 1 and len(requested[0]) <= 108 and len(requested[0].unique()) == len(requested[0])

    random_labels = torch.randint(0, 4, (400,), generator=torch.Generator().manual_seed(1))
    features_of = lambda positions: (train_features[positions], random_labels[positions])  # noqa: E731
    chance = few_shot_evaluation(features_of, random_labels, separable(400, seed=2), 4, cfg, seed=0)
    assert abs(chance["5"]["mean"] - 0.25) < 0.1
