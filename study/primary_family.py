"""The primary family: the paper's four MPP claims, fine-tuned, in the all-label and the low-label protocol, on one
grey and one colour data set (16 comparisons), tested with a Holm correction over them alone; every other comparison
of the experiments is exploratory. Here: the family, and its power plan from the published results.

    python -m study.primary_family [--results results] [--power 0.8]

prints, for each comparison, the effect it must detect, the paired SD it is planned with (read from the published
results.json of the experiment that ran it), and the seeds that give the power asked for at the level Holm's
correction applies first (5% / 16: a plan at that level has at least that power under Holm).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from mpp.evaluation.statistics import paired_t_power, seeds_for_power

FAMILY_LEVEL = 0.05
# The registered pre-training length, in epochs of each data set's own training images, for every pre-trained row:
# the rule of results/preregistration.md read on the clip-art fine-tuned curve (its "What came out").
PRETRAINING_EPOCHS = 100


@dataclass(frozen=True)
class PrimaryClaim:
    """``better`` beats ``worse`` (rows of a reproduction) by ``effect`` points of fine-tuned test accuracy
    (balanced where recorded)."""

    claim: str
    better: str
    worse: str
    effect: float
    effect_source: str


@dataclass(frozen=True)
class Protocol:
    """One data set in one fine-tuning protocol, and the published experiment whose paired spreads plan it."""

    name: str
    experiment: str


CLAIMS = (
    PrimaryClaim("MPP beats training from scratch", "mpp-colour-50", "scratch", 2.0,
                 "the paper's +2% (ViT-B/16, ImageNet)"),
    PrimaryClaim("supervised pre-training beats MPP", "supervised", "mpp-colour-50", 4.0,
                 "the paper's 4% behind supervised"),
    PrimaryClaim("the 3-bit mean colour beats L2 pixel regression", "mpp-colour-50", "mpp-pixels-50", 2.0,
                 "no figure in the paper ('L2 slightly worse'): claim 1's"),
    PrimaryClaim("corrupting 50% beats 15%", "mpp-colour-50", "mpp-colour-15", 2.0,
                 "no figure in the paper ('slightly worse'): claim 1's"),
)
PROTOCOLS = (
    Protocol("grey (Fashion-MNIST), all labels", "reproduce-fashion-mnist-all-labels-cpu"),
    Protocol("grey (Fashion-MNIST), 100 labels per class", "reproduce-fashion-mnist-cpu"),
    Protocol("colour (clip art, 32 px), all labels", "reproduce-openclipart-all-labels-cpu"),
    Protocol("colour (clip art, 32 px), 50 labels per class", "reproduce-openclipart-cpu"),
)


def family_size() -> int:
    return len(CLAIMS) * len(PROTOCOLS)


def paired_sd(rows: dict[str, Any], claim: PrimaryClaim) -> Optional[float]:
    """The SD over seeds of ``better`` - ``worse`` in points of fine-tuned test accuracy (balanced where recorded),
    or None where the experiment lacks either row."""
    if claim.better not in rows or claim.worse not in rows:
        return None
    key = "finetune_balanced_accuracy" if rows[claim.better].get("finetune_balanced_accuracy") else "finetune_accuracy"
    differences = [100 * (b - w) for b, w in zip(rows[claim.better][key], rows[claim.worse][key], strict=True)]
    return statistics.stdev(differences)


def power_plan(results_dir: Path, power: float = 0.8) -> list[dict[str, Any]]:
    """One entry per comparison of the family: the planning SD (the claim's own published paired SD; where its
    experiment lacks the rows, the largest of the other claims' there), its source, and the seeds for ``power``
    at the level Holm's correction applies first, with the power of the seeds published and of the planned seeds
    were the SD 1.5 times larger (an SD from 3 to 5 seeds is itself uncertain)."""
    level = FAMILY_LEVEL / family_size()
    plan = []
    for protocol in PROTOCOLS:
        results = json.loads((results_dir / protocol.experiment / "results.json").read_text())
        own = {claim.claim: paired_sd(results["rows"], claim) for claim in CLAIMS}
        for claim in CLAIMS:
            sd, source = own[claim.claim], "its own"
            if sd is None:
                sd, source = max(value for value in own.values() if value is not None), "the largest published there"
            seeds = seeds_for_power(claim.effect, sd, level, power)
            plan.append({
                "protocol": protocol.name, "experiment": protocol.experiment, "claim": claim.claim,
                "better": claim.better, "worse": claim.worse, "effect": claim.effect, "planning_sd": sd,
                "sd_source": source, "published_seeds": len(results["seeds"]), "level": level,
                "power_at_published_seeds": paired_t_power(claim.effect, sd, max(2, len(results["seeds"])), level),
                "seeds": seeds,
                "power_if_sd_1.5x": paired_t_power(claim.effect, 1.5 * sd, seeds, level) if seeds else None,
            })
    return plan


def plan_table(plan: list[dict[str, Any]], power: float) -> str:
    lines = [f"| Protocol | Claim | Effect, points | Planning paired SD | Power now (seeds) | Seeds for {power:g} | "
             "Power there if the SD is 1.5x |", "|---|---|---:|---|---:|---:|---:|"]
    for entry in plan:
        seeds = entry["seeds"]
        lines.append(
            f"| {entry['protocol']} | {entry['claim']} | +{entry['effect']:g} | {entry['planning_sd']:.2f} "
            f"({entry['sd_source']}) | {entry['power_at_published_seeds']:.2f} ({entry['published_seeds']}) | "
            f"{seeds if seeds else 'more than 1000'} | "
            f"{'—' if entry['power_if_sd_1.5x'] is None else format(entry['power_if_sd_1.5x'], '.2f')} |")
    return "\n".join(lines)


def seeds_per_protocol(plan: list[dict[str, Any]]) -> dict[str, Optional[int]]:
    """Every seed of an experiment runs all its rows, so a protocol needs the most seeds any of its claims needs."""
    needed: dict[str, Optional[int]] = {}
    for entry in plan:
        known = needed.get(entry["protocol"], 0)
        needed[entry["protocol"]] = None if known is None or entry["seeds"] is None else max(known, entry["seeds"])
    return needed


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description="The primary family's power plan, from the published results")
    parser.add_argument("--results", type=Path, default=Path("results"), help="the published results' folder")
    parser.add_argument("--power", type=float, default=0.8)
    args = parser.parse_args(argv)
    plan = power_plan(args.results, args.power)
    print(f"Family: {family_size()} comparisons, Holm at {FAMILY_LEVEL:g}; planned at {plan[0]['level']:.5f} "
          f"(two-sided paired t-test); every pre-trained row pre-trains {PRETRAINING_EPOCHS} epochs of its data set's "
          "training images\n")
    print(plan_table(plan, args.power))
    print("\nSeeds per protocol (every seed runs all its rows):")
    for protocol, seeds in seeds_per_protocol(plan).items():
        print(f"- {protocol}: {seeds if seeds else 'more than 1000'}")


if __name__ == "__main__":
    main()
