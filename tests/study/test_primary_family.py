"""The primary family's power plan, read from the published results."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpp.evaluation.statistics import paired_t_power
from study.primary_family import CLAIMS, PROTOCOLS, family_size, power_plan, seeds_per_protocol

ROOT = Path(__file__).resolve().parents[2]


def test_the_family_is_the_four_claims_in_two_protocols_on_two_data_sets():
    assert family_size() == 16 == len(CLAIMS) * len(PROTOCOLS)
    assert [claim.effect for claim in CLAIMS] == [2.0, 4.0, 2.0, 2.0]  # claim 1: the paper's +2%; claim 2: its 4%


def test_each_comparison_gets_the_seeds_that_reach_the_power_at_holms_first_level():
    plan = power_plan(ROOT / "results")
    assert len(plan) == 16 and {entry["level"] for entry in plan} == {0.05 / 16}
    for entry in plan:
        seeds = entry["seeds"]
        assert paired_t_power(entry["effect"], entry["planning_sd"], seeds, entry["level"]) >= 0.8
        assert paired_t_power(entry["effect"], entry["planning_sd"], seeds - 1, entry["level"]) < 0.8
    first = plan[0]  # Fashion-MNIST on all labels, MPP against scratch: its own published paired SD
    assert first["sd_source"] == "its own" and first["planning_sd"] == pytest.approx(0.85, abs=0.01)
    # The all-label experiments run two rows only: the other claims borrow the largest SD published there.
    assert plan[1]["sd_source"] == "the largest published there"
    needed = seeds_per_protocol(plan)
    assert list(needed) == [protocol.name for protocol in PROTOCOLS]
    assert all(needed[entry["protocol"]] >= entry["seeds"] for entry in plan)
