"""The paper's masked patch prediction findings (Sec. 4.6, App. B.1.2), tested with this package's own recipes.

Four claims: MPP pre-training beats training from scratch after fine-tuning; it stays behind supervised
pre-training; the L2 pixel target is slightly worse than the colour targets; a 15% corruption rate is slightly
worse than 50%. The grid's rows and claims are the config's (``rows``, ``claims``: by default the paper's,
``study.reproduction_config.PAPER_ROWS`` and ``PAPER_CLAIMS``; a preset may list others). Each row is pre-trained (or
not), then fine-tuned on a few labels, and its frozen features scored through both readouts by few-shot linear
regression and by logistic regression and kNN on the fine-tuning labels, once per seed; beside them, the same
protocols on the raw pixels (few-shot ridge regression, logistic regression, kNN) say what a model
must beat. Every run is an ordinary run of a
recipe in a subprocess, with a command line a researcher can rerun alone, and its own run directory under
``output_dir``.

An experiment that stopped is continued by running the same command again: finished runs (those with a
``metrics.json``) are kept, interrupted training runs resume from their checkpoints. A row whose finished sweeps
chose a learning rate at the edge of its grid is fine-tuned again, over a grid widened on that side, when the
experiment is run again; its learning rates are chosen on a validation split of at least the pre-registration's
size (``check_validation_split``).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Optional

import yaml

from mpp.config.building import build_config, config_to_dict
from mpp.config.runs import FinetuneRunConfig
from mpp.errors import ConfigError, RunError
from mpp.experiments.publishing import copy_to_publish_dir, publish_table
from mpp.experiments.runner import Run, at_first_seeds_rate, recipe_command, run_experiment
from mpp.run import CONFIG_FILE, logged_scalars, read_metrics
from study.class_balance import class_balance
from study.learning_rate_widening import finished_widenings, swept_grids, widened_run_name, widened_sweep
from study.reproduction_config import ReproductionConfig, ReproductionRow
from study.reproduction_plots import plot_results
from study.reproduction_tables import BASELINES, READOUTS, primary_record, results_table, rows_at_chance
from study.results_page import check_section, write_section

logger = logging.getLogger(__name__)

PIXELS_ROW = "pixels"  # few-shot regression on the normalised pixels themselves: no encoder at all


def finetuning_class_balance(cfg: ReproductionConfig) -> dict[str, Any]:
    """``class_balance`` of the test split every row is scored on (fine-tuning's data)."""
    return class_balance(FinetuneRunConfig, cfg.finetune_preset, (*cfg.data, *cfg.encoder, *cfg.finetune))


def finetuning_config(cfg: ReproductionConfig, row: Optional[ReproductionRow] = None) -> FinetuneRunConfig:
    """The fine-tuning config every row shares, or ``row``'s (a row without pre-training adds ``scratch_finetune``)."""
    scratch = cfg.scratch_finetune if row and not row.pretraining else ()
    return build_config(FinetuneRunConfig, cfg.finetune_preset, (*cfg.data, *cfg.encoder, *cfg.finetune, *scratch))


def labelled_images_per_class(cfg: ReproductionConfig) -> int:
    """The labelled training images per class that fine-tuning uses (``data.shots_per_class``; 0: all)."""
    return finetuning_config(cfg).data.shots_per_class


# The pre-registration's validation split, on which a sweep chooses each rate: at least this share of the labelled
# images, and at least this many.
VALIDATION_SHARE, VALIDATION_IMAGES = 0.2, 200


def check_validation_split(cfg: ReproductionConfig) -> None:
    """A ConfigError, naming a value that fits, where a row's learning-rate sweep would hold out fewer of the labelled
    images than the larger of 20% of them and 200. Checked where fine-tuning labels a few images per class, whose
    number the config gives with the data's classes; on all the labels, the count is the data's alone."""
    finetuning = {row.name: finetuning_config(cfg, row) for row in cfg.rows}
    checked = {name: run for name, run in finetuning.items() if run.finetune.sweep_lrs and run.data.shots_per_class}
    classes = finetuning_class_balance(cfg)["classes"] if checked else 0
    for name, run in checked.items():
        shots, fraction = run.data.shots_per_class, run.finetune.sweep_holdout_fraction
        labelled = shots * classes
        least = max(math.ceil(VALIDATION_SHARE * labelled), VALIDATION_IMAGES)
        if round(labelled * fraction) < least:
            fits = math.ceil(100 * least / labelled) / 100  # from 1 on, no fraction leaves images to train on
            fix = (f"finetune.sweep_holdout_fraction={fits:g}" if fits < 1 else
                   f"data.shots_per_class={math.ceil(VALIDATION_IMAGES / VALIDATION_SHARE / classes)} with "
                   f"finetune.sweep_holdout_fraction={VALIDATION_SHARE:g}")
            raise ConfigError(f"finetune.sweep_holdout_fraction={fraction:g} holds out {round(labelled * fraction)} of "
                              f"row {name}'s {labelled:,} labelled images ({shots} per class x {classes} classes) to "
                              f"choose its learning rate on, fewer than {least} ({100 * VALIDATION_SHARE:g}% of them, "
                              f"and at least {VALIDATION_IMAGES}): set {fix}")


def finetune_run_name(row: ReproductionRow, seed: int, widenings: int) -> str:
    """A fine-tuning run's folder: each widening of its row's grid is swept by runs of its own."""
    return widened_run_name(f"finetune/{row.name}", seed, widenings)


def row_grids(cfg: ReproductionConfig, row: ReproductionRow) -> list[tuple[float, ...]]:
    """The grids ``row``'s fine-tuning sweeps (``swept_grids``): the last is the one to run."""
    return swept_grids(cfg, f"finetune/{row.name}", finetuning_config(cfg, row).finetune.sweep_lrs)


def plan_runs(cfg: ReproductionConfig) -> list[Run]:
    """Every run of the experiment, each after the run it starts from; each a command of ``python -m mpp``. Beside
    the rows: few-shot regression on raw pixels, and logistic regression and kNN on raw pixels fitted to the same
    labelled images as fine-tuning (each seed's) and, once, to every training image. These baselines come first, then
    pre-training: the longest of them (logistic regression on every image) then runs beside pre-training, not alone at
    the end."""
    output_dir = Path(cfg.output_dir)
    presets = {"mpp": cfg.mpp_preset, "supervised": cfg.supervised_preset, "finetune": cfg.finetune_preset,
               **dict.fromkeys(("few_shot", "linear_probe", "knn"), cfg.eval_preset)}
    overrides = {"mpp": (*cfg.pretraining, *cfg.mpp), "supervised": cfg.pretraining, "finetune": cfg.finetune,
                 "few_shot": cfg.few_shot, "linear_probe": cfg.linear_probe, "knn": cfg.knn}

    def command(stage: str, name: str, seed: int, *extra: str) -> tuple[str, ...]:
        return recipe_command(cfg, "pretrain" if stage == "mpp" else stage, presets[stage],
                              (*cfg.data, *cfg.encoder, *overrides[stage], *extra), seed, output_dir / name)

    pretraining, evaluation, baselines = [], [], []
    grids = {row.name: row_grids(cfg, row) for row in cfg.rows}
    labelled = labelled_images_per_class(cfg)
    pixels = "eval.features=pixels"
    features = f"eval.feature_cache={output_dir / 'features'}"  # each encoder's features extracted once per readout
    for seed in cfg.seeds:
        for row in cfg.rows:
            source = f"pretrain/{row.name}-seed{seed}" if row.pretraining else None
            if source:
                pretraining.append(Run(source, "pretrain", command(row.pretraining, source, seed, *row.overrides),
                                       after=None))
            init = (f"init={output_dir / source}",) if source else ()
            finetune = (f"data.subset_seed={seed}", *init, *(() if source else cfg.scratch_finetune))
            widenings = len(grids[row.name]) - 1
            # tune_once: the first seed's sweep chooses the row's learning rate, the other seeds train at it.
            at_rate, waits = at_first_seeds_rate(cfg, finetune_run_name(row, cfg.seeds[0], widenings), seed)
            name = finetune_run_name(row, seed, widenings)
            evaluation.append(Run(name, "finetune", command("finetune", name, seed, *finetune, *at_rate,
                                                            *widened_sweep(grids[row.name], at_rate)),
                                  source, also_after=waits))
            name = f"few_shot/{row.name}-seed{seed}"
            evaluation.append(Run(name, "few_shot", command("few_shot", name, seed, *init), source))
            # Few-shot also through the readout that eval.features=auto does not pick for this row: both in the table.
            name = f"few_shot/{row.name}-{other_readout(row)}-seed{seed}"
            evaluation.append(Run(name, "few_shot", command("few_shot", name, seed, *init,
                                                            f"eval.features={other_readout(row)}"), source))
            # Logistic regression and kNN on the frozen encoder, through both readouts, fitted to fine-tuning's
            # labelled images: beside the same fits on the raw pixels.
            for script in BASELINES:
                for readout in READOUTS:
                    name = f"{script}/{row.name}-{readout}-seed{seed}"
                    extra = (*init, f"eval.features={readout}", f"data.shots_per_class={labelled}",
                             f"data.subset_seed={seed}", features)
                    evaluation.append(Run(name, script, command(script, name, seed, *extra), source))
        name = f"few_shot/{PIXELS_ROW}-seed{seed}"
        baselines.append(Run(name, "few_shot", command("few_shot", name, seed, pixels), None))
        for script in BASELINES:
            # Fitted to each seed's labelled images, where fine-tuning uses a few labels, and once to all of them.
            fits = ([("labelled", labelled)] if labelled else []) + ([("all", 0)] if seed == cfg.seeds[0] else [])
            for labels, per_class in fits:
                name = f"baseline/pixels-{script}-{labels}-seed{seed}"
                extra = (pixels, f"data.shots_per_class={per_class}", f"data.subset_seed={seed}")
                baselines.append(Run(name, "baseline", command(script, name, seed, *extra), None))
    return baselines + pretraining + evaluation


def other_readout(row: ReproductionRow) -> str:
    """The readout ``eval.features=auto`` leaves out for ``row``'s encoder: auto reads MPP's by the mean patch token
    (MPP trains no [class] token output) and any other by its [class] token."""
    return "token" if row.pretraining == "mpp" else "avg"


def few_shot_curve(directory: Path, shots: int) -> list[tuple[int, float]]:
    """(images seen, accuracy) of a pre-training run's few-shot monitor, from its TensorBoard events."""
    return sorted(logged_scalars(directory, f"few_shot/{shots}shot").items())


def few_shot_means(directory: Path, measure: str = "mean") -> dict[str, float]:
    """A few-shot run's mean accuracy (``balanced_mean``: balanced accuracy) per number of shots."""
    return {shots: scores[measure] for shots, scores in read_metrics(directory)["few_shot"].items()}


def few_shot_over_seeds(directories: list[Path], measure: str = "mean") -> dict[str, list[float]]:
    """{shots: [each seed's mean]} of the few-shot runs in ``directories``."""
    runs = [few_shot_means(directory, measure) for directory in directories]
    return {shots: [run[shots] for run in runs] for shots in runs[0]}


def by_readout(*runs_per_readout: list[Path], measure: str) -> dict[str, dict[str, list[float]]]:
    """{readout: {shots: [each seed's ``measure``]}} of few-shot runs, one list of runs per readout."""
    return {read_metrics(runs[0])["features"]: few_shot_over_seeds(runs, measure) for runs in runs_per_readout}


def frozen_fits(output_dir: Path, row: ReproductionRow, seeds: list[int]) -> dict[str, Any]:
    """{script: {readout: {accuracy, balanced_accuracy: [one per seed]}}}: logistic regression and kNN on ``row``'s
    frozen encoder, fitted to the labelled images."""
    fits: dict[str, Any] = {}
    for script in BASELINES:
        for readout in READOUTS:
            runs = [read_metrics(output_dir / f"{script}/{row.name}-{readout}-seed{seed}")[script] for seed in seeds]
            fits.setdefault(script, {})[readout] = {measure: [run[f"test_{measure}"] for run in runs]
                                                    for measure in ("accuracy", "balanced_accuracy")}
    return fits


def run_config(run_dir: Path) -> dict[str, Any]:
    """A run's resolved config, as it wrote it."""
    return yaml.safe_load((run_dir / CONFIG_FILE).read_text())


def collect_results(cfg: ReproductionConfig) -> dict[str, Any]:
    """Every row's figures over the seeds: fine-tuning test accuracy (of its grid's last widening) with the learning
    rates chosen and the grid they were chosen from, few-shot accuracy per number of shots, and the few-shot monitor's
    curve during pre-training (where it ran); the raw-pixel baselines; the first supervised row's pre-training runs'
    own test accuracy; the claims, and the primary family's held here."""
    output_dir = Path(cfg.output_dir)
    rows = {}
    for row in cfg.rows:
        widenings = finished_widenings(output_dir, f"finetune/{row.name}", cfg.seeds[0])
        finetune_dirs = [output_dir / finetune_run_name(row, seed, widenings) for seed in cfg.seeds]
        finetune = [read_metrics(directory) for directory in finetune_dirs]
        few_shot = [output_dir / f"few_shot/{row.name}-seed{seed}" for seed in cfg.seeds]
        other_few_shot = [output_dir / f"few_shot/{row.name}-{other_readout(row)}-seed{seed}" for seed in cfg.seeds]
        curves, monitor_shots = {}, None
        for seed in cfg.seeds if row.pretraining else ():
            pretraining = output_dir / f"pretrain/{row.name}-seed{seed}"
            monitor = run_config(pretraining)["monitor"]
            if monitor["few_shot_every"]:
                monitor_shots = monitor["few_shot_shots"]
                curves[seed] = few_shot_curve(pretraining, monitor_shots)
        rows[row.name] = {"label": row.label, "pretraining": row.pretraining,
                          "finetune_accuracy": [run["test_accuracy"] for run in finetune],
                          "finetune_balanced_accuracy": [run["test_balanced_accuracy"] for run in finetune],
                          "finetune_per_class_accuracy": [run["test_per_class_accuracy"] for run in finetune],
                          "finetune_lr": [run["chosen_lr"] or run["lr"] for run in finetune],
                          # the first seed's: with tune_once the others train at its rate without a sweep
                          "finetune_sweep_lrs": run_config(finetune_dirs[0])["finetune"]["sweep_lrs"],
                          "finetune_steps": [run["step"] for run in finetune],
                          "few_shot_accuracy": few_shot_over_seeds(few_shot),
                          "few_shot_balanced_accuracy": few_shot_over_seeds(few_shot, "balanced_mean"),
                          "few_shot_by_readout": by_readout(few_shot, other_few_shot, measure="mean"),
                          "few_shot_balanced_by_readout": by_readout(few_shot, other_few_shot, measure="balanced_mean"),
                          "frozen_labelled": frozen_fits(output_dir, row, cfg.seeds),
                          "few_shot_during_pretraining": curves, "few_shot_during_pretraining_shots": monitor_shots}
    pixel_runs = [output_dir / f"few_shot/{PIXELS_ROW}-seed{seed}" for seed in cfg.seeds]
    baselines: dict[str, Any] = {"few_shot_accuracy": few_shot_over_seeds(pixel_runs),
                                 "few_shot_balanced_accuracy": few_shot_over_seeds(pixel_runs, "balanced_mean")}
    labelled = labelled_images_per_class(cfg)
    for script in BASELINES:
        for labels in ("labelled", "all"):
            stored = labels if labelled else "all"  # fine-tuning on all the labels: the one fit serves both
            metrics = [read_metrics(output_dir / f"baseline/pixels-{script}-{stored}-seed{seed}") for seed in
                       (cfg.seeds if stored == "labelled" else cfg.seeds[:1])]
            baselines[f"{script}_{labels}"] = [run[script]["test_accuracy"] for run in metrics]
            baselines[f"{script}_{labels}_balanced"] = [run[script]["test_balanced_accuracy"] for run in metrics]
            baselines[f"{labels}_images"] = metrics[0]["train_images"]
    baselines["knn_k"] = read_metrics(output_dir / f"baseline/pixels-knn-all-seed{cfg.seeds[0]}")["knn"]["k"]
    supervised = [row.name for row in cfg.rows if row.pretraining == "supervised"][:1]
    supervised_accuracy = [read_metrics(output_dir / f"pretrain/{name}-seed{seed}")["test_accuracy"]
                           for name in supervised for seed in cfg.seeds]
    results = {"seeds": list(cfg.seeds), "rows": rows, "pixels": baselines,
               "supervised_test_accuracy": supervised_accuracy or None,
               "labelled_per_class": labelled, "claims": config_to_dict(cfg)["claims"],
               **finetuning_class_balance(cfg)}
    return results | {"primary": primary_record(results, Path(cfg.output_dir).name)}


class BrokenBaseline(RunError):
    """A row of the grid stayed at chance: a baseline that does not train is a bug, not a result."""


def with_sweep_grids(cfg: ReproductionConfig, results: dict[str, Any]) -> dict[str, Any]:
    """``results`` with every row's grid of learning rates: results.json written before the rows recorded theirs
    (``finetune_sweep_lrs``) chose from the configured grids, none widened then."""
    configured = {row.name: list(finetuning_config(cfg, row).finetune.sweep_lrs) for row in cfg.rows}
    return results | {"rows": {name: {"finetune_sweep_lrs": configured[name]} | row
                               for name, row in results["rows"].items()}}


def publish(cfg: ReproductionConfig, results: dict[str, Any], folder: Path) -> dict[str, Any]:
    """results.md (the tables and the wall time) and the plots, in ``folder`` beside its results.json; copied to
    ``publish_dir`` and into ``results_page``'s section, where set. Returns ``results`` with the table and the plots'
    paths."""
    table = publish_table(cfg, folder, results_table(with_sweep_grids(cfg, results), Path(cfg.output_dir).name),
                          results["runs"], results["wall_seconds"])
    write_section(cfg, table)
    plots = plot_results(results, folder)
    copy_to_publish_dir(cfg, folder, plots)
    return {**results, "table": table, "plots": [str(path) for path in plots]}


def reproduce(cfg: ReproductionConfig) -> dict[str, Any]:
    """The whole experiment: every run not yet finished, then the tables and the
    plots; a row left at chance fails it once they are written. A validation split too small is refused before
    anything runs, as is a results page without the experiment's section."""
    check_section(cfg)
    if not cfg.tables_only:  # which writes the tables of runs made, and runs nothing
        check_validation_split(cfg)
    results = run_experiment(cfg, lambda: plan_runs(cfg), lambda: collect_results(cfg),
                             lambda results, folder: publish(cfg, results, folder))
    broken = rows_at_chance(results, cfg.chance_margin)
    if broken:
        raise BrokenBaseline(f"after fine-tuning, {'; '.join(broken)} stayed within {100 * cfg.chance_margin:g} points "
                             "of chance: a row that does not train is a broken baseline, not a result; give it the "
                             "steps and learning rates it needs (finetune: train.steps, finetune.sweep_lrs) and run "
                             "again (the tables above are written, for reading what went wrong)")
    return results
