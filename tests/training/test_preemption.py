"""SIGTERM / SIGINT during training: a checkpoint at the next step boundary, a clear exit, and a resume that ends
exactly where an uninterrupted run does."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys

import psutil
import pytest
from safetensors.torch import load_file

from mpp.training.checkpoint import StopSignals
from tests.launching import RECIPE, TINY, run_here, start, training_process, wait_for_log

STEPS = ["train.steps=200", "train.log_every=1", "train.checkpoint_every=1000"]


def test_a_signal_only_sets_the_flag_and_the_next_one_acts_as_before():
    default = signal.getsignal(signal.SIGINT)
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.received == signal.SIGINT  # no KeyboardInterrupt
        assert signal.getsignal(signal.SIGINT) is default  # a second Ctrl-C interrupts at once
    assert signal.getsignal(signal.SIGINT) is default


@pytest.mark.slow
def test_a_killed_run_saves_exits_and_resumes_to_the_uninterrupted_result(tmp_path):
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    run_here(f"output_dir={straight}", *TINY, *STEPS)  # the reference, in this process

    # The recipe as the scheduler's process: signalled directly, no launcher in between.
    process = subprocess.Popen([sys.executable, str(RECIPE), f"output_dir={stopped}", *TINY, *STEPS],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_log(stopped / "log.txt", r"step 3/200", process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    step = int(re.search(r"stopped by SIGTERM after step (\d+); checkpoint (\S+) saved: continue with --resume",
                         stderr).group(1))
    assert 3 <= step < 200 and (stopped / "checkpoints" / f"step_{step:08d}").is_dir()
    assert not (stopped / "metrics.json").exists()  # the run is not over
    # The stop line, in the log too, ends with the exact command that continues the run: run it.
    command = re.search(r"saved: continue with --resume.*?: (\S+ \S+ .*--resume output_dir=\S+)$", stderr, re.M)[1]
    assert f"stopped by SIGTERM after step {step}" in (stopped / "log.txt").read_text()
    assert command in (stopped / "log.txt").read_text()
    subprocess.run(shlex.split(command), check=True, capture_output=True, timeout=600)
    checkpoint = stopped / "checkpoints" / f"step_{step:08d}"
    assert f"resumed from {checkpoint} at step {step}" in (stopped / "log.txt").read_text()
    resumed, uninterrupted = (load_file(run / "export" / "model.safetensors") for run in (stopped, straight))
    assert all((resumed[name] == uninterrupted[name]).all() for name in uninterrupted)


@pytest.mark.slow
def test_ctrl_c_saves_and_exits_with_130(tmp_path):
    process = subprocess.Popen([sys.executable, str(RECIPE), f"output_dir={tmp_path}", *TINY, *STEPS],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_log(tmp_path / "log.txt", r"step 3/200", process)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130 and "KeyboardInterrupt" not in stderr, stderr[-3000:]
    step = int(re.search(r"stopped by Ctrl-C \(SIGINT\) after step (\d+)", stderr).group(1))
    assert (tmp_path / "checkpoints" / f"step_{step:08d}").is_dir()



@pytest.mark.slow
def test_sigterm_to_the_launcher_alone_stops_the_training_process_with_a_checkpoint(tmp_path):
    """What ``docker stop`` or ``kill <pid of accelerate launch>`` does: the launcher dies without passing the signal
    on. Its training process must not train on orphaned, holding the run lock, until something SIGKILLs it."""
    launcher = start(f"output_dir={tmp_path}", *TINY, *STEPS, "train.steps=100000")
    wait_for_log(tmp_path / "log.txt", r"step 3/100000", launcher)
    trainer = psutil.Process(training_process(launcher))
    launcher.send_signal(signal.SIGTERM)
    try:
        _, stderr = launcher.communicate(timeout=120)  # the pipe closes when the training process has ended too
        trainer.wait(timeout=10)
    finally:
        if trainer.is_running():  # the failure this test is for: an orphan the test must not leave behind
            trainer.kill()
    found = re.search(r"stopped by SIGUSR2 \(its launcher ended: Ctrl-C or a signal sent to the launcher alone\) "
                      r"after step (\d+); checkpoint (\S+) saved", stderr)
    assert found, stderr[-3000:]  # none: it ended some other way (killed by a signal if no traceback is shown)
    step = int(found.group(1))
    assert 3 <= step < 100000 and (tmp_path / "checkpoints" / f"step_{step:08d}").is_dir()
    assert not (tmp_path / "run.lock").exists()  # released: the run can go on at once


@pytest.mark.slow
def test_sigterm_to_the_launchers_process_group_still_saves_a_checkpoint(tmp_path):
    """``kill -TERM -<pgid>``, or a scheduler's signal to the job: the training process gets SIGTERM and, as its
    launcher dies of it, the launcher-gone signal too; that one must not act as a second SIGTERM (stop at once)."""
    launcher = start(f"output_dir={tmp_path}", *TINY, *STEPS, "train.steps=100000")
    wait_for_log(tmp_path / "log.txt", r"step 3/100000", launcher)
    os.killpg(launcher.pid, signal.SIGTERM)  # start() gives the job a process group of its own
    _, stderr = launcher.communicate(timeout=120)
    step = int(re.search(r"stopped by SIG(?:TERM|USR2)\b.* after step (\d+); checkpoint (\S+) saved", stderr).group(1))
    assert (tmp_path / "checkpoints" / f"step_{step:08d}").is_dir() and not (tmp_path / "run.lock").exists()


def test_the_launchers_end_asks_for_a_stop_and_never_stops_the_process_at_once():
    default, launcher_gone = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGUSR2)
    try:
        with StopSignals() as stop:
            os.kill(os.getpid(), signal.SIGUSR2)
            assert stop.received == signal.SIGUSR2
            os.kill(os.getpid(), signal.SIGTERM)  # a SIGTERM after it is the first stop signal, not a second one
            assert stop.received == signal.SIGTERM and signal.getsignal(signal.SIGTERM) is default
            os.kill(os.getpid(), signal.SIGUSR2)  # and the launcher's end after a SIGTERM changes nothing
            assert stop.received == signal.SIGTERM
        assert signal.getsignal(signal.SIGUSR2) is signal.SIG_IGN  # the launcher is gone: any more of it, ignored
    finally:
        signal.signal(signal.SIGUSR2, launcher_gone)
    with StopSignals():  # a stop that was not the launcher's end leaves SIGUSR2 as it was
        os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGUSR2) is launcher_gone


LAUNCHER_ENDS_TWICE = """
import os, signal
from mpp.training.checkpoint import StopSignals

with StopSignals() as stop:
    os.kill(os.getpid(), signal.SIGUSR2)  # the launcher's main thread ended: save a checkpoint and stop
os.kill(os.getpid(), signal.SIGUSR2)  # its last thread ends late, as the process is releasing its lock and exiting
print(signal.Signals(stop.received).name, flush=True)
"""


def test_the_launchers_end_signalled_again_after_the_stop_does_not_kill_the_process():
    # The kernel sends the parent-death signal once for each of the launcher's threads that is the parent in turn
    # (accelerate launch has two); SIGUSR2's default would end the process before it says why it stopped.
    result = subprocess.run([sys.executable, "-c", LAUNCHER_ENDS_TWICE], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.split() == ["SIGUSR2"], (result.returncode, result.stderr)
