"""The paper's masked patch prediction findings (Sec. 4.6, App. B.1.2), tested with this package's own recipes.

Four claims: MPP pre-training beats training from scratch after fine-tuning; it stays behind supervised
pre-training; the L2 pixel target is slightly worse than the colour targets; a 15% corruption rate is slightly
worse than 50%. The grid's rows and claims are the config's (``rows``, ``claims``: by default the paper's,
``mpp.experiments.config.PAPER_ROWS`` and ``PAPER_CLAIMS``; a preset may list others). Each row is pre-trained (or
not), then fine-tuned on a few labels, and its frozen features scored through both readouts by few-shot linear
regression and by logistic regression and kNN on the fine-tuning labels, once per seed; beside them, the same
protocols on the raw pixels (few-shot ridge regression, logistic regression, kNN) say what a model
must beat. Every run is an ordinary run of a
recipe in a subprocess, with a command line a researcher can rerun alone, and its own run directory under
``output_dir``.

An experiment that stopped is continued by running the same command again: finished runs (those with a
``metrics.json``) are kept, interrupted training runs resume from their checkpoints.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml

from mpp.config.runs import FinetuneRunConfig
from mpp.config.building import build_config, config_to_dict
from mpp.errors import RunError
from mpp.experiments.class_balance import class_balance
from mpp.experiments.config import ReproductionConfig, ReproductionRow
from mpp.experiments.publishing import copy_to_publish_dir, publish_table
from mpp.experiments.reproduction_plots import plot_results
from mpp.experiments.reproduction_tables import BASELINES, READOUTS, results_table, rows_at_chance
from mpp.experiments.runner import EVALUATIONS, Run, recipe_command, run_experiment
from mpp.run.directory import read_metrics

logger = logging.getLogger(__name__)

PIXELS_ROW = "pixels"  # few-shot regression on the normalised pixels themselves: no encoder at all


def finetuning_class_balance(cfg: ReproductionConfig) -> dict[str, Any]:
    """``class_balance`` of the test split every row is scored on (fine-tuning's data)."""
    return class_balance(FinetuneRunConfig, cfg.finetune_preset, (*cfg.data, *cfg.encoder, *cfg.finetune))


def labelled_images_per_class(cfg: ReproductionConfig) -> int:
    """The labelled training images per class that fine-tuning uses (``data.shots_per_class``; 0: all)."""
    overrides = (*cfg.data, *cfg.encoder, *cfg.finetune)
    return build_config(FinetuneRunConfig, cfg.finetune_preset, overrides).data.shots_per_class


def plan_runs(cfg: ReproductionConfig, repository: Path) -> list[Run]:
    """Every run of the experiment, each after the run it starts from; each runs a script of ``repository``. Beside
    the rows: few-shot regression on raw pixels, and logistic regression and kNN on raw pixels fitted to the same
    labelled images as fine-tuning (each seed's) and, once, to every training image. These baselines come first, then
    pre-training: the longest of them (logistic regression on every image) then runs beside pre-training, not alone at
    the end."""
    output_dir = Path(cfg.output_dir)
    presets = {"mpp": cfg.mpp_preset, "supervised": cfg.supervised_preset, "finetune": cfg.finetune_preset,
               **dict.fromkeys(EVALUATIONS, cfg.eval_preset)}
    overrides = {"mpp": (*cfg.pretraining, *cfg.mpp), "supervised": cfg.pretraining, "finetune": cfg.finetune,
                 "few_shot": cfg.few_shot, "linear_probe": cfg.linear_probe, "knn": cfg.knn}

    def command(script: str, name: str, seed: int, *extra: str) -> tuple[str, ...]:
        return recipe_command(cfg, repository, script, presets[script], (*cfg.data, *cfg.encoder, *overrides[script],
                                                                         *extra), seed, output_dir / name)

    pretraining, evaluation, baselines = [], [], []
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
            # tune_once: the first seed's sweep chooses the row's learning rate, the other seeds train at it.
            tuned = f"finetune/{row.name}-seed{cfg.seeds[0]}"
            reuse = cfg.tune_once and seed != cfg.seeds[0]
            finetune += ("finetune.sweep_lrs=[]", f"finetune.lr_from={output_dir / tuned}") if reuse else ()
            name = f"finetune/{row.name}-seed{seed}"
            evaluation.append(Run(name, "finetune", command("finetune", name, seed, *finetune), source,
                                  also_after=(tuned,) if reuse else ()))
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
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logging.getLogger("tensorboard").setLevel(logging.WARNING)  # a line per event file read otherwise
    events = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    events.Reload()
    tag = f"few_shot/{shots}shot"
    if tag not in events.Tags()["scalars"]:
        return []
    points = {event.step: event.value for event in events.Scalars(tag)}  # a resumed run logs its last report again
    return sorted(points.items())


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


def collect_results(cfg: ReproductionConfig) -> dict[str, Any]:
    """Every row's figures over the seeds: fine-tuning test accuracy, few-shot accuracy per number of shots, and
    the few-shot monitor's curve during pre-training (where it ran); the raw-pixel baselines; the first supervised
    row's pre-training runs' own test accuracy; the claims."""
    output_dir = Path(cfg.output_dir)
    rows = {}
    for row in cfg.rows:
        finetune = [read_metrics(output_dir / f"finetune/{row.name}-seed{seed}") for seed in cfg.seeds]
        few_shot = [output_dir / f"few_shot/{row.name}-seed{seed}" for seed in cfg.seeds]
        other_few_shot = [output_dir / f"few_shot/{row.name}-{other_readout(row)}-seed{seed}" for seed in cfg.seeds]
        curves, monitor_shots = {}, None
        for seed in cfg.seeds if row.pretraining else ():
            pretraining = output_dir / f"pretrain/{row.name}-seed{seed}"
            monitor = yaml.safe_load((pretraining / "config.yaml").read_text())["monitor"]
            if monitor["few_shot_every"]:
                monitor_shots = monitor["few_shot_shots"]
                curves[seed] = few_shot_curve(pretraining, monitor_shots)
        rows[row.name] = {"label": row.label, "pretraining": row.pretraining,
                          "finetune_accuracy": [run["test_accuracy"] for run in finetune],
                          "finetune_balanced_accuracy": [run["test_balanced_accuracy"] for run in finetune],
                          "finetune_per_class_accuracy": [run["test_per_class_accuracy"] for run in finetune],
                          "finetune_lr": [run["chosen_lr"] or run["lr"] for run in finetune],
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
    return {"seeds": list(cfg.seeds), "rows": rows, "pixels": baselines,
            "supervised_test_accuracy": supervised_accuracy or None,
            "labelled_per_class": labelled, "claims": config_to_dict(cfg)["claims"],
            **finetuning_class_balance(cfg)}


class BrokenBaseline(RunError):
    """A row of the grid stayed at chance: a baseline that does not train is a bug, not a result."""


def publish(cfg: ReproductionConfig, results: dict[str, Any], folder: Path) -> dict[str, Any]:
    """results.md (the tables and the wall time) and the plots, in ``folder`` beside its results.json; copied to
    ``publish_dir`` and into ``results_page``'s section, where set. Returns ``results`` with the table and the plots'
    paths."""
    table = publish_table(cfg, folder, results_table(results), results["runs"], results["wall_seconds"])
    plots = plot_results(results, folder)
    copy_to_publish_dir(cfg, folder, plots)
    return {**results, "table": table, "plots": [str(path) for path in plots]}


def reproduce(cfg: ReproductionConfig, repository: Path) -> dict[str, Any]:
    """The whole experiment: every run not yet finished (the recipes of ``repository``), then the tables and the
    plots; a row left at chance fails it once they are written."""
    results = run_experiment(cfg, lambda: plan_runs(cfg, repository), lambda: collect_results(cfg),
                             lambda results, folder: publish(cfg, results, folder))
    broken = rows_at_chance(results, cfg.chance_margin)
    if broken:
        raise BrokenBaseline(f"after fine-tuning, {'; '.join(broken)} stayed within {100 * cfg.chance_margin:g} points "
                             "of chance: a row that does not train is a broken baseline, not a result; give it the "
                             "steps and learning rates it needs (finetune: train.steps, finetune.sweep_lrs) and run "
                             "again (the tables above are written, for reading what went wrong)")
    return results
