"""The pre-training reports fit the data they are given: a small folder shrinks the few-shot slices and trains on."""

from __future__ import annotations

import logging

import pytest

from mpp.config.data import DataConfig
from mpp.config.training import MonitorConfig, MPPMonitorConfig
from mpp.data.loading import build_dataset
from mpp.recipes.pretraining_run import monitor_fitted_to_classes

ASKED = MPPMonitorConfig(few_shot_every=5, final_few_shot_draws=2, mosaic_every=5)  # 10 + 10 + 50 per class


def images_per_class(count: int):
    return build_dataset(DataConfig(shots_per_class=count), "train", 8, channels=3, augment=False)


def warnings_of(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]


def test_enough_images_change_nothing_and_say_nothing(caplog):
    with caplog.at_level(logging.WARNING):
        assert monitor_fitted_to_classes(ASKED, images_per_class(70)) == ASKED
        # No few-shot monitor asked:
        assert monitor_fitted_to_classes(MonitorConfig(), images_per_class(3)) == MonitorConfig()
    assert not warnings_of(caplog)


@pytest.mark.parametrize("count, fitted", [(69, (10, 9, 50)), (12, (10, 1, 1)), (3, (1, 1, 1))])
def test_fewer_images_shrink_the_slices_to_the_smallest_class_with_one_warning(caplog, count, fitted):
    with caplog.at_level(logging.WARNING):
        cfg = monitor_fitted_to_classes(ASKED, images_per_class(count))
    assert (cfg.few_shot_shots, cfg.few_shot_holdout_per_class, cfg.few_shot_test_per_class) == fitted
    assert sum(fitted) == count and cfg.few_shot_every == 5 and cfg.final_few_shot_draws == 2
    (warning,) = warnings_of(caplog)
    assert f"class 0 (circle), has {count} images, fewer than the 70 per class" in warning
    assert monitor_fitted_to_classes(cfg, images_per_class(count)) == cfg  # fitted once: the second call finds it fits


def test_too_few_for_one_shot_turn_the_few_shot_reports_off_and_keep_the_mosaic(caplog):
    with caplog.at_level(logging.WARNING):
        cfg = monitor_fitted_to_classes(ASKED, images_per_class(2))
    assert (cfg.few_shot_every, cfg.final_few_shot_draws, cfg.mosaic_every) == (0, 0, 5)
    (warning,) = warnings_of(caplog)
    assert warning.endswith("; the few-shot monitor is off")
