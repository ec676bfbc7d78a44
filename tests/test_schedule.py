from __future__ import annotations

import pytest

from mpp.training.schedule import learning_rate


def test_linear_warmup_then_cosine_to_the_final_rate():
    rates = [learning_rate(step, peak=1.0, warmup_steps=10, total_steps=111, final=0.1) for step in range(111)]
    assert rates[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert rates[10] == pytest.approx(1.0)
    assert rates[60] == pytest.approx(0.55)  # decay runs over steps 10..110: half-way, the mean of peak and final
    assert rates[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(rates[10:], rates[11:]))


def test_linear_decay_and_no_warmup():
    rates = [learning_rate(step, 2.0, 0, 5, decay="linear") for step in range(5)]
    assert rates == pytest.approx([2.0, 1.5, 1.0, 0.5, 0.0])


def test_warmup_longer_than_the_run_never_reaches_the_peak():
    assert learning_rate(4, 1.0, warmup_steps=10, total_steps=5) == pytest.approx(0.5)
