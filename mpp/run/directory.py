"""One directory per run, and what is in it. A run never writes over an earlier one unless told to resume it or to
overwrite it; ``metrics.json`` is written last and whole, so a run that has one is complete."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

from accelerate import PartialState
from accelerate.utils import broadcast_object_list

from mpp.errors import RunError
from mpp.run.lock import LOCK_FILE, RunDirectoryInUse, RunLock

# The names meant for use outside the package (study/, tools/ and users)
__all__ = [
    "CONFIG_FILE", "PREDICTIONS_FILE", "logged_scalars", "read_metrics", "write_whole",
]

logger = logging.getLogger(__name__)

RUNS_DIR = Path("runs")  # where a run goes when no output_dir is given
# The layout of a run directory (docs/pretraining.md, "The run directory"); TensorBoard's events files sit beside these.
CONFIG_FILE = "config.yaml"  # the resolved config
LOG_FILE = "log.txt"
METRICS_FILE = "metrics.json"
PREDICTIONS_FILE = "predictions.json"  # finetune.sealed: the scored split's predictions and labels, unscored
CHECKPOINTS_DIR = "checkpoints"  # step_<N>/, the newest train.keep_checkpoints of them
EXPORT_DIR = "export"  # the encoder in timm's hub format
PICTURES_DIR = "pictures"
FEATURES_DIR = "features"  # an evaluation's feature cache, unless eval.feature_cache names another
SWEEP_DIR = "sweep"  # a fine-tuning sweep's runs, lr_<lr>/
# LOCK_FILE (mpp/run/lock.py): run.lock, held by the run writing here
PARTIAL_SUFFIX = ".partial"  # what is being written: renamed when whole, so a file or folder is complete or absent


class RunDirectoryError(RunError):
    """The output directory cannot be used as asked."""


def runs_parent(output_dir: str) -> Path:
    """The folder the run directory goes in; known before the run is named (accelerate's project_dir)."""
    return Path(output_dir).parent if output_dir else RUNS_DIR


def newest_run(prefix: str) -> Optional[Path]:
    """The newest run directory of this entry point under ``runs/`` (one its config was written to), if any: their
    names end in the date and time they started, which sort as they came."""
    started = [path for path in RUNS_DIR.glob(f"{prefix}-*") if (path / CONFIG_FILE).is_file()]
    return max(started, key=lambda path: path.name, default=None)


def resolve_output_dir(output_dir: str, prefix: str, resume_newest: bool = False) -> Path:
    """``output_dir``; else, where ``resume_newest``, the newest run of this entry point (``newest_run``); else
    ``runs/<prefix>-<date>-<time>``. Named by the main process for every process."""
    if output_dir:
        existing = next((path for path in (Path(output_dir), *Path(output_dir).parents) if path.exists()), None)
        if existing is not None and not existing.is_dir():
            raise RunDirectoryError(f"output_dir={output_dir}: {existing} is a file, not a directory; choose "
                                    "another output_dir")
        return Path(output_dir)
    if resume_newest:
        newest = [newest_run(prefix) if PartialState().is_main_process else None]
        broadcast_object_list(newest)
        if newest[0] is None:
            raise RunDirectoryError(f"--resume without output_dir continues the newest {prefix} run under "
                                    f"{RUNS_DIR}/, and there is none ({RUNS_DIR}/{prefix}-*); give "
                                    "output_dir=<the run's directory>")
        logger.info("continuing the newest %s run, %s (--resume without output_dir)", prefix, newest[0])
        return newest[0]
    name = [f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}"]
    broadcast_object_list(name)  # processes may start a second apart: all take the main process's name
    return runs_parent(output_dir) / name[0]


def only_a_failed_start(contents: list[str]) -> bool:
    """Whether a run directory holds only what a run that stopped before its first checkpoint leaves (its config,
    its log, TensorBoard's events): no run to continue or lose, so the same command may start again there, adding to
    the log."""
    return all(name in (CONFIG_FILE, LOG_FILE) or name.startswith("events.out.tfevents.") for name in contents)


def claim_output_dir(run_dir: Path, resume: bool, overwrite: bool) -> Optional[RunLock]:
    """Make ``run_dir`` this run's own, or raise if another live run holds it, or if it holds an earlier run that we
    were not told to continue. The main process returns the directory's lock, held until ``release()``."""
    state = PartialState()
    contents = sorted(path.name for path in run_dir.iterdir() if path.name != LOCK_FILE) if run_dir.is_dir() else []
    state.wait_for_everyone()  # every process has looked before the main process changes anything
    lock, refusal = None, [""]
    if state.is_main_process:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            refusal = [f"cannot create output_dir {run_dir}: {error.strerror}; choose another output_dir"]
        else:
            lock = RunLock(run_dir)
            try:
                lock.acquire()
            except RunDirectoryInUse as error:
                lock, refusal = None, [str(error)]
    broadcast_object_list(refusal)
    if refusal[0]:
        raise RunDirectoryError(refusal[0])
    if contents and not (resume or overwrite) and not only_a_failed_start(contents):
        if lock is not None:
            lock.release()
        raise RunDirectoryError(
            f"output_dir {run_dir} already holds a run ({', '.join(contents)}); "
            "pass resume=auto (or --resume) to continue it, overwrite=true to delete it and start again, "
            "or choose another output_dir"
        )
    if state.is_main_process and contents and overwrite and not resume:
        for name in contents:
            path = run_dir / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    state.wait_for_everyone()
    return lock


def write_whole(path: Path, write: Callable[[Path], None], shared: bool = False) -> None:
    """``write(partial)`` writes the file beside ``path``, which it then replaces: a reader finds ``path`` whole or
    absent, and a failed write leaves nothing behind. One writer's partial file has a fixed name, which a rerun after
    a kill writes over; ``shared`` files (a cache that two runs may fill at once) get a name of each writer's own, so
    that each renames a whole copy of its own instead of moving the other's."""
    unique = f".{uuid.uuid4().hex}" if shared else ""
    partial = path.with_name(f"{path.name}{unique}{PARTIAL_SUFFIX}")
    try:
        write(partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def read_cache(path: Path, read: Callable[[Path], Any]) -> Optional[Any]:
    """``read(path)`` of a cache file, or None where there is none or it cannot be read (truncated, damaged by a
    full disk or a copy, written by another version): the caller makes it again and writes it over, after one
    warning that names the file. A cache is never worth stopping a run for."""
    if not path.is_file():
        return None
    try:
        return read(path)
    except Exception as error:  # noqa: BLE001 - every reader fails in its own way (pickle, zip, safetensors, keys)
        logger.warning("the cache %s cannot be read (%s: %s); making it again", path, type(error).__name__,
                       str(error).splitlines()[0] if str(error) else "no message")
        return None


def read_metrics(run_dir: Path) -> Optional[dict[str, Any]]:
    """A finished run's ``metrics.json`` (written last, whole or not at all), or None if the run has not finished."""
    path = run_dir / METRICS_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def write_metrics(run_dir: Path, metrics: dict[str, Any]) -> None:
    """Write ``metrics.json`` whole or not at all (main process only)."""
    if PartialState().is_main_process:
        write_whole(run_dir / METRICS_FILE, lambda partial: partial.write_text(json.dumps(metrics, indent=2) + "\n"))


def logged_scalars(run_dir: Path, tag: str) -> dict[int, float]:
    """{x: value} of one scalar a run logged to TensorBoard (x: images seen); a resumed run's repeated points once."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logging.getLogger("tensorboard").setLevel(logging.WARNING)  # a line per event file read otherwise
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    if tag not in events.Tags()["scalars"]:
        return {}
    return {event.step: event.value for event in events.Scalars(tag)}
