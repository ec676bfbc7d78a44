"""The paper's masked patch prediction findings (Sec. 4.6, App. B.1.2), tested with this package's own recipes.

Four claims: MPP pre-training beats training from scratch after fine-tuning; it stays behind supervised
pre-training; the L2 pixel target is slightly worse than the colour targets; a 15% corruption rate is slightly
worse than 50%. The grid's rows and claims are the config's (``rows``, ``claims``: by default the paper's,
``mpp.config.PAPER_ROWS`` and ``PAPER_CLAIMS``; a preset may list others). Each row is pre-trained (or not), then
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

import json
import logging
import os
import re
import shutil
import statistics
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
import yaml

from mpp.config import FinetuneRunConfig, ReproductionConfig, ReproductionRow
from mpp.config_loading import build_config, config_to_dict
from mpp.data.loading import build_dataset
from mpp.errors import ConfigError, RunError
from mpp.evaluation.statistics import PairedDifference, describe_difference, holm_adjusted, paired_difference
from mpp.metrics import majority_class_accuracy
from mpp.models.encoder import create_encoder
from mpp.run.directory import read_metrics, write_whole

logger = logging.getLogger(__name__)
SCRIPTS = {"mpp": "recipes/mpp.py", "supervised": "recipes/supervised.py", "finetune": "recipes/finetune.py",
           "few_shot": "eval/few_shot.py", "linear_probe": "eval/linear_probe.py",
           "knn": "eval/knn.py"}  # relative to the repository, which the caller names
EVALUATIONS = ("few_shot", "linear_probe", "knn")  # scripts of eval/: no checkpoints, the eval preset
PLAN_FILE = "reproduce.yaml"
ELAPSED_FILE = "elapsed.json"  # wall time of every invocation so far


PIXELS_ROW = "pixels"  # few-shot regression on the normalised pixels themselves: no encoder at all
BASELINES = {"linear_probe": "logistic regression on raw pixels", "knn": "kNN on raw pixels (cosine)"}


@dataclass(frozen=True)
class Run:
    """One recipe run of the grid."""

    name: str  # <stage>/<row>-seed<seed>, also its directory under output_dir
    stage: str  # "pretrain", "finetune" or "few_shot"
    command: tuple[str, ...]
    after: Optional[str]  # the run whose output it starts from
    also_after: tuple[str, ...] = ()  # runs whose results it reads besides (tune_once: the learning rate chosen)

    def directory(self, output_dir: Path) -> Path:
        return output_dir / self.name

    @property
    def waits_for(self) -> tuple[str, ...]:
        return (*((self.after,) if self.after else ()), *self.also_after)


def class_balance(config_class: type, preset: str, overrides: tuple[str, ...]) -> dict[str, Any]:
    """What a classifier must beat on the test split of a stage's data (its ``preset`` with ``overrides``): always
    answering its largest class (plain accuracy's floor), and chance (balanced accuracy's)."""
    run = build_config(config_class, preset, overrides)
    image_size = create_encoder(run.model).patch_embed.img_size[0]
    labels = build_dataset(run.data, "test", image_size, run.model.in_chans, augment=False).labels
    return {"majority_class_accuracy": majority_class_accuracy(labels), "classes": int(labels.max()) + 1}


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


def recipe_command(cfg: Any, repository: Path, script: str, preset: str, overrides: tuple[str, ...], seed: int,
                   run_dir: Path) -> tuple[str, ...]:
    """The command line of one run of an experiment ``cfg`` (its ``launcher`` and ``parallel_runs``): ``script``
    of ``repository`` with its preset and overrides; on a CPU, each run gets its share of the cores."""
    launcher = list(cfg.launcher) or [sys.executable]
    threads = max(1, len(os.sched_getaffinity(0)) // cfg.parallel_runs) if not torch.cuda.is_available() else 0
    cpu = [f"{'eval' if script in EVALUATIONS else 'train'}.cpu_threads={threads}"] if threads else []
    # A training run continues from its checkpoints; an evaluation has none and starts again.
    again = "overwrite=true" if script in EVALUATIONS else "resume=auto"
    return (*launcher, str(repository / SCRIPTS[script]), "--config", preset, *overrides, *cpu, f"seed={seed}",
            f"output_dir={run_dir}", again)


class RunFailed(RunError):
    """A run of the grid exited with an error."""


# Settings an experiment may change when continued: which seeds (each seed's runs are independent of the others', so
# an experiment at 3 seeds grows to 5 by running again with 5), how many runs at once, and where results are published.
FREE_TO_CHANGE = ("seeds", "parallel_runs", "publish_dir", "results_page", "tables_only", "chance_margin")


def fixed_settings(settings: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """An experiment's settings less those it may change when continued; a setting added to the package since the
    experiment started reads as its default."""
    return {key: value for key, value in {**defaults, **settings}.items() if key not in FREE_TO_CHANGE}


def claim_experiment(cfg: ReproductionConfig) -> Path:
    """``output_dir`` for this experiment: new, or holding one with the same settings (to continue it)."""
    output_dir = Path(cfg.output_dir)
    plan = output_dir / PLAN_FILE
    settings, defaults = config_to_dict(cfg), config_to_dict(type(cfg)())
    if plan.is_file() and (fixed_settings(yaml.safe_load(plan.read_text()), defaults)
                           != fixed_settings(settings, defaults)):
        raise ConfigError(f"output_dir {output_dir} holds an experiment with other settings ({plan}); choose another "
                          f"output_dir, or delete that one to start again (only {', '.join(FREE_TO_CHANGE)} may "
                          "change)")
    if not plan.is_file() and output_dir.is_dir() and any(output_dir.iterdir()):
        raise ConfigError(f"output_dir {output_dir} is not empty and holds no {PLAN_FILE}; choose another output_dir")
    (output_dir / "console").mkdir(parents=True, exist_ok=True)
    plan.write_text(yaml.safe_dump(settings, sort_keys=False))
    return output_dir


def execute(runs: list[Run], output_dir: Path, parallel_runs: int) -> None:
    """Run every run not yet finished, ``parallel_runs`` at a time, each once the run it starts from has finished.
    Each run's console output goes to ``console/<stage>-<row>-seed<seed>.txt``. A failed run stops only the runs
    that start from it; ``RunFailed`` names it once every other run has ended. SIGTERM or SIGINT (a scheduler, Ctrl-C)
    starts no more runs and passes SIGTERM on to those under way, which save a checkpoint and stop;
    ``ExperimentStopped`` follows once they have ended."""
    finished = {run.name for run in runs if read_metrics(run.directory(output_dir)) is not None}
    waiting = [run for run in runs if run.name not in finished]
    logger.info("%d runs, %d already finished", len(runs), len(finished))
    failed: list[str] = []
    with ThreadPoolExecutor(parallel_runs) as pool, StopRequests() as stop:
        under_way: dict[Future, Run] = {}
        while waiting or under_way:
            ready = [run for run in waiting if set(run.waits_for) <= finished] if not stop.signum else []
            for run in ready[: parallel_runs - len(under_way)]:
                waiting.remove(run)
                under_way[pool.submit(run_one, run, output_dir, stop)] = run
            if not under_way:
                break  # only runs after a failed one are left, or a stop was asked for: they cannot start
            done, _ = wait(under_way, timeout=1.0, return_when=FIRST_COMPLETED)  # the timeout: to see a stop
            for future in done:
                run = under_way.pop(future)
                if future.result() == 0:
                    finished.add(run.name)
                else:
                    failed.append(f"{run.name} (exit {future.result()}; see {console_path(run, output_dir)})")
    if stop.signum:
        raise ExperimentStopped(f"stopped by {signal.Signals(stop.signum).name}: {len(waiting)} runs not started, "
                                "those under way asked to save a checkpoint and stop. Running the same command again "
                                "continues the experiment from where it stopped")
    if failed:
        raise RunFailed("runs failed: " + "; ".join(failed) + ". Running the same command again continues the "
                        "experiment from where it stopped")


class ExperimentStopped(RunError):
    """A signal stopped the experiment before every run had finished."""


class StopRequests:
    """While open: SIGTERM and SIGINT are recorded (``signum``) and passed on as SIGTERM to the runs under way (their
    recipes then save a checkpoint and exit), instead of ending this process and orphaning them. In the main thread
    only, where Python delivers signals."""

    def __init__(self) -> None:
        self.live: dict[str, subprocess.Popen] = {}  # the processes of the runs under way, by name
        self.signum, self.previous = 0, {}

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            self.previous = {signum: signal.signal(signum, self.stop) for signum in (signal.SIGTERM, signal.SIGINT)}
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def stop(self, signum: int, frame: Any) -> None:
        self.signum = signum
        for process in list(self.live.values()):
            process.send_signal(signal.SIGTERM)

    def started(self, name: str, process: subprocess.Popen) -> None:
        self.live[name] = process
        if self.signum:  # asked to stop while this run was being started
            process.send_signal(signal.SIGTERM)


def console_path(run: Run, output_dir: Path) -> Path:
    return output_dir / "console" / f"{run.name.replace('/', '-')}.txt"


def run_one(run: Run, output_dir: Path, stop: StopRequests) -> int:
    """``run`` to its end; a stop asked for meanwhile reaches its process."""
    logger.info("start %s: %s", run.name, " ".join(run.command))
    with console_path(run, output_dir).open("a") as console:
        process = subprocess.Popen(run.command, stdout=console, stderr=subprocess.STDOUT)
        stop.started(run.name, process)
        code = process.wait()
        del stop.live[run.name]
    logger.info("%s %s", "done" if code == 0 else f"FAILED (exit {code})", run.name)
    return code


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


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


def percent(values: list[float]) -> str:
    mean, std = mean_std([100 * value for value in values])
    return f"{mean:.1f} ± {std:.1f}"


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


def markdown_table(header: list[str], body: list[list[str]], left_columns: int = 1) -> list[str]:
    """A Markdown table's lines and a blank line after it; the columns after the first ``left_columns`` align right
    (figures)."""
    rule = "|" + "|".join("---" if column < left_columns else "---:" for column in range(len(header))) + "|"
    return ["| " + " | ".join(header) + " |", rule, *("| " + " | ".join(cells) + " |" for cells in body), ""]


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


@dataclass(frozen=True)
class Comparison:
    """One cell of the comparison tables: ``finding``, read in ``column`` by ``measure``, as the paired difference
    over the seeds."""

    finding: str
    column: str
    measure: str
    difference: PairedDifference


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


def comparison_table(title: str, comparisons: list[Comparison], preferred: str) -> list[str]:
    """``comparisons`` as a table: a row per finding, a column per reading ("—" where a finding is not read); a cell
    read by another measure than ``preferred`` says so."""
    columns = list(dict.fromkeys(comparison.column for comparison in comparisons))
    columns.sort(key=lambda column: column != "Fine-tuned")  # fine-tuned first, the rest as they came
    cells = {(comparison.finding, comparison.column): measured_cell(comparison, preferred) for comparison in comparisons}
    findings = list(dict.fromkeys(comparison.finding for comparison in comparisons))
    body = [[finding, *(cells.get((finding, column), "—") for column in columns)] for finding in findings]
    return markdown_table([title, *columns], body, left_columns=len(columns) + 1)


def measured_cell(comparison: Comparison, preferred: str) -> str:
    """describe_difference's cell, naming the measure where it is not ``preferred``."""
    cell = describe_difference(comparison.difference, claimed=True)
    if comparison.measure == preferred:
        return cell
    return f"{cell[:-1]}; {comparison.measure})" if cell.endswith(")") else f"{cell} ({comparison.measure})"


def holm_summary(comparisons: list[Comparison]) -> list[str]:
    """How many comparisons the tables read, and which of those shown stay shown after a Holm correction across
    all of them (5% family-wise)."""
    tested = [comparison for comparison in comparisons if comparison.difference.p_value is not None]
    adjusted = holm_adjusted([comparison.difference.p_value for comparison in tested])
    shown = sum(comparison.difference.shown for comparison in tested)
    kept = [f"{comparison.finding} ({comparison.column}: {'the opposite, ' if comparison.difference.mean < 0 else ''}"
            f"Holm p {p:.2g})" for comparison, p in zip(tested, adjusted)
            if comparison.difference.shown and p is not None and p < 0.05]
    said = (f"These tables read {len(tested)} comparisons, {shown} shown each on its own; after a Holm correction "
            f"across all {len(tested)} (5% family-wise), ")
    stay = f"{len(kept)} {'stays' if len(kept) == 1 else 'stay'} shown: {'; '.join(kept)}."
    return [said + (stay if kept else "none stays shown."), ""]


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


def elapsed_seconds(output_dir: Path, add: float = 0.0) -> float:
    """The experiment's wall time over every invocation so far, ``add`` seconds (this one's) included and kept."""
    path = output_dir / ELAPSED_FILE
    total = (json.loads(path.read_text())["seconds"] if path.is_file() else 0.0) + add
    path.write_text(json.dumps({"seconds": total}) + "\n")
    return total


def write_results(cfg: ReproductionConfig, wall_seconds: float, runs: int) -> dict[str, Any]:
    """results.json (every seed's figures and how many ``runs`` ran), then ``publish``: the tables and plots."""
    output_dir = Path(cfg.output_dir)
    results = collect_results(cfg)
    results["wall_seconds"] = wall_seconds
    results["runs"] = runs  # what ran: a later tables_only may plan another grid
    (output_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return publish(cfg, results, output_dir)


def publish(cfg: ReproductionConfig, results: dict[str, Any], folder: Path) -> dict[str, Any]:
    """results.md (the tables and the wall time) and the plots, in ``folder`` beside its results.json; copied to
    ``publish_dir`` and into ``results_page``'s section, where set. Returns ``results`` with the table and the plots'
    paths."""
    table = publish_table(cfg, folder, results_table(results), results["runs"], results["wall_seconds"])
    plots = plot_results(results, folder)
    copy_to_publish_dir(cfg, folder, plots)
    return {**results, "table": table, "plots": [str(path) for path in plots]}


def publish_table(cfg: Any, folder: Path, table: str, runs: int, wall_seconds: float) -> str:
    """An experiment's ``table`` with its wall time: written to ``folder``/results.md and into ``results_page``'s
    section, where set; returned."""
    table += f"\n{runs} runs, {cfg.parallel_runs} at a time, in {wall_seconds / 60:.0f} min of wall time.\n"
    (folder / "results.md").write_text(table)
    if cfg.results_page:
        replace_section(Path(cfg.results_page), Path(cfg.output_dir).name, table)
    return table


def copy_to_publish_dir(cfg: Any, folder: Path, plots: list[Path]) -> None:
    """results.md, results.json and the plots of ``folder`` copied to ``publish_dir``, where set (and another)."""
    if cfg.publish_dir and Path(cfg.publish_dir).resolve() != folder.resolve():
        published = Path(cfg.publish_dir)
        published.mkdir(parents=True, exist_ok=True)
        for path in [folder / "results.md", folder / "results.json", *plots]:
            shutil.copyfile(path, published / path.name)


def published_results(cfg: Any) -> tuple[Path, dict[str, Any]]:
    """The folder of an experiment's published results.json (``publish_dir``, else ``output_dir``) and its
    contents, for ``tables_only``."""
    folder = Path(cfg.publish_dir or cfg.output_dir)
    path = folder / "results.json"
    if not path.is_file():
        raise ConfigError(f"tables_only=true rewrites the tables from {path}, which does not exist; run the "
                          "experiment first (without tables_only)")
    return folder, json.loads(path.read_text())


def rewrite_tables(cfg: ReproductionConfig) -> dict[str, Any]:
    """The tables, plots and page section written again from the published results.json, running nothing: for a
    change of how results are shown."""
    folder, results = published_results(cfg)
    recorded = dict(results)
    if "classes" not in results:  # written before the class balance was recorded: added from the data
        results |= finetuning_class_balance(cfg)
    if "runs" not in results:  # written before the run count was recorded: the count its results.md printed
        results["runs"] = int(re.search(r"^(\d+) runs, ", (folder / "results.md").read_text(), flags=re.M)[1])
    if results != recorded:
        write_whole(folder / "results.json",
                    lambda partial: partial.write_text(json.dumps(results, indent=2) + "\n"))
    return publish(cfg, results, folder)


def section_markers(name: str) -> tuple[str, str]:
    return f"<!-- results: {name} -->", f"<!-- /results: {name} -->"


def check_section(page: Path, name: str) -> None:
    """A ConfigError unless ``page`` holds the section ``name`` once (checked before the experiment starts)."""
    start, end = section_markers(name)
    text = page.read_text() if page.is_file() else ""
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ConfigError(f"results_page={page} needs one section to write the results into: a line {start}, then "
                          f"a line {end}; add them, or leave results_page empty")


def replace_section(page: Path, name: str, content: str) -> None:
    """``page`` with its section ``name`` holding ``content``, written whole or not at all."""
    check_section(page, name)
    start, end = section_markers(name)
    text = page.read_text()
    before, rest = text.split(start, 1)
    after = rest.split(end, 1)[1]
    write_whole(page, lambda partial: partial.write_text(f"{before}{start}\n{content}{end}{after}"))


def reproduce(cfg: ReproductionConfig, repository: Path) -> dict[str, Any]:
    """The whole experiment: every run not yet finished (the recipes of ``repository``), then the tables and the
    plots."""
    if cfg.results_page:
        check_section(Path(cfg.results_page), Path(cfg.output_dir).name)
    if cfg.tables_only:
        return rewrite_tables(cfg)
    start = time.perf_counter()
    output_dir = claim_experiment(cfg)
    runs = plan_runs(cfg, repository)
    try:
        execute(runs, output_dir, cfg.parallel_runs)
    finally:
        wall_seconds = elapsed_seconds(output_dir, time.perf_counter() - start)
    results = write_results(cfg, wall_seconds, len(runs))
    logger.info("results in %s (%s), plots %s; the experiment took %.1f minutes of wall time\n%s",
                output_dir / "results.md", output_dir / "results.json", ", ".join(results["plots"]),
                wall_seconds / 60, results["table"])
    broken = rows_at_chance(results, cfg.chance_margin)
    if broken:
        raise BrokenBaseline(f"after fine-tuning, {'; '.join(broken)} stayed within {100 * cfg.chance_margin:g} points "
                             "of chance: a row that does not train is a broken baseline, not a result; give it the "
                             "steps and learning rates it needs (finetune: train.steps, finetune.sweep_lrs) and run "
                             "again (the tables above are written, for reading what went wrong)")
    return results
