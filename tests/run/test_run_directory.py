"""Where a run goes: its output_dir, a new folder named by the clock, or with --resume and no output_dir the newest
run of its entry point; and the command that continues a stopped run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mpp.command_line import continue_command
from mpp.run import RunDirectoryError, resolve_output_dir


def started_run(root: Path, name: str) -> Path:
    run = root / "runs" / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    return run


def test_resume_without_output_dir_continues_the_newest_run_of_the_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    started_run(tmp_path, "mpp-20261127-101500")
    started_run(tmp_path, "mpp-20261127-121500")
    started_run(tmp_path, "finetune-20261127-131500")  # another recipe's, newer
    (tmp_path / "runs" / "mpp-20261127-131600").mkdir()  # never started: no config written
    assert resolve_output_dir("", "mpp", resume_newest=True) == Path("runs/mpp-20261127-121500")
    assert resolve_output_dir("runs/mine", "mpp", resume_newest=True) == Path("runs/mine")  # output_dir wins
    assert resolve_output_dir("", "mpp").name.startswith("mpp-2")  # a new run: the clock names it
    with pytest.raises(RunDirectoryError, match=r"--resume without output_dir continues the newest supervised run "
                                                r"under runs/, and there is none \(runs/supervised-\*\); give "
                                                r"output_dir=<the run's directory>"):
        resolve_output_dir("", "supervised", resume_newest=True)


def test_the_continue_command_is_the_same_one_with_resume_and_the_run_directory(tmp_path, monkeypatch):
    run = started_run(tmp_path, "mpp-20261127-121500")
    checkpoint = run / "sweep" / "lr_0.1" / "checkpoints" / "step_00000040"  # a sweep point's: the run is above it
    monkeypatch.delenv("ACCELERATE_DYNAMO_BACKEND", raising=False)
    argv = ["--config", "my preset.yaml", "train.steps=10", "output_dir=elsewhere", "--resume"]
    assert continue_command(checkpoint, ["recipes/mpp.py"], argv) == (
        f"{sys.executable} recipes/mpp.py --config 'my preset.yaml' train.steps=10 --resume output_dir={run}")
    assert continue_command(checkpoint, ["-m", "mpp", "pretrain"], argv) == (
        f"{sys.executable} -m mpp pretrain --config 'my preset.yaml' train.steps=10 --resume output_dir={run}")
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "NO")  # started by accelerate launch
    assert continue_command(checkpoint, ["-m", "mpp", "pretrain"], argv).startswith(
        "accelerate launch -m mpp pretrain --config")
