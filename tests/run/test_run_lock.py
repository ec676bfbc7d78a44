"""One writer per run directory (mpp/run.py): a held directory is refused, naming its holder; a lock whose holder
is gone is taken over; a run releases its lock when it ends, well or not."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

import mpp.run
from launching import NO_MPP_MONITORS, TINY, launch, start, wait_for_log
from mpp.run import LOCK_FILE, LockHolder, RunDirectoryError, RunDirectoryInUse, RunLock, claim_output_dir


def write_lock(run_dir, host: str, pid: int, age_s: float = 0.0) -> None:
    path = run_dir / LOCK_FILE
    path.write_text(json.dumps({"host": host, "pid": pid, "started": "2026-01-01T00:00:00"}))
    then = time.time() - age_s
    os.utime(path, (then, then))


@pytest.fixture
def live_process():
    """The pid of a process that runs until the test ends."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield process.pid
    process.kill()
    process.wait()


def ended_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_directory_held_by_a_live_process_is_refused_naming_it(tmp_path, live_process):
    write_lock(tmp_path, socket.gethostname(), live_process)
    with pytest.raises(RunDirectoryInUse, match=f"in use by another run: process {live_process} on host "
                                                f"{socket.gethostname()}, started 2026-01-01T00:00:00"):
        RunLock(tmp_path).acquire()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == live_process  # left as it was


def test_a_lock_on_another_host_is_respected_while_fresh_and_taken_over_when_stale(tmp_path, caplog):
    write_lock(tmp_path, "elsewhere", 1, age_s=mpp.run.STALE_AFTER_S / 2)
    with pytest.raises(RunDirectoryInUse, match="host elsewhere"):
        RunLock(tmp_path).acquire()
    write_lock(tmp_path, "elsewhere", 1, age_s=mpp.run.STALE_AFTER_S * 2)
    lock = RunLock(tmp_path)
    lock.acquire()
    assert "took over the lock" in caplog.text and "process 1 on host elsewhere" in caplog.text
    assert mpp.run.read_holder(tmp_path / LOCK_FILE) == lock.holder
    lock.release()
    assert not (tmp_path / LOCK_FILE).exists()


@pytest.mark.parametrize("left", ["ended process", "half-written file"])
def test_a_lock_whose_holder_is_gone_is_taken_over(tmp_path, caplog, left):
    if left == "ended process":
        write_lock(tmp_path, socket.gethostname(), ended_pid())
    else:
        (tmp_path / LOCK_FILE).write_text('{"host": "')
    lock = RunLock(tmp_path)
    lock.acquire()
    assert "took over the lock" in caplog.text
    assert LockHolder(**json.loads((tmp_path / LOCK_FILE).read_text())) == lock.holder
    lock.release()


def test_the_holder_refreshes_its_lock_while_it_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(mpp.run, "REFRESH_S", 0.05)
    lock = RunLock(tmp_path)
    lock.acquire()
    path = tmp_path / LOCK_FILE
    os.utime(path, (0, 0))
    deadline = time.monotonic() + 10
    while path.stat().st_mtime == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert time.time() - path.stat().st_mtime < 5
    lock.release()


def test_a_held_directory_is_refused_before_anything_is_changed_even_with_overwrite(tmp_path, live_process):
    (tmp_path / "metrics.json").write_text("{}")
    write_lock(tmp_path, socket.gethostname(), live_process)
    for resume, overwrite in [(True, False), (False, True)]:
        with pytest.raises(RunDirectoryError, match="in use by another run"):
            claim_output_dir(tmp_path, resume=resume, overwrite=overwrite)
    assert (tmp_path / "metrics.json").read_text() == "{}"


def test_overwriting_a_run_keeps_the_lock_it_takes(tmp_path):
    (tmp_path / "metrics.json").write_text("{}")
    (tmp_path / "checkpoints").mkdir()
    lock = claim_output_dir(tmp_path, resume=False, overwrite=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == [LOCK_FILE]
    lock.release()
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_second_run_on_a_running_one_is_refused_and_a_killed_holder_is_taken_over(tmp_path):
    run_dir = tmp_path / "run"
    args = (*TINY, *NO_MPP_MONITORS, "train.checkpoint_every=2", f"output_dir={run_dir}")
    first = start(*args, "train.steps=1000")
    try:
        wait_for_log(run_dir / "log.txt", r"step 4\b", first)  # step 2's checkpoint is whole
        os.killpg(first.pid, signal.SIGSTOP)  # held, alive, until the second run has tried
        second = launch(*args, "train.steps=1000", "--resume", check=False)
        assert second.returncode != 0
        refusal = [line for line in second.stderr.splitlines() if line.startswith("error:")]
        assert len(refusal) == 1, second.stderr[-2000:]
        assert "in use by another run: process" in refusal[0] and f"host {socket.gethostname()}" in refusal[0]
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # as the OOM killer or a lost node would: no chance to clean up
        first.wait()
    assert (run_dir / LOCK_FILE).exists()
    newest = max(int(path.name.removeprefix("step_")) for path in (run_dir / "checkpoints").iterdir()
                 if path.name.removeprefix("step_").isdigit())
    resumed = launch(*args, f"train.steps={newest + 2}", "--resume")
    assert "took over the lock" in resumed.stderr
    assert (run_dir / "metrics.json").exists() and not (run_dir / LOCK_FILE).exists()
