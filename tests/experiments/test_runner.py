"""The runner every experiment runs on (``mpp.experiments.runner``): runs in order after the runs they start from, a
failure stopping only its dependents, SIGTERM passed on, and an experiment continued only with its own settings."""

from __future__ import annotations

import dataclasses
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mpp.config.building import build_config
from mpp.errors import ConfigError
from mpp.experiments.config import ComparisonConfig
from mpp.experiments import runner
from mpp.experiments.runner import (EARLIER_PLAN_FILE, PLAN_FILE, Progress, Run, RunFailed, claim_experiment,
                                    execute)
from tests.launching import ROOT

PRESET = ROOT / "recipes" / "configs" / "compare_own_images_cpu.yaml"


def fake_run(name: str, output_dir: Path, after: str | None = None, exit_code: int = 0) -> Run:
    """A run that appends its name to output_dir/order.txt, then writes its metrics (or fails)."""
    directory = output_dir / name
    script = (f"import pathlib; pathlib.Path({str(output_dir / 'order.txt')!r}).open('a').write({name!r} + '\\n'); "
              f"d = pathlib.Path({str(directory)!r}); d.mkdir(parents=True, exist_ok=True); "
              + (f"raise SystemExit({exit_code})" if exit_code else "(d / 'metrics.json').write_text('{}')"))
    return Run(name, "pretrain", (sys.executable, "-c", script), after)


def test_sigterm_starts_no_more_runs_and_passes_the_signal_on_to_the_runs_under_way(tmp_path):
    """A scheduler's SIGTERM (or Ctrl-C) to the experiment: the run under way is asked to stop (a recipe then saves a
    checkpoint), the waiting ones never start, and the experiment says how to continue, instead of dying and leaving
    its runs going on, orphaned."""
    (tmp_path / "console").mkdir()
    slow = ("import pathlib, signal, sys, time; out = pathlib.Path(sys.argv[1]); "
            "signal.signal(signal.SIGTERM, lambda *_: (out.with_name('stopped').write_text('yes'), sys.exit(143))); "
            "out.write_text('started'); time.sleep(60)")
    experiment = (f"import sys; from pathlib import Path; from mpp.experiments.runner import Run, execute; "
                  f"root = Path({str(tmp_path)!r}); "
                  f"runs = [Run('a', 'pretrain', (sys.executable, '-c', {slow!r}, str(root / 'a')), None), "
                  f"Run('b', 'pretrain', (sys.executable, '-c', 'pass'), None), "
                  f"Run('c', 'finetune', (sys.executable, '-c', 'pass'), 'a')]; "
                  f"execute(runs, root, parallel_runs=1)")
    process = subprocess.Popen([sys.executable, "-c", experiment], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    for _ in range(1200):  # up to 2 minutes: the experiment's imports alone took over 30 s on two busy cores
        if (tmp_path / "a").is_file():
            break
        time.sleep(0.1)
    assert (tmp_path / "a").is_file(), "the first run never started"
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert "ExperimentStopped: stopped by SIGTERM: 2 runs not started" in stderr
    assert (tmp_path / "stopped").read_text() == "yes"  # the run under way got the signal
    assert not (tmp_path / "console" / "b.txt").exists()  # the waiting run never started


def test_runs_wait_for_their_source_a_failure_stops_its_dependents_and_a_rerun_continues(tmp_path):
    (tmp_path / "console").mkdir()
    order = tmp_path / "order.txt"
    runs = [fake_run("a", tmp_path), fake_run("b", tmp_path, exit_code=3), fake_run("c", tmp_path, after="a"),
            fake_run("d", tmp_path, after="b"),
            dataclasses.replace(fake_run("e", tmp_path, after="a"), also_after=("b",))]  # reads b's results too
    with pytest.raises(RunFailed, match=r"b \(exit 3; see .*console/b.txt\)"):
        execute(runs, tmp_path, parallel_runs=1)
    ran = order.read_text().split()
    assert "d" not in ran and "e" not in ran and ran.index("c") > ran.index("a")
    order.unlink()
    runs[1] = fake_run("b", tmp_path)  # the cause fixed: the same command again runs only what is left
    execute(runs, tmp_path, parallel_runs=1)
    assert order.read_text().split() == ["b", "d", "e"]


def comparison(output_dir: Path, *overrides: str) -> ComparisonConfig:
    return build_config(ComparisonConfig, PRESET, [f"output_dir={output_dir}", *overrides])


def finished_run(output_dir: Path) -> None:
    (output_dir / "pretrain" / "mpp-seed0").mkdir(parents=True)
    (output_dir / "pretrain" / "mpp-seed0" / "metrics.json").write_text("{}")


def test_an_experiment_continues_only_with_its_own_settings(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the preset names its stage presets from the repository root
    output_dir = tmp_path / "experiment"
    cfg = comparison(output_dir)
    claim_experiment(comparison(output_dir, "mpp=[train.epoch=3]"))  # a run failed on this mistyped key, ...
    claim_experiment(cfg)  # ... and none finished: the corrected command takes the folder over
    assert "train.epoch=3" not in (output_dir / PLAN_FILE).read_text()
    finished_run(output_dir)
    claim_experiment(cfg)  # the same settings: continued
    claim_experiment(comparison(output_dir, "seeds=[0,1,2,3,4]", "parallel_runs=2"))  # more seeds: continued
    with pytest.raises(ConfigError, match="holds an experiment with other settings"):
        claim_experiment(comparison(output_dir, "finetune=[train.steps=5]"))
    # A setting added to the package since the experiment started reads as its default there.
    plan = output_dir / PLAN_FILE
    settings = yaml.safe_load(plan.read_text())
    del settings["paper_recipe"]
    plan.write_text(yaml.safe_dump(settings))
    claim_experiment(cfg)
    with pytest.raises(ConfigError, match="holds an experiment with other settings"):
        claim_experiment(comparison(output_dir, "paper_recipe=[augment.mixup_alpha=0]"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("not an experiment")
    with pytest.raises(ConfigError, match="is not empty"):
        claim_experiment(comparison(tmp_path / "other"))


def test_an_experiment_started_under_the_settings_files_earlier_name_continues_under_it(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    output_dir = tmp_path / "experiment"
    claim_experiment(comparison(output_dir))
    finished_run(output_dir)
    (output_dir / PLAN_FILE).rename(output_dir / EARLIER_PLAN_FILE)
    claim_experiment(comparison(output_dir))  # continued, not "not empty"
    with pytest.raises(ConfigError, match=rf"other settings \({output_dir / EARLIER_PLAN_FILE}\)"):
        claim_experiment(comparison(output_dir, "finetune=[train.steps=5]"))
    assert not (output_dir / PLAN_FILE).exists()


def test_progress_counts_the_runs_done_and_times_the_rest_by_their_stages_runs(monkeypatch, caplog):
    now = [0.0]
    monkeypatch.setattr(runner.time, "perf_counter", lambda: now[0])
    runs = [Run(name, stage, ("true",), None) for name, stage in
            (("a", "pretrain"), ("b", "finetune"), ("c", "finetune"), ("d", "knn"))]
    progress = Progress(runs, total=5, done_before=1, parallel_runs=1)  # a fifth run finished before
    with caplog.at_level(logging.INFO, logger="mpp.experiments.runner"):
        progress.started(runs[0])
        now[0] = 600.0
        progress.finished(runs[0])
        progress.started(runs[1])
        now[0] = 720.0
        progress.finished(runs[1])
    first, second = [record.getMessage() for record in caplog.records]
    assert first == ("progress: 2 of 5 runs done, 10.0 min so far; about 0 min left at this pace, and the finetune, "
                     "knn runs, none timed yet")
    assert second == ("progress: 3 of 5 runs done, 12.0 min so far; about 2 min left at this pace, and the knn runs, "
                      "none timed yet")  # c at b's 2 minutes
