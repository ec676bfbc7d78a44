"""Stopping a run cleanly when its machine is taken away.

SIGTERM (schedulers, preemptible VMs) or SIGINT (Ctrl-C) does not kill training: it asks the loop to save a
checkpoint at the next step boundary and exit, so ``--resume`` loses nothing. A second signal acts as it normally
would (stops at once). With several processes, all must stop at the same step (saving is collective): they agree
every ``every`` steps, one tiny all-reduce; a single process reads its own flag every step, at no cost.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any, Optional

import torch
from accelerate import Accelerator

from mpp.private_apis import accelerate_launch_variable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # a second one acts as it would have: it stops at once
# What the kernel sends a training process when its launcher dies (stop_with_launcher). Not a stop signal of its own:
# it often follows a SIGTERM sent to the launcher's whole process group, and must not count as the second one. Not
# SIGHUP, which nohup ignores (and the signal with it).
LAUNCHER_GONE = signal.SIGUSR2
# Set by the launchers in the environment of the processes they start: accelerate launch (one process or many), torchrun
LAUNCHER_VARIABLES = (accelerate_launch_variable(), "TORCHELASTIC_RUN_ID")
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def stop_with_launcher() -> bool:
    """A process that a launcher started gets SIGUSR2 from the kernel when the launcher dies, and so saves a
    checkpoint and stops (StopSignals) instead of training on, orphaned and holding the run's lock.

    SIGTERM sent to ``accelerate launch`` alone (``docker stop``, a pod's termination, ``kill <pid>``) ends the
    launcher without passing it on. Linux only (prctl); elsewhere, and for a process started without a launcher (whose
    parent is a shell or a scheduler, and may well exit first, as under nohup), nothing changes. Returns whether it
    was set."""
    if not sys.platform.startswith("linux") or not any(name in os.environ for name in LAUNCHER_VARIABLES):
        return False
    parent = os.getppid()
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, LAUNCHER_GONE, 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # the launcher died before the request: the kernel will not signal it now
        os.kill(os.getpid(), LAUNCHER_GONE)
    return True


class Preempted(Exception):
    """Training stopped on a signal after saving a checkpoint; the recipe exits with 128 + the signal's number."""

    def __init__(self, signum: int, step: int, checkpoint: Any):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        super().__init__(f"stopped by {SAID.get(signum, signal.Signals(signum).name)} after step {step}; checkpoint "
                         f"{checkpoint} saved")

    def continued_by(self, how: str) -> str:
        """What happened and how to go on: ``how`` is the caller's way to resume (a command line, or resume=True)."""
        return f"{self}: continue with {how} and the same output_dir"


# How a stop's signal reads to the user who sent it.
SAID = {signal.SIGINT: "Ctrl-C (SIGINT)",
        LAUNCHER_GONE: "SIGUSR2 (its launcher ended: Ctrl-C or a signal sent to the launcher alone)"}


class StopSignals:
    """While active (``with StopSignals() as stop``), SIGTERM and SIGINT only set ``stop.received``, and so does the
    launcher's end (SIGUSR2), which never stops the process at once and, once it came, is ignored after the block."""

    def __init__(self) -> None:
        self.received: Optional[int] = None
        self.launcher_ended = False
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():  # Python runs handlers in the main thread only
            self.previous = {signum: signal.signal(signum, self.handle) for signum in STOP_SIGNALS}
            self.previous[LAUNCHER_GONE] = signal.signal(LAUNCHER_GONE, self.launcher_gone)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for signum, handler in self.previous.items():
            # The kernel sends LAUNCHER_GONE again for each of the launcher's threads that ends after the one that
            # started this process (each is the parent in turn), possibly once the stop is under way: those must not
            # end the process (SIGUSR2's default) before it has released its lock and said why it stopped.
            ignored = signum == LAUNCHER_GONE and self.launcher_ended
            signal.signal(signum, signal.SIG_IGN if ignored else handler)

    def handle(self, signum: int, frame: Optional[FrameType]) -> None:
        self.received = signum
        for other in STOP_SIGNALS:  # the next signal: what it would have done without us
            signal.signal(other, self.previous[other])

    def launcher_gone(self, signum: int, frame: Optional[FrameType]) -> None:
        self.launcher_ended = True
        self.received = self.received or signum

    def agreed(self, accelerator: Accelerator, step: int, every: int) -> Optional[int]:
        """The signal every process stops on after ``step``, or None to go on."""
        if accelerator.num_processes == 1:
            return self.received
        if step % every:
            return None
        flag = torch.tensor(self.received or 0, device=accelerator.device)
        return int(accelerator.reduce(flag, "max").item()) or None
