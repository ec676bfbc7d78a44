"""What MPP pre-training buys on your own images, measured over seeds (recipes/compare.py, ``mpp.compare``).

Each seed pre-trains one encoder on the unlabelled images, then reads three arms on the labelled ones: that encoder,
the same encoder at fresh random weights (``init=random:<run>``: its architecture and normalisation, the weights
alone differ) and the raw pixels (no encoder). Fine-tuning reads the two encoders, the linear probe and kNN all three.
Every run is an ordinary run of a recipe with its own directory, so a stopped comparison continues where it stopped.

Per protocol the tables give each arm's mean ± SD over the seeds, the paired differences (the same seed's runs) with
their 95% intervals, a Holm correction across all of them, and the floors: always answering the largest class of the
test split (accuracy) and chance (balanced accuracy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mpp.evaluation.statistics import paired_difference
from mpp.experiments.config import ComparisonConfig
from mpp.experiments.publishing import (Comparison, comparison_table, copy_to_publish_dir, holm_summary,
                                        markdown_table, percent, publish_table)
from mpp.experiments.runner import Run, at_first_seeds_rate, recipe_command, run_experiment
from mpp.run.directory import read_metrics

ARMS = {"mpp": "MPP pre-trained", "random": "random weights", "pixels": "raw pixels"}
PROTOCOLS = {"finetune": ("Fine-tuned", ("mpp", "random")), "linear_probe": ("Linear probe", tuple(ARMS)),
             "knn": ("kNN", tuple(ARMS))}
MEASURES = {"balanced_accuracy": "balanced accuracy", "accuracy": "accuracy"}
FLOORS = {"balanced_accuracy": "chance_balanced_accuracy", "accuracy": "majority_class_accuracy"}
READ_AGAINST = (("mpp", "random"), ("mpp", "pixels"))  # what pre-training bought; what the encoder adds to pixels


def run_name(protocol: str, arm: str, seed: int) -> str:
    return f"{protocol}/{arm}-seed{seed}"


def plan_runs(cfg: ComparisonConfig, repository: Path) -> list[Run]:
    """Per seed: the MPP run, then each protocol's runs of each of its arms."""
    output_dir = Path(cfg.output_dir)
    presets = {"mpp": cfg.mpp_preset, "finetune": cfg.finetune_preset, "linear_probe": cfg.eval_preset,
               "knn": cfg.eval_preset}
    overrides = {"mpp": cfg.mpp, "finetune": cfg.finetune, "linear_probe": cfg.linear_probe, "knn": cfg.knn}
    runs = []
    for seed in cfg.seeds:
        pretraining = run_name("pretrain", "mpp", seed)
        sources = {"mpp": (f"init={output_dir / pretraining}",),
                   "random": (f"init=random:{output_dir / pretraining}",), "pixels": ("eval.features=pixels",)}
        runs.append(Run(pretraining, "pretrain", recipe_command(
            cfg, repository, "mpp", cfg.mpp_preset, (f"data.source={cfg.unlabelled}", *cfg.data, *cfg.encoder,
                                                     *cfg.mpp), seed, output_dir / pretraining), after=None))
        for protocol, (_, arms) in PROTOCOLS.items():
            for arm in arms:
                name = run_name(protocol, arm, seed)
                # tune_once, with finetune.sweep_lrs: each arm trains at the rate its first seed's sweep chose
                at_rate, waits = (at_first_seeds_rate(cfg, run_name(protocol, arm, cfg.seeds[0]), seed)
                                  if protocol == "finetune" else ((), ()))
                command = recipe_command(cfg, repository, protocol, presets[protocol],
                                         (f"data.source={cfg.labelled}", *cfg.data, *cfg.encoder,
                                          *overrides[protocol], *sources[arm], *at_rate), seed, output_dir / name)
                runs.append(Run(name, protocol, command, after=None if arm == "pixels" else pretraining,
                                also_after=waits))
    return runs


def test_scores(metrics: dict[str, Any], protocol: str) -> dict[str, float]:
    """A run's test accuracy, balanced accuracy and their floors: fine-tuning's at the top of its metrics, an
    evaluation's under its protocol's name."""
    scores = metrics if protocol == "finetune" else metrics[protocol]
    return {key: scores[f"test_{key}"] for key in (*MEASURES, *FLOORS.values())}


def collect_results(cfg: ComparisonConfig) -> dict[str, Any]:
    """{protocol: {arm: {measure: [one per seed]}}}, with the test split's floors (the same images for every run)."""
    output_dir = Path(cfg.output_dir)
    protocols: dict[str, Any] = {}
    for protocol, (_, arms) in PROTOCOLS.items():
        for arm in arms:
            scores = [test_scores(read_metrics(output_dir / run_name(protocol, arm, seed)), protocol)
                      for seed in cfg.seeds]
            protocols.setdefault(protocol, {})[arm] = {key: [score[key] for score in scores] for key in MEASURES}
            protocols[protocol]["floors"] = {key: scores[0][key] for key in FLOORS.values()}
    return {"seeds": list(cfg.seeds), "protocols": protocols}


def comparisons(results: dict[str, Any], measure: str) -> list[Comparison]:
    """Each protocol's paired differences of ``READ_AGAINST`` (in points), read by ``measure``."""
    found = []
    for protocol, (title, arms) in PROTOCOLS.items():
        for better, worse in READ_AGAINST:
            if worse in arms:
                scores = results["protocols"][protocol]
                found.append(Comparison(f"{ARMS[better]} - {ARMS[worse]}", title, measure, paired_difference(
                    scores[better][measure], scores[worse][measure], scale=100)))
    return found


def results_table(results: dict[str, Any]) -> str:
    """Per measure: the arms' mean ± SD in % with the floors, then the paired differences in points."""
    lines = [f"Seeds: {', '.join(map(str, results['seeds']))}; test accuracy in % (mean ± SD over the seeds), paired "
             "differences in points with their 95% intervals.", ""]
    for measure, said in MEASURES.items():
        body = []
        for protocol, (title, arms) in PROTOCOLS.items():
            scores = results["protocols"][protocol]
            body.append([title, *(percent(scores[arm][measure]) if arm in arms else "—" for arm in ARMS),
                         f"{100 * scores['floors'][FLOORS[measure]]:.1f}"])
        floor = "largest class" if measure == "accuracy" else "chance"
        lines += [f"**{said.capitalize()}**", "", *markdown_table(["Protocol", *ARMS.values(), floor], body)]
        found = comparisons(results, measure)
        lines += [*comparison_table("Difference", found, measure), *holm_summary(found)]
    return "\n".join(lines)


def publish(cfg: ComparisonConfig, results: dict[str, Any], folder: Path) -> dict[str, Any]:
    """results.md in ``folder`` beside its results.json, both copied to ``publish_dir`` where set."""
    table = publish_table(cfg, folder, results_table(results), results["runs"], results["wall_seconds"])
    copy_to_publish_dir(cfg, folder, [])
    return {**results, "table": table}


def compare(cfg: ComparisonConfig, repository: Path) -> dict[str, Any]:
    """The whole comparison: every run not yet finished (the recipes of ``repository``), then the tables."""
    if not cfg.tables_only:
        cfg.check_images()
    return run_experiment(cfg, lambda: plan_runs(cfg, repository), lambda: collect_results(cfg),
                          lambda results, folder: publish(cfg, results, folder))
