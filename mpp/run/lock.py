"""One writer per run directory: the main process of a run holds ``<run>/run.lock`` while the run is alive.

The lock file names its holder (host, process id, start time) and is refreshed every ``REFRESH_S`` seconds by a
thread of the holder. A second run (or ``--resume``) on a held directory is refused, naming the holder. A lock whose
holder is gone is taken over, with a warning: on the same host when its process no longer exists; from another host
(whose processes cannot be seen) when it has not been refreshed for ``STALE_AFTER_S`` seconds.

Written here rather than with ``filelock``: its locks are either held by an open file descriptor (``fcntl.flock``,
which NFS and other shared filesystems may not carry between machines) or are plain marker files (``SoftFileLock``)
that name no holder and are never known to be stale. Creating the file with O_EXCL is atomic on the filesystems a
run directory lives on, local or shared, and its modification time is the heartbeat every machine can read.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

LOCK_FILE = "run.lock"
REFRESH_S = 30.0
STALE_AFTER_S = 300.0  # ten missed refreshes: a holder on another host is taken for gone

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LockHolder:
    host: str
    pid: int
    started: str  # local time, ISO 8601

    def describe(self, path: Path) -> str:
        seen = time.time() - path.stat().st_mtime
        return f"process {self.pid} on host {self.host}, started {self.started}, last refreshed {seen:.0f} s ago"


def this_process() -> LockHolder:
    return LockHolder(host=socket.gethostname(), pid=os.getpid(), started=time.strftime("%Y-%m-%dT%H:%M:%S"))


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def read_holder(path: Path) -> Optional[LockHolder]:
    """The holder named in ``path``; None if the file is gone or was left half-written (a holder killed while
    writing it, which is then as good as gone)."""
    try:
        return LockHolder(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        return None


def holder_is_gone(holder: Optional[LockHolder], path: Path) -> bool:
    if holder is None:
        return True
    if holder.host == socket.gethostname():
        return not process_exists(holder.pid)
    try:
        return time.time() - path.stat().st_mtime > STALE_AFTER_S
    except FileNotFoundError:
        return True


class RunDirectoryInUse(RuntimeError):
    """Another live run holds the directory's lock."""


class RunLock:
    """``acquire()`` the lock of ``run_dir`` (the directory must exist), keep it fresh, ``release()`` it."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_FILE
        self.holder = this_process()
        self._stop = threading.Event()
        self._refresher: Optional[threading.Thread] = None

    def acquire(self) -> None:
        for _ in range(3):  # a lock released or taken over between our looks: look again
            if self._create():
                break
            holder = read_holder(self.path)
            if holder == self.holder:
                break
            if not holder_is_gone(holder, self.path):
                raise RunDirectoryInUse(
                    f"output_dir {self.path.parent} is in use by another run: {holder.describe(self.path)} "
                    f"(its lock, {self.path}). Wait for it to end or stop it, or choose another output_dir; a lock "
                    f"whose process has ended is taken over by the next run (from another host, once it is "
                    f"{STALE_AFTER_S:.0f} s old)")
            # Take over: remove the stale file and create ours (O_EXCL: of two runs taking over, one wins).
            gone = f"process {holder.pid} on host {holder.host}" if holder else "a holder whose lock was unreadable"
            self.path.unlink(missing_ok=True)
            if self._create():
                logger.warning("took over the lock of output_dir %s from %s, which is no longer running",
                               self.path.parent, gone)
                break
        else:
            raise RunDirectoryInUse(f"output_dir {self.path.parent}: another run took its lock ({self.path}) at "
                                    "the same time as this one; choose another output_dir")
        self._refresher = threading.Thread(target=self._refresh, name="run-lock-refresh", daemon=True)
        self._refresher.start()

    def _create(self) -> bool:
        try:
            descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "w") as file:
            json.dump(asdict(self.holder), file)
        return True

    def _refresh(self) -> None:
        while not self._stop.wait(REFRESH_S):
            try:
                os.utime(self.path)
            except FileNotFoundError:  # removed by hand: a later run may claim the directory
                return

    def release(self) -> None:
        """Stop refreshing and remove the lock, if it is still this process's."""
        self._stop.set()
        if self._refresher is not None:
            self._refresher.join()
            self._refresher = None
        if read_holder(self.path) == self.holder:
            self.path.unlink(missing_ok=True)
