"""Runs an experiment's grid of recipe runs: each a subprocess with a command line a researcher can rerun alone and a
directory of its own under the experiment's ``output_dir``, several at a time, each after the runs it starts from.

A stopped experiment continues where it stopped when the same command runs again: finished runs (those with a
``metrics.json``) are kept, interrupted training runs resume from their checkpoints. SIGTERM or SIGINT starts no more
runs and passes SIGTERM on to those under way.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import yaml

from mpp.commands import COMMANDS
from mpp.config.building import config_to_dict
from mpp.errors import ConfigError, RunError
from mpp.experiments.config import ExperimentConfig
from mpp.experiments.publishing import published_results
from mpp.run import METRICS_FILE, read_metrics

# The names meant for use outside the package (study/, tools/ and users)
__all__ = [
    "Run", "at_first_seeds_rate", "claim_experiment", "execute", "recipe_command", "run_experiment",
]

logger = logging.getLogger(__name__)


PLAN_FILE = "experiment.yaml"  # the settings an experiment started with: it continues only with the same ones
EARLIER_PLAN_FILE = "reproduce.yaml"  # that file's name in mpp 0.2 and before: experiments started then continue

ELAPSED_FILE = "elapsed.json"  # wall time of every invocation so far


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


def recipe_command(cfg: ExperimentConfig, command: str, preset: str, overrides: tuple[str, ...], seed: int,
                   run_dir: Path) -> tuple[str, ...]:
    """The command line of one run of an experiment ``cfg`` (its ``launcher`` and ``parallel_runs``): ``python -m
    mpp <command>`` of the installed package, with its preset and overrides; on a CPU, each run gets its share of the
    cores."""
    launcher = list(cfg.launcher) or [sys.executable]
    evaluation = COMMANDS[command].kind == "evaluation"
    threads = max(1, len(os.sched_getaffinity(0)) // cfg.parallel_runs) if not torch.cuda.is_available() else 0
    cpu = [f"{'eval' if evaluation else 'train'}.cpu_threads={threads}"] if threads else []
    # A training run continues from its checkpoints; an evaluation has none and starts again.
    again = "overwrite=true" if evaluation else "resume=auto"
    return (*launcher, "-m", "mpp", command, "--config", preset, *overrides, *cpu, f"seed={seed}",
            f"output_dir={run_dir}", again)


def at_first_seeds_rate(cfg: ExperimentConfig, tuned: str, seed: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """With ``tune_once``, a fine-tuning run of a later seed trains at the learning rate its first seed's run
    ``tuned`` chose, without a sweep of its own: its overrides and the runs it waits for (none for the first seed, or
    without ``tune_once``)."""
    if not cfg.tune_once or seed == cfg.seeds[0]:
        return (), ()
    return ("finetune.sweep_lrs=[]", f"finetune.lr_from={Path(cfg.output_dir) / tuned}"), (tuned,)


class RunFailed(RunError):
    """A run of the grid exited with an error."""


def fixed_settings(settings: dict[str, Any], defaults: dict[str, Any], free: tuple[str, ...]) -> dict[str, Any]:
    """An experiment's settings less those it may change when continued (``free``); a setting added to the package
    since the experiment started reads as its default."""
    return {key: value for key, value in {**defaults, **settings}.items() if key not in free}


def claim_experiment(cfg: ExperimentConfig) -> Path:
    """``output_dir`` for this experiment: new, or holding one with the same settings (to continue it)."""
    output_dir = Path(cfg.output_dir)
    plan = output_dir / (EARLIER_PLAN_FILE if (output_dir / EARLIER_PLAN_FILE).is_file() else PLAN_FILE)
    settings, defaults, free = config_to_dict(cfg), config_to_dict(type(cfg)()), cfg.FREE_ON_CONTINUE
    if plan.is_file() and (fixed_settings(yaml.safe_load(plan.read_text()), defaults, free)
                           != fixed_settings(settings, defaults, free)):
        if any(output_dir.glob(f"*/*/{METRICS_FILE}")):
            raise ConfigError(f"output_dir {output_dir} holds an experiment with other settings ({plan}) and finished "
                              f"runs; choose another output_dir, or delete that one to start again (only "
                              f"{', '.join(free)} may change)")
        # None of its runs finished (one failed on a setting, say): the corrected command takes the folder over
        logger.info("output_dir %s holds an experiment none of whose runs finished: it continues with these settings",
                    output_dir)
    if not plan.is_file() and output_dir.is_dir() and any(output_dir.iterdir()):
        raise ConfigError(f"output_dir {output_dir} is not empty and holds no {PLAN_FILE}; choose another output_dir")
    (output_dir / "console").mkdir(parents=True, exist_ok=True)
    plan.write_text(yaml.safe_dump(settings, sort_keys=False))
    return output_dir


def execute(runs: list[Run], output_dir: Path, parallel_runs: int,
            on_finished: Optional[Callable[[Run], None]] = None) -> None:
    """Run every run not yet finished, ``parallel_runs`` at a time, each once the run it starts from has finished,
    calling ``on_finished`` with each run that finishes (to record results as they come in). Each run's console output
    goes to ``console/<stage>-<row>-seed<seed>.txt``. A failed run stops only the runs
    that start from it; ``RunFailed`` names it once every other run has ended. SIGTERM or SIGINT (a scheduler, Ctrl-C)
    starts no more runs and passes SIGTERM on to those under way, which save a checkpoint and stop;
    ``ExperimentStopped`` follows once they have ended."""
    finished = {run.name for run in runs if read_metrics(run.directory(output_dir)) is not None}
    waiting = [run for run in runs if run.name not in finished]
    logger.info("%d runs, %d already finished", len(runs), len(finished))
    failed: list[str] = []
    progress = Progress(waiting, len(runs), len(finished), parallel_runs)
    with ThreadPoolExecutor(parallel_runs) as pool, StopRequests() as stop:
        under_way: dict[Future, Run] = {}
        while waiting or under_way:
            ready = [run for run in waiting if set(run.waits_for) <= finished] if not stop.signum else []
            for run in ready[: parallel_runs - len(under_way)]:
                waiting.remove(run)
                under_way[pool.submit(run_one, run, output_dir, stop)] = run
                progress.started(run)
            if not under_way:
                break  # only runs after a failed one are left, or a stop was asked for: they cannot start
            done, _ = wait(under_way, timeout=1.0, return_when=FIRST_COMPLETED)  # the timeout: to see a stop
            for future in done:
                run = under_way.pop(future)
                if future.result() == 0:
                    finished.add(run.name)
                    progress.finished(run)
                    if on_finished:
                        on_finished(run)
                else:
                    failed.append(f"{run.name} (exit {future.result()}; see {console_path(run, output_dir)})")
    if stop.signum:
        raise ExperimentStopped(f"stopped by {signal.Signals(stop.signum).name}: {len(waiting)} runs not started, "
                                "those under way asked to save a checkpoint and stop. Running the same command again "
                                "continues the experiment from where it stopped")
    if failed:
        raise RunFailed("runs failed: " + "; ".join(failed) + ". Running the same command again continues the "
                        "experiment from where it stopped")


class Progress:
    """Says, as each run finishes, how many of the experiment's runs are done and about how long the rest will take:
    each run left at the mean time its stage's runs took here, ``parallel_runs`` at a time; the stages none of whose
    runs has finished yet are named, not guessed."""

    def __init__(self, waiting: list[Run], total: int, done_before: int, parallel_runs: int) -> None:
        self.total, self.done, self.parallel_runs = total, done_before, parallel_runs
        self.left = {run.name: run.stage for run in waiting}
        self.start = time.perf_counter()
        self.began: dict[str, float] = {}
        self.took: dict[str, list[float]] = {}

    def started(self, run: Run) -> None:
        self.began[run.name] = time.perf_counter()

    def finished(self, run: Run) -> None:
        self.done += 1
        self.took.setdefault(run.stage, []).append(time.perf_counter() - self.began[run.name])
        del self.left[run.name]
        left = sum(statistics.fmean(self.took[stage]) for stage in self.left.values() if stage in self.took)
        untimed = sorted({stage for stage in self.left.values() if stage not in self.took})
        logger.info("progress: %d of %d runs done, %.1f min so far; about %.0f min left at this pace%s", self.done,
                    self.total, (time.perf_counter() - self.start) / 60, left / self.parallel_runs / 60,
                    f", and the {', '.join(untimed)} runs, none timed yet" if untimed else "")


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


def elapsed_seconds(output_dir: Path, add: float = 0.0) -> float:
    """The experiment's wall time over every invocation so far, ``add`` seconds (this one's) included and kept."""
    path = output_dir / ELAPSED_FILE
    total = (json.loads(path.read_text())["seconds"] if path.is_file() else 0.0) + add
    path.write_text(json.dumps({"seconds": total}) + "\n")
    return total


def run_experiment(cfg: ExperimentConfig, plan: Callable[[], list[Run]], results_of: Callable[[], dict[str, Any]],
                   publish: Callable[[dict[str, Any], Path], dict[str, Any]]) -> dict[str, Any]:
    """An experiment from its start or from where it stopped: its ``plan``'s runs not yet finished, then results.json
    (``results_of`` the finished runs, with the wall time of every invocation and how many runs ran: a later
    ``tables_only`` may plan another grid), then ``publish``. With ``tables_only``: ``publish`` of the published
    results.json, running nothing."""
    if cfg.tables_only:
        folder, results = published_results(cfg)
        return publish(results, folder)
    start = time.perf_counter()
    output_dir = claim_experiment(cfg)
    runs = plan()
    try:
        execute(runs, output_dir, cfg.parallel_runs)
    finally:
        wall_seconds = elapsed_seconds(output_dir, time.perf_counter() - start)
    results = results_of() | {"wall_seconds": wall_seconds, "runs": len(runs)}
    (output_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    results = publish(results, output_dir)
    written = ", ".join(sorted(path.name for path in output_dir.iterdir() if path.suffix in (".md", ".json", ".png")
                               and path.name != ELAPSED_FILE))
    logger.info("results in %s (%s); %.1f minutes of wall time\n%s", output_dir, written, wall_seconds / 60,
                results["table"])
    return results
