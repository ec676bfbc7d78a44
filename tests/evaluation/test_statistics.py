"""The paired-difference statistics of the reproduction tables (mpp/evaluation/statistics.py), against reference
computations: the t distribution's closed forms for 1 and 2 degrees of freedom, its tabulated 97.5% points, and a
paired interval worked by hand."""

from __future__ import annotations

import math

import pytest

from mpp.evaluation.statistics import (
    describe_difference,
    holm_adjusted,
    paired_difference,
    paired_t_power,
    regularised_incomplete_beta,
    seeds_for_power,
    student_t_quantile,
    student_t_two_sided_p,
)


@pytest.mark.parametrize("t", [0.1, 0.7, 1.964, 4.0, 30.0])
def test_the_t_p_value_matches_the_closed_forms_for_one_and_two_degrees_of_freedom(t):
    assert student_t_two_sided_p(t, 1) == pytest.approx(1 - 2 * math.atan(t) / math.pi, rel=1e-10)  # Cauchy
    assert student_t_two_sided_p(t, 2) == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-10)


def test_the_incomplete_beta_matches_its_closed_forms():
    for x in (0.05, 0.3, 0.5, 0.8, 0.99):
        assert regularised_incomplete_beta(x, 1, 1) == pytest.approx(x, rel=1e-12)  # uniform
        assert regularised_incomplete_beta(x, 2, 3) == pytest.approx(6 * x**2 - 8 * x**3 + 3 * x**4, rel=1e-10)
        assert regularised_incomplete_beta(x, 0.5, 0.5) == pytest.approx(2 / math.pi * math.asin(math.sqrt(x)),
                                                                        rel=1e-10)  # arcsine


@pytest.mark.parametrize("df, expected", [(1, 12.7062047), (2, 4.3026527), (4, 2.7764451), (9, 2.2621572),
                                          (29, 2.0452296), (10**6, 1.9599664)])
def test_the_975_percent_point_is_the_tabulated_one(df, expected):
    assert student_t_quantile(0.975, df) == pytest.approx(expected, abs=1e-6)


def test_a_paired_difference_worked_by_hand():
    # Differences 1, 2, 6 points: mean 3, sd sqrt(7), standard error sqrt(7/3), t = 3 / sqrt(7/3), 2 degrees of freedom.
    better, worse = [0.51, 0.62, 0.76], [0.50, 0.60, 0.70]
    difference = paired_difference(better, worse, scale=100)
    se = math.sqrt(7 / 3)
    assert difference.mean == pytest.approx(3) and difference.sd == pytest.approx(math.sqrt(7)) and difference.n == 3
    assert difference.low == pytest.approx(3 - 4.3026527 * se, abs=1e-5)
    assert difference.high == pytest.approx(3 + 4.3026527 * se, abs=1e-5)
    t = 3 / se
    assert difference.p_value == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-9)
    assert not difference.shown  # [-3.6, +9.6]
    # A new experiment planned for this mean and SD: power 0.8 at 5% two-sided (seeds_for_power, tested below).
    assert difference.planned_seeds() == seeds_for_power(3, math.sqrt(7)) == 9
    assert describe_difference(difference) == ("+3.0 [-3.6, +9.6], not shown (p 0.19; power 0.8 needs 9 seeds at this "
                                               "mean and SD)")


def test_a_difference_whose_interval_excludes_zero_is_shown_whichever_its_sign():
    up = paired_difference([0.60, 0.62, 0.61, 0.63, 0.60], [0.50, 0.51, 0.50, 0.52, 0.51], scale=100)
    assert up.shown and up.low > 0 and up.p_value < 1e-4
    assert describe_difference(up).startswith("+10.4 [+9.") and ", shown (p " in describe_difference(up)
    down = paired_difference([0.50, 0.51, 0.50, 0.52, 0.51], [0.60, 0.62, 0.61, 0.63, 0.60], scale=100)
    assert down.shown and down.high < 0 and down.p_value == pytest.approx(up.p_value)
    assert ", the opposite shown (p " in describe_difference(down, claimed=True)
    assert ", shown (p " in describe_difference(down) and "opposite" not in describe_difference(up, claimed=True)


def test_one_seed_or_no_spread_has_no_interval_to_read():
    assert describe_difference(paired_difference([0.6], [0.5], scale=100)) == "+10.0, one seed: no interval"
    same = paired_difference([0.6, 0.7], [0.5, 0.6], scale=100)  # +10 both times, to float rounding (1e-14)
    assert not same.shown and same.p_value is None and same.sd == 0  # no t-test: left out of a Holm family too
    assert same.planned_seeds() is None  # no spread to plan with
    assert describe_difference(same) == "+10.0 on every seed: no spread, no t-test"
    assert holm_adjusted([same.p_value, 0.01]) == [None, 0.01]
    unchanged = paired_difference([0.7, 0.7], [0.7, 0.7])
    assert describe_difference(unchanged) == "+0.0 on every seed: no difference, no interval"
    tiny = paired_difference([0.5001, 0.6], [0.5, 0.6001], scale=100)  # a mean of 0 against an SD of 0.014
    assert tiny.planned_seeds() is None and "needs more than 1000 seeds" in describe_difference(tiny)
    with pytest.raises(ValueError, match="as many values"):
        paired_difference([0.5, 0.6], [0.5])


def test_holm_adjusts_each_p_value_by_its_rank_and_keeps_the_order_monotone():
    # Worked by hand: sorted 0.01, 0.02, 0.03, 0.04 of m = 4 give 0.04, 0.06, 0.06 (kept from the one before: 0.06 >
    # 2 x 0.03 = 0.06), 0.06 (kept: 0.06 > 1 x 0.04); the list comes back in its own order, None left out of m.
    assert holm_adjusted([0.03, None, 0.01, 0.04, 0.02]) == pytest.approx([0.06, None, 0.04, 0.06, 0.06])
    assert holm_adjusted([0.5, 0.9]) == [1.0, 1.0]  # capped at 1
    assert holm_adjusted([0.001]) == [0.001]  # a family of one is not adjusted


def test_the_paired_t_tests_power_is_the_tabulated_one():
    """G*Power's one-sample t-test, two-sided at 5%: effect sizes 0.5 and 1 need 34 and 10 seeds for a power of 0.8,
    reaching 0.8078 and 0.8031."""
    assert paired_t_power(0.5, 1.0, 34) == pytest.approx(0.8078, abs=5e-4)
    assert paired_t_power(1.0, 1.0, 10) == pytest.approx(0.8031, abs=5e-4)
    assert seeds_for_power(0.5, 1.0) == 34 and seeds_for_power(1.0, 1.0) == 10
    assert paired_t_power(0.0, 1.0, 10) == pytest.approx(0.05, abs=1e-4)  # no effect: the test's level
    assert paired_t_power(1.0, 1.0, 10, alpha=0.01) < paired_t_power(1.0, 1.0, 10)  # a stricter level costs power
    assert seeds_for_power(0.01, 1.0) is None  # beyond MOST_SEEDS


def test_three_seeds_at_the_low_label_spread_rarely_find_the_papers_gain():
    """+2 points at a paired SD of 3.4 (the low-label protocol's): about 0.10 with 3 seeds; at 0.85 (all labels),
    about 0.97 with 5."""
    assert paired_t_power(2.0, 3.4, 3) == pytest.approx(0.097, abs=5e-3)
    assert paired_t_power(2.0, 0.85, 5) == pytest.approx(0.969, abs=5e-3)
