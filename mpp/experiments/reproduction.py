"""The paper's masked patch prediction findings (Sec. 4.6, App. B.1.2), tested with this package's own recipes.

Four claims: MPP pre-training beats training from scratch after fine-tuning; it stays behind supervised
pre-training; the L2 pixel target is slightly worse than the colour targets; a 15% corruption rate is slightly
worse than 50%. The grid's rows and claims are the config's (``rows``, ``claims``: by default the paper's,
``mpp.experiments.config.PAPER_ROWS`` and ``PAPER_CLAIMS``; a preset may list others). Each row is pre-trained (or not), then
fine-tuned on a few labels, and its frozen features scored through both readouts by few-shot linear regression and
by logistic regression and kNN on the fine-tuning labels, once per seed; beside them, the same protocols on the raw
pixels (few-shot ridge regression, logistic regression, kNN) say what a model
must beat. Every run is an ordinary run of a
recipe in a subprocess, with a command line a researcher can rerun alone, and its own run directory under
``output_dir``.

An experiment that stopped is continued by running the same command again: finished runs (those with a
``metrics.json``) are kept, interrupted training runs resume from their checkpoints.
"""

from __future__ import annotations

import logging
import statistics
from pathlib import Path
from typing import Any, Optional

import yaml

from mpp.config.runs import FinetuneRunConfig
from mpp.config_loading import build_config, config_to_dict
from mpp.errors import RunError
from mpp.evaluation.statistics import paired_difference
from mpp.experiments.class_balance import class_balance
from mpp.experiments.config import ReproductionConfig, ReproductionRow
from mpp.experiments.publishing import (
    Comparison,
    comparison_table,
    copy_to_publish_dir,
    holm_summary,
    markdown_table,
    mean_std,
    percent,
    publish_table,
)
from mpp.experiments.runner import EVALUATIONS, Run, recipe_command, run_experiment
from mpp.run.directory import read_metrics

logger = logging.getLogger(__name__)


PIXELS_ROW = "pixels"  # few-shot regression on the normalised pixels themselves: no encoder at all

BASELINES = {"linear_probe": "logistic regression on raw pixels", "knn": "kNN on raw pixels (cosine)"}


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


def rows_at_chance(results: dict[str, Any], margin: float) -> list[str]:
    """The rows whose mean fine-tuned test accuracy, balanced where recorded (always answering one class then scores
    chance, however large the class), lies within ``margin`` of chance (1 / classes); none for a margin of 0."""
    chance, key = 1 / results["classes"], headline(results)
    return [f"{row['label']} ({100 * statistics.fmean(row[key]):.1f}%, chance {100 * chance:.1f}%)"
            for row in results["rows"].values()
            if margin > 0 and abs(statistics.fmean(row[key]) - chance) <= margin]


def headline(results: dict[str, Any]) -> str:
    """The fine-tuned figure the claims and the chance check read: balanced accuracy where the results hold it."""
    row = next(iter(results["rows"].values()))
    return "finetune_balanced_accuracy" if "finetune_balanced_accuracy" in row else "finetune_accuracy"


READOUTS = {"token": "[class] token", "avg": "mean patch token"}  # eval.features: what a frozen encoder is read by


def learning_rates(rates: list[float]) -> str:
    """Each chosen learning rate and how many seeds chose it: "0.1 x4, 0.3 x1"."""
    return ", ".join(f"{rate:g} x{rates.count(rate)}" for rate in sorted(set(rates)))


def accuracy_table(results: dict[str, Any], balanced: bool) -> list[str]:
    """Every row's fine-tuned and few-shot accuracy (``balanced``: balanced accuracy), with the chosen learning rates
    where recorded, then the raw pixels and always answering the largest class."""
    rows, shots, suffix = results["rows"], few_shot_shots(results), "_balanced" if balanced else ""
    rates = not balanced and "finetune_lr" in next(iter(rows.values()))
    header = [f"Starting point: {'balanced accuracy' if balanced else 'accuracy'}",
              f"Fine-tuned, {labels_used(results)}",
              *(["learning rate (seeds)"] if rates else []), *(f"{k}-shot" for k in shots)]
    body = [[row["label"], percent(row[f"finetune{suffix}_accuracy"]),
             *([learning_rates(row["finetune_lr"])] if rates else []),
             *(percent(row[f"few_shot{suffix}_accuracy"][k]) for k in shots)] for row in rows.values()]
    pixels = results["pixels"][f"few_shot{suffix}_accuracy"]
    body.append(["raw pixels, no encoder", "—", *(["—"] if rates else []), *(percent(pixels[k]) for k in shots)])
    # Always answering the largest class: its share of the test images, and chance in balanced accuracy.
    floor = f"{100 / results['classes'] if balanced else 100 * results['majority_class_accuracy']:.1f}"
    body.append([f"always the largest class (chance: {100 / results['classes']:.1f})", floor,
                 *(["—"] if rates else []), *(floor for _ in shots)])
    return markdown_table(header, body)


def readout_table(results: dict[str, Any]) -> list[str]:
    """Every row's few-shot accuracy through both readouts of its frozen encoder."""
    shots = few_shot_shots(results)
    header = ["Few-shot accuracy by readout", *(f"{k}-shot, {READOUTS[readout]}" for k in shots
                                                for readout in READOUTS)]
    return markdown_table(header, [[row["label"], *(percent(row["few_shot_by_readout"][readout][k]) for k in shots
                                                    for readout in READOUTS)] for row in results["rows"].values()])


FROZEN_FITS = {"linear_probe": "logistic regression", "knn": "kNN"}


def frozen_table(results: dict[str, Any]) -> list[str]:
    """Every row's frozen encoder through both readouts, logistic regression and kNN fitted to the labelled images,
    in balanced accuracy; then the same fits on the raw pixels, and chance."""
    pixels = results["pixels"]
    header = [f"Frozen, {labels_used(results)}: balanced accuracy",
              *(f"{FROZEN_FITS[script]}, {READOUTS[readout]}" for script in BASELINES for readout in READOUTS)]
    body = [[row["label"], *(percent(row["frozen_labelled"][script][readout]["balanced_accuracy"])
                             for script in BASELINES for readout in READOUTS)] for row in results["rows"].values()]
    body.append(["raw pixels, no encoder", *(percent(pixels[f"{script}_labelled_balanced"]) for script in BASELINES
                                             for _ in READOUTS)])
    body.append(["chance", *(f"{100 / results['classes']:.1f}" for _ in BASELINES for _ in READOUTS)])
    return markdown_table(header, body)


Readings = dict[str, dict[str, list[float]]]  # {column: {measure: one value per seed}}
BALANCED, PLAIN = "balanced accuracy", "accuracy"


def measures_read(results: dict[str, Any]) -> list[str]:
    """The measures a comparison reads, in order of preference: balanced accuracy first where the results record it
    (always answering one class cannot lift it above chance)."""
    return [BALANCED, PLAIN] if headline(results) == "finetune_balanced_accuracy" else [PLAIN]


def both_measures(plain: Optional[list[float]], balanced: Optional[list[float]]) -> dict[str, list[float]]:
    return {measure: values for measure, values in ((PLAIN, plain), (BALANCED, balanced)) if values is not None}


def few_shot_readings(results: dict[str, Any], row: dict[str, Any]) -> Readings:
    """``row``'s few-shot figures per column: one per number of shots and readout where the results hold both
    readouts, so that two rows compare like with like. Balanced accuracy where recorded: for every readout, or (in
    results written before that) for the readout ``eval.features=auto`` chose, MPP's mean patch token and any other
    encoder's [class] token."""
    shots = few_shot_shots(results)
    if "few_shot_by_readout" not in row:
        return {f"{k}-shot": both_measures(row["few_shot_accuracy"][k], row.get("few_shot_balanced_accuracy", {}).get(k))
                for k in shots}
    auto = "avg" if row["pretraining"] == "mpp" else "token"
    balanced = row.get("few_shot_balanced_by_readout") or (
        {auto: row["few_shot_balanced_accuracy"]} if "few_shot_balanced_accuracy" in row else {})
    return {f"{k}-shot, {READOUTS[readout]}": both_measures(row["few_shot_by_readout"][readout][k],
                                                           balanced.get(readout, {}).get(k))
            for k in shots for readout in READOUTS}


def frozen_readings(row: dict[str, Any]) -> Readings:
    """``row``'s frozen fits to the labelled images, per fit and readout."""
    return {f"{FROZEN_FITS[script]}, {READOUTS[readout]}":
            both_measures(row["frozen_labelled"][script][readout]["accuracy"],
                          row["frozen_labelled"][script][readout]["balanced_accuracy"])
            for script in BASELINES for readout in READOUTS}


def finetuned_readings(row: dict[str, Any]) -> Readings:
    return {"Fine-tuned": both_measures(row["finetune_accuracy"], row.get("finetune_balanced_accuracy"))}


def pixel_readings(results: dict[str, Any], columns: list[str]) -> Readings:
    """The raw pixels' figures under each of ``columns`` (fine-tuned: logistic regression on the same labelled
    images; the pixels have no readout, so the same figures under both), only where they vary with the seed as the
    rows' do (a fit to all the labels is made once)."""
    pixels, seeds = results["pixels"], len(results["seeds"])

    def fit(script: str) -> dict[str, list[float]]:
        return both_measures(pixels.get(f"{script}_labelled"), pixels.get(f"{script}_labelled_balanced"))

    readings: Readings = {}
    for column in columns:
        script = next((name for name, label in FROZEN_FITS.items() if column.startswith(label)), None)
        shots = column.split("-shot")[0]
        readings[column] = (fit("linear_probe") if column == "Fine-tuned" else fit(script) if script else
                            both_measures(pixels["few_shot_accuracy"].get(shots),
                                          pixels.get("few_shot_balanced_accuracy", {}).get(shots)))
    return {column: {measure: values for measure, values in figures.items() if len(values) == seeds}
            for column, figures in readings.items()}


def compare(results: dict[str, Any], finding: str, better: Readings, worse: Readings) -> list[Comparison]:
    """``better`` - ``worse`` in every column both read, by the first of measures_read both sides record."""
    comparisons = []
    for column, figures in better.items():
        measure = next((m for m in measures_read(results) if m in figures and m in worse.get(column, {})), None)
        if measure:
            difference = paired_difference(figures[measure], worse[column][measure], scale=100)
            comparisons.append(Comparison(finding, column, measure, difference))
    return comparisons


def claim_comparisons(results: dict[str, Any]) -> list[Comparison]:
    """Each claim as the paired difference of its two rows, fine-tuned and few-shot through each readout (the same on
    both sides)."""
    rows = results["rows"]

    def readings(row: dict[str, Any]) -> Readings:
        return finetuned_readings(row) | few_shot_readings(results, row)

    return [comparison for claim in results["claims"]
            for comparison in compare(results, claim["claim"], readings(rows[claim["better"]]),
                                      readings(rows[claim["worse"]]))]


def encoder_comparisons(results: dict[str, Any]) -> list[Comparison]:
    """The first MPP row's frozen encoder against the encoder at initialisation (the from-scratch row, read frozen)
    and against the raw pixels, through every fit and readout, like with like; and its fine-tuned figure against
    logistic regression on the pixels of the same labelled images. None where the grid lacks either row or the
    results hold no frozen fits."""
    rows = list(results["rows"].values())
    mpp = next((row for row in rows if row["pretraining"] == "mpp"), None)
    initial = next((row for row in rows if row["pretraining"] is None), None)
    if mpp is None or initial is None or "frozen_labelled" not in mpp:
        return []
    ours = finetuned_readings(mpp) | frozen_readings(mpp) | few_shot_readings(results, mpp)
    at_init = frozen_readings(initial)  # few-shot against initialisation is the first claim's: not read twice
    return (compare(results, f"{mpp['label']} beats the encoder at initialisation", ours, at_init)
            + compare(results, f"{mpp['label']} beats the raw pixels", ours, pixel_readings(results, list(ours))))


def claims_tables(results: dict[str, Any]) -> list[str]:
    """The claims, the first MPP encoder against initialisation and the pixels, and the Holm line over both."""
    preferred = measures_read(results)[0]
    fallback = f"; where a side lacks it, {PLAIN}, marked" if preferred == BALANCED else ""
    claims, encoder = claim_comparisons(results), encoder_comparisons(results)
    lines = comparison_table(f"The paper's claim ({preferred}{fallback})", claims, preferred)
    if encoder:
        lines += comparison_table(f"Against what it should beat ({preferred}{fallback})", encoder, preferred)
    return lines + holm_summary(claims + encoder)


def reference_table(results: dict[str, Any]) -> list[str]:
    """The references on the same training images: raw pixels, and the ViT trained with the labels alone."""
    rows, pixels = results["rows"], results["pixels"]
    # Fine-tuning on a few labels: a column for those and one for all of them; on all the labels, one column.
    columns = ["labelled", "all"] if results["labelled_per_class"] else ["all"]
    header = ["Reference on the same training images",
              *([f"{labels_used(results)} ({pixels['labelled_images']:,} images)"] if len(columns) == 2 else []),
              f"all {pixels['all_images']:,} labels"]
    body = [[label + (f", k={pixels['knn_k']}" if script == "knn" else ""),
             *(percent(pixels[f"{script}_{labels}"]) for labels in columns)] for script, label in BASELINES.items()]
    scratch = next(row for row in rows.values() if row["pretraining"] is None)
    steps = f" ({scratch['finetune_steps'][0]:,} steps)" if "finetune_steps" in scratch else ""
    supervised = results["supervised_test_accuracy"]
    if len(columns) == 2:  # the supervised row's pre-training, scored with its own head, trained on all the labels
        body.append([f"the ViT from scratch: fine-tuning recipe{steps}; supervised pre-training with its own head",
                     percent(scratch["finetune_accuracy"]), percent(supervised) if supervised else "—"])
    else:
        body.append([f"the ViT from scratch: fine-tuning recipe{steps}", percent(scratch["finetune_accuracy"])])
    return markdown_table(header, body)[:-1]


def labels_used(results: dict[str, Any]) -> str:
    """The labels fine-tuning used: "100 labels per class", or "all labels"."""
    per_class = results["labelled_per_class"]
    return f"{per_class} labels per class" if per_class else "all labels"


def few_shot_shots(results: dict[str, Any]) -> list[str]:
    return list(next(iter(results["rows"].values()))["few_shot_accuracy"])


def results_table(results: dict[str, Any]) -> str:
    """Markdown: every row's accuracies (mean ± standard deviation over the seeds, in %) and, where recorded, its
    balanced accuracies, chosen learning rates, both readouts and frozen fits; each claim; and the references on the
    same images: raw pixels, and the ViT trained from scratch with the labels alone."""
    recorded = next(iter(results["rows"].values()))
    lines = accuracy_table(results, balanced=False)
    lines += accuracy_table(results, balanced=True) if "finetune_balanced_accuracy" in recorded else []
    lines += readout_table(results) if "few_shot_by_readout" in recorded else []
    lines += frozen_table(results) if "frozen_labelled" in recorded else []
    return "\n".join(lines + claims_tables(results) + reference_table(results)) + "\n"


COLOURS = {None: "C7", "mpp": "C0", "supervised": "C1"}  # bars by kind of pre-training


def plot_results(results: dict[str, Any], output_dir: Path) -> list[Path]:
    """finetune_accuracy.png (every row, each seed a dot, in the claims' measure: balanced accuracy where recorded;
    the raw-pixel baselines on the same labelled images, chance and, in plain accuracy, the largest class as lines)
    and few_shot_during_pretraining.png (where monitored)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(results["rows"].values())
    measure, values, references = finetune_plot_figures(results)
    figure, axes = plt.subplots(figsize=(7, 3.6), layout="constrained")
    for y, row in enumerate(rows):
        mean, std = mean_std(values[y])
        axes.barh(y, mean, xerr=std, color=COLOURS[row["pretraining"]], alpha=0.6, capsize=3)
        axes.plot(values[y], [y] * len(values[y]), "k.", markersize=5)
    for (label, value), style in zip(references.items(), ("--", ":", "-.")):
        axes.axvline(value, color="k", linestyle=style, linewidth=1, label=label)
    axes.axvline(100 / results["classes"], color="0.6", linewidth=1, label="chance")
    figure.legend(fontsize="small", loc="outside lower center", ncols=2)
    axes.set_yticks(range(len(rows)), [row["label"] for row in rows])
    axes.invert_yaxis()
    axes.set_xlabel(f"test {measure} after fine-tuning (%), {len(results['seeds'])} seeds")
    axes.set_xlim(0, 100)  # from 0: differences read at their size
    paths = [output_dir / "finetune_accuracy.png"]
    figure.savefig(paths[0], dpi=120)
    plt.close(figure)

    curves, chance = monitor_plot_figures(results)
    if curves:
        figure, axes = plt.subplots(figsize=(7, 3.6), layout="constrained")
        for label, (images, means) in curves.items():
            axes.plot(images, means, marker=".", label=label)
        axes.axhline(chance, color="0.6", linewidth=1, label="chance")
        axes.set_xlabel("pre-training images seen")
        shots = next(row["few_shot_during_pretraining_shots"] for row in rows if row["few_shot_during_pretraining"])
        axes.set_ylabel(f"{shots}-shot accuracy (%), "
                        f"mean of {len(results['seeds'])} seeds")
        axes.set_ylim(0, None)  # from 0: differences read at their size
        # The monitor scores a slice of the training split, whose labels supervised pre-training has trained on.
        axes.set_title("during pre-training, on a fixed slice of the training split", fontsize="medium")
        axes.legend(fontsize="small")
        paths.append(output_dir / "few_shot_during_pretraining.png")
        figure.savefig(paths[-1], dpi=120)
        plt.close(figure)
    return paths


def monitor_plot_figures(results: dict[str, Any]) -> tuple[dict[str, tuple[list[int], list[float]]], float]:
    """What few_shot_during_pretraining.png draws: each monitored row's curve (images seen, accuracy in % averaged
    over the seeds, as far as every seed's curve reaches) and chance, the line to read them against. The monitor's
    slice holds the same number of images of every class, so always answering the largest class scores chance."""
    curves = {}
    for row in results["rows"].values():
        if row["few_shot_during_pretraining"]:
            seeds = list(row["few_shot_during_pretraining"].values())
            length = min(len(curve) for curve in seeds)
            curves[row["label"]] = ([point[0] for point in seeds[0][:length]],
                                    [100 * statistics.fmean(curve[i][1] for curve in seeds) for i in range(length)])
    return curves, 100 / results["classes"]


def finetune_plot_figures(results: dict[str, Any]) -> tuple[str, list[list[float]], dict[str, float]]:
    """What finetune_accuracy.png draws, in % and in the claims' measure (balanced accuracy where recorded): that
    measure's name, each row's value per seed, and the reference lines: the raw-pixel fits to the same labelled images
    and, in plain accuracy only, always answering the largest class (in balanced accuracy that scores chance, drawn
    anyway)."""
    key = headline(results)
    balanced = key == "finetune_balanced_accuracy"
    values = [[100 * value for value in row[key]] for row in results["rows"].values()]
    references = {BASELINES[script]: 100 * statistics.fmean(
        results["pixels"][f"{script}_labelled{'_balanced' if balanced else ''}"]) for script in BASELINES}
    if not balanced:
        references["always the largest class"] = 100 * results["majority_class_accuracy"]
    return ("balanced accuracy" if balanced else "accuracy"), values, references


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
