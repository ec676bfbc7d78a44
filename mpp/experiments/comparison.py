"""What MPP pre-training buys on your own images, measured over seeds (recipes/compare.py, ``mpp.compare``).

Each seed pre-trains one encoder on the unlabelled images and draws its own labelled images (``labelled_per_class``
of each class, and the slice a rate sweep holds out), then reads the arms on them. Fine-tuned with one recipe, each arm
at the rate its own sweep chose: the MPP encoder; the baseline, the same architecture from fresh random weights
trained for as many optimizer steps as MPP's pre-training and fine-tuning together (``scratch``, as the field trains
a ViT from scratch: the preset's regularisers); and those weights trained only as long as MPP's fine-tuning, labelled
so. Frozen (linear probe, kNN): the MPP encoder, its random weights and the raw pixels (no encoder). Every run is an
ordinary run of a recipe with its own directory, so a stopped comparison continues where it stopped.

results.md opens with the verdict: what pre-training bought against scratch, and whether each fine-tuned encoder
clears logistic regression on the raw pixels, the floor an encoder must clear. Per protocol the tables then give each
arm's mean ± SD over the seeds, the paired differences (the same seed's runs) with their 95% intervals, a Holm
correction across all of them (a difference equal on every seed has no t-test and stays out of it), and the floors:
always answering the largest class of the test split (accuracy) and chance (balanced accuracy).
"""

from __future__ import annotations

import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any, Optional

from mpp.errors import ConfigError
from mpp.evaluation.statistics import describe_difference, paired_difference
from mpp.experiments.checks import check_labelled_images, check_run_configs, warn_if_test_images_are_unlabelled_ones
from mpp.experiments.config import ComparisonConfig
from mpp.experiments.publishing import (
    Comparison,
    comparison_table,
    copy_to_publish_dir,
    holm_summary,
    markdown_table,
    percent,
    publish_table,
)
from mpp.experiments.runner import Run, at_first_seeds_rate, recipe_command, run_experiment
from mpp.run import configure_logging, read_metrics
from mpp.training.classifier_training import grid_edge

ARMS = {"mpp": "MPP pre-trained", "scratch": "from scratch", "mpp_paper": "MPP pre-trained, the paper's recipe",
        "scratch_paper": "from scratch, the paper's recipe", "random": "random weights, as briefly",
        "pixels": "raw pixels"}
# Fine-tuning reads the three encoders' arms (with ``paper_recipe``, MPP and scratch again with the paper's recipe);
# the frozen protocols the MPP encoder, random weights and the pixels. The fine-tuned arms are read against the
# pixels' logistic regression (the linear probe's pixels arm).
PROTOCOLS = {"finetune": ("Fine-tuned", ("mpp", "scratch", "random")),
             "linear_probe": ("Linear probe", ("mpp", "random", "pixels")),
             "knn": ("kNN", ("mpp", "random", "pixels"))}
PAPER_ARMS = {"mpp_paper": "mpp", "scratch_paper": "scratch"}  # each arm fine-tuned with the paper's recipe: its twin
MEASURES = {"balanced_accuracy": "balanced accuracy", "accuracy": "accuracy"}
FLOORS = {"balanced_accuracy": "chance_balanced_accuracy", "accuracy": "majority_class_accuracy"}
# What each protocol's tables read: what pre-training bought (against scratch trained as long, the baseline;
# against random weights trained as briefly as MPP's fine-tuning, labelled so), what an encoder adds to the pixels,
# and, with the paper's recipe beside, the same for it and what the regularisers alone change.
READ_AGAINST = {"finetune": (("mpp", "scratch"), ("mpp", "random"), ("mpp", "pixels"), ("scratch", "pixels")),
                "linear_probe": (("mpp", "random"), ("mpp", "pixels")), "knn": (("mpp", "random"), ("mpp", "pixels"))}
PAPER_READ_AGAINST = (("mpp_paper", "scratch_paper"), ("mpp", "mpp_paper"), ("scratch", "scratch_paper"))
PIXELS_FLOOR = "linear_probe"  # the fine-tuned arms' pixels: logistic regression on the raw pixels


def arms_of(protocol: str, paper: bool) -> tuple[str, ...]:
    """The arms ``protocol`` reads; fine-tuning's with the paper's recipe's too where ``paper``."""
    arms = PROTOCOLS[protocol][1]
    return (*arms[:2], *PAPER_ARMS, *arms[2:]) if protocol == "finetune" and paper else arms


def with_paper_recipe(results: dict[str, Any]) -> bool:
    return "mpp_paper" in results["protocols"]["finetune"]


def run_name(protocol: str, arm: str, seed: int) -> str:
    return f"{protocol}/{arm}-seed{seed}"


def labelled_subset(cfg: ComparisonConfig, seed: int) -> tuple[str, ...]:
    """The overrides that give seed ``seed`` its own labelled images: its draw of ``labelled_per_class`` of each
    class (all of them where 0), and of the slice a learning-rate sweep holds out; every labelled run of the seed,
    the pixels' included, reads the same."""
    per_class = (f"data.shots_per_class={cfg.labelled_per_class}",) if cfg.labelled_per_class else ()
    return (*per_class, f"data.subset_seed={seed}")


def plan_runs(cfg: ComparisonConfig) -> list[Run]:
    """Per seed: the MPP run, then each protocol's runs of each of its arms."""
    output_dir = Path(cfg.output_dir)
    presets = {"mpp": cfg.mpp_preset, "finetune": cfg.finetune_preset, "linear_probe": cfg.eval_preset,
               "knn": cfg.eval_preset}
    overrides = {"mpp": cfg.mpp, "finetune": cfg.finetune, "linear_probe": cfg.linear_probe, "knn": cfg.knn}
    runs = []
    for seed in cfg.seeds:
        pretraining = run_name("pretrain", "mpp", seed)
        sources = {"mpp": (f"init={output_dir / pretraining}",),
                   "scratch": (f"init=random:{output_dir / pretraining}", *cfg.scratch),
                   "random": (f"init=random:{output_dir / pretraining}",), "pixels": ("eval.features=pixels",)}
        sources |= {arm: (*sources[twin], *cfg.paper_recipe) for arm, twin in PAPER_ARMS.items()}
        runs.append(Run(pretraining, "pretrain", recipe_command(
            cfg, "pretrain", cfg.mpp_preset, (f"data.source={cfg.unlabelled}", *cfg.data, *cfg.encoder, *cfg.mpp),
            seed, output_dir / pretraining), after=None))
        for protocol in PROTOCOLS:
            for arm in arms_of(protocol, bool(cfg.paper_recipe)):
                name = run_name(protocol, arm, seed)
                # tune_once, with finetune.sweep_lrs: each arm trains at the rate its first seed's sweep chose
                at_rate, waits = (at_first_seeds_rate(cfg, run_name(protocol, arm, cfg.seeds[0]), seed)
                                  if protocol == "finetune" else ((), ()))
                command = recipe_command(cfg, protocol, presets[protocol],
                                         (f"data.source={cfg.labelled}", *cfg.data, *labelled_subset(cfg, seed),
                                          *cfg.encoder, *overrides[protocol], *sources[arm], *at_rate), seed,
                                         output_dir / name)
                runs.append(Run(name, protocol, command, after=None if arm == "pixels" else pretraining,
                                also_after=waits))
    return runs


def test_scores(metrics: dict[str, Any], protocol: str) -> dict[str, float]:
    """A run's test accuracy, balanced accuracy and their floors: fine-tuning's at the top of its metrics, an
    evaluation's under its protocol's name."""
    scores = metrics if protocol == "finetune" else metrics[protocol]
    return {key: scores[f"test_{key}"] for key in (*MEASURES, *FLOORS.values())}


def collect_results(cfg: ComparisonConfig) -> dict[str, Any]:
    """{protocol: {arm: {measure: [one per seed]}}}, with the test split's floors (the same images for every run),
    each training arm's optimizer steps (pre-training and fine-tuning) and the images its runs skipped."""
    output_dir = Path(cfg.output_dir)
    protocols: dict[str, Any] = {}
    for protocol in PROTOCOLS:
        for arm in arms_of(protocol, bool(cfg.paper_recipe)):
            scores = [test_scores(read_metrics(output_dir / run_name(protocol, arm, seed)), protocol)
                      for seed in cfg.seeds]
            protocols.setdefault(protocol, {})[arm] = {key: [score[key] for score in scores] for key in MEASURES}
            protocols[protocol]["floors"] = {key: scores[0][key] for key in FLOORS.values()}
    first = cfg.seeds[0]
    pretraining = read_metrics(output_dir / run_name("pretrain", "mpp", first))
    tuned = {arm: read_metrics(output_dir / run_name("finetune", arm, first))
             for arm in arms_of("finetune", bool(cfg.paper_recipe))}
    steps = {arm: metrics["step"] for arm, metrics in tuned.items()}
    rates = {arm: {"chosen": metrics["chosen_lr"], "grid": sorted(float(rate) for rate in next(
        value for key, value in metrics.items() if key.startswith("sweep_holdout_")))}
             for arm, metrics in tuned.items() if metrics.get("chosen_lr")}
    skipped = {run: sum(read_metrics(output_dir / run_name(protocol, arm, seed)).get("skipped_images") or 0
                        for seed in cfg.seeds)
               for run, (protocol, arm) in {"pre-training": ("pretrain", "mpp"),
                                            "fine-tuning": ("finetune", "mpp")}.items()}
    return {"seeds": list(cfg.seeds), "protocols": protocols, "pretraining_steps": pretraining["step"],
            "finetuning_steps": steps, "rates": rates, "skipped_images": skipped, "version": provenance()}


def provenance() -> dict[str, Optional[str]]:
    """The package's version and, where it runs from a git checkout, its commit ("+changes" where the checkout has
    uncommitted changes)."""
    checkout = Path(__file__).resolve().parents[2]
    commit = None
    if (checkout / ".git").exists():
        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True).stdout.strip()
        commit = git("rev-parse", "HEAD") or None
        if commit and git("status", "--porcelain", "--untracked-files=no"):
            commit += "+changes"
    return {"package": version("mpp"), "commit": commit}


def arm_scores(results: dict[str, Any], protocol: str, arm: str) -> dict[str, list[float]]:
    """An arm's scores in a protocol's tables: the fine-tuned arms' pixels are the pixels' logistic regression."""
    if protocol == "finetune" and arm == "pixels":
        protocol = PIXELS_FLOOR
    return results["protocols"][protocol][arm]


def arm_labels(results: dict[str, Any]) -> dict[str, str]:
    """The arms' names in the tables, with the steps the fine-tuned ones trained (where recorded)."""
    steps = results.get("finetuning_steps")
    if not steps:
        return ARMS
    pretraining = results["pretraining_steps"]
    return {**ARMS, **{arm: f"{ARMS[arm]} ({pretraining:,} + {steps[arm]:,} steps)" for arm in ("mpp", "mpp_paper")
                       if arm in steps},
            **{arm: f"{ARMS[arm]} ({steps[arm]:,} steps)" for arm in ("scratch", "scratch_paper", "random")
               if arm in steps}}


def comparisons(results: dict[str, Any], measure: str) -> list[Comparison]:
    """Each protocol's paired differences of ``READ_AGAINST`` (in points), read by ``measure``."""
    found = []
    for protocol, (title, _) in PROTOCOLS.items():
        paper = PAPER_READ_AGAINST if protocol == "finetune" and with_paper_recipe(results) else ()
        for better, worse in (*READ_AGAINST[protocol], *paper):
            finding = f"{ARMS[better]} - {ARMS[worse]}" + (" (logistic regression)" if (
                protocol == "finetune" and worse == "pixels") else "")
            found.append(Comparison(finding, title, measure, paired_difference(
                arm_scores(results, protocol, better)[measure], arm_scores(results, protocol, worse)[measure],
                scale=100)))
    return found


def verdict(results: dict[str, Any], measure: str = "balanced_accuracy") -> list[str]:
    """The sentences read first: what pre-training bought against scratch trained as long, fine-tuned, and
    whether each fine-tuned encoder clears the raw pixels' logistic regression, the floor an encoder must clear."""
    found = {(comparison.column, comparison.finding): comparison.difference
             for comparison in comparisons(results, measure)}
    bought = found[("Fine-tuned", f"{ARMS['mpp']} - {ARMS['scratch']}")]
    labels = arm_labels(results)
    lines = [f"**What pre-training bought** (fine-tuned, {MEASURES[measure]}, MPP against a ViT {labels['scratch']} "
             f"with the same recipe and its own rate): {describe_difference(bought, claimed=True)}."]
    for arm in ("mpp", "scratch"):
        against = found[("Fine-tuned", f"{ARMS[arm]} - {ARMS['pixels']} (logistic regression)")]
        if against.shown and against.mean > 0:
            said = "clears it"
        elif against.shown or against.mean < 0 and against.p_value is None:
            said = "**does not clear it**: it is below the pixels"
        else:
            said = "**is not shown to clear it**"
        lines.append(f"Fine-tuned {ARMS[arm] if arm == 'scratch' else 'from MPP'} against logistic regression on "
                     f"the raw pixels of the same labelled images (the floor an encoder must clear): "
                     f"{describe_difference(against, claimed=True)}; the encoder {said}.")
    return [line for sentence in lines for line in (sentence, "")]


def results_table(results: dict[str, Any]) -> str:
    """The verdict, then per measure: the arms' mean ± SD in % with the floors, then the paired differences in
    points."""
    labels = arm_labels(results)
    columns = [arm for arm in ARMS if arm not in PAPER_ARMS or with_paper_recipe(results)]
    lines = [*verdict(results),
             f"Seeds: {', '.join(map(str, results['seeds']))}, each with its own labelled images; test accuracy in % "
             "(mean ± SD over the seeds), paired differences in points with their 95% intervals. The fine-tuned "
             "row's raw pixels are the linear probe's (logistic regression).", ""]
    for measure, said in MEASURES.items():
        body = []
        for protocol, (title, _) in PROTOCOLS.items():
            scores = results["protocols"][protocol]
            arms = arms_of(protocol, with_paper_recipe(results))
            shown = (*arms, "pixels") if protocol == "finetune" else arms
            body.append([title, *(percent(arm_scores(results, protocol, arm)[measure]) if arm in shown else "—"
                                  for arm in columns), f"{100 * scores['floors'][FLOORS[measure]]:.1f}"])
        floor = "largest class" if measure == "accuracy" else "chance"
        lines += [f"**{said.capitalize()}**", "",
                  *markdown_table(["Protocol", *(labels[arm] for arm in columns), floor], body)]
        found = comparisons(results, measure)
        lines += [*comparison_table("Difference", found, measure), *holm_summary(found)]
    lines += rates_line(results)
    skipped = results.get("skipped_images") or {}
    if any(skipped.values()):
        lines += ["Images skipped as undecodable, over all seeds: " + ", ".join(
            f"{count} in {stage}" for stage, count in skipped.items()) + " (each run's log.txt names them).", ""]
    return "\n".join(lines)


def rates_line(results: dict[str, Any]) -> list[str]:
    """The rate each fine-tuned arm's sweep chose on the first seed, and where one is an end of its grid, that the
    best rate may lie beyond it."""
    rates = results.get("rates")
    if not rates:
        return []
    grids = {tuple(rate["grid"]) for rate in rates.values()}
    said = []
    for arm, rate in rates.items():
        edge = grid_edge(rate["chosen"], rate["grid"])
        own_grid = f" of {', '.join(f'{value:g}' for value in rate['grid'])}" if len(grids) > 1 else ""
        said.append(f"{ARMS[arm]} {rate['chosen']:g}{own_grid}" + (
            f" (**the grid's {edge}**: the best rate may lie {'above' if edge == 'highest' else 'below'} it; add one "
            "to finetune.sweep_lrs)" if edge else ""))
    grid = f" of {', '.join(f'{value:g}' for value in grids.pop())}" if len(grids) == 1 else ""
    return [f"Learning rates, each arm's sweep on seed {results['seeds'][0]}{grid}: " + "; ".join(said) + ".", ""]


def publish(cfg: ComparisonConfig, results: dict[str, Any], folder: Path) -> dict[str, Any]:
    """results.md in ``folder`` beside its results.json, both copied to ``publish_dir`` where set."""
    table = publish_table(cfg, folder, results_table(results), results["runs"], results["wall_seconds"])
    copy_to_publish_dir(cfg, folder, [])
    return {**results, "table": table}


LISTS = {stage: f"{lists} and data=[...], encoder=[...]" for stage, lists in (
    ("pretrain", "mpp=[...]"), ("finetune", "finetune=[...], scratch=[...], labelled_per_class"),
    ("linear_probe", "linear_probe=[...], labelled_per_class"), ("knn", "knn=[...], labelled_per_class"))}


def check_before_running(cfg: ComparisonConfig) -> None:
    """Everything that can be wrong with the comparison, found before its first run: each run of the first seed
    builds its config, the labelled images have what the protocols need, and test images that are also unlabelled
    ones are counted (``mpp.experiments.checks``)."""
    cfg.check_images()
    first = [run for run in plan_runs(cfg) if run.name.endswith(f"-seed{cfg.seeds[0]}")]
    configs = check_run_configs(first, LISTS)
    if cfg.tune_once and not configs[run_name("finetune", "mpp", cfg.seeds[0])].finetune.sweep_lrs:
        raise ConfigError("tune_once=true trains every seed at the rate the first seed's sweep chose, and the "
                          "fine-tuning has no sweep: give finetune=[...] a finetune.sweep_lrs=[...] (a list given on "
                          "the command line replaces the preset's), or set tune_once=false")
    test = check_labelled_images(configs[run_name("finetune", "mpp", cfg.seeds[0])], cfg.labelled_per_class,
                                 "labelled_per_class")
    warn_if_test_images_are_unlabelled_ones(test, configs[run_name("pretrain", "mpp", cfg.seeds[0])])


def compare_on_the_console(cfg: ComparisonConfig) -> dict[str, Any]:
    """``python -m mpp compare``: the comparison, its progress and tables on the console."""
    configure_logging()
    return compare(cfg)


def compare(cfg: ComparisonConfig) -> dict[str, Any]:
    """The whole comparison (``python -m mpp compare``): every run not yet finished, then the tables."""
    if not cfg.tables_only:
        check_before_running(cfg)
    return run_experiment(cfg, lambda: plan_runs(cfg), lambda: collect_results(cfg),
                          lambda results, folder: publish(cfg, results, folder))
