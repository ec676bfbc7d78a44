"""What every run has, whichever entry point starts it: its directory, the lock that makes it one writer's, and its
session, the start-up and teardown every recipe and evaluation shares.

    with Session(cfg, cfg.train, prefix="mpp") as session:
        ...  # build the model and data: everything that can be wrong with the config fails here
        session.start()  # claims the run directory: config.yaml, log.txt, TensorBoard
        ...  # train or evaluate
        session.finish(metrics)  # metrics.json, last

One directory per run. A run never writes over an earlier one unless told to resume it or to overwrite it;
``metrics.json`` is written last and whole, so a run that has one is complete.

One writer per run directory: the main process of a run holds ``<run>/run.lock`` while the run is alive. The lock file
names its holder (host, process id, start time) and is refreshed every ``REFRESH_S`` seconds by a thread of the holder.
A second run (or ``--resume``) on a held directory is refused, naming the holder. A lock whose holder is gone is taken
over, with a warning: on the same host when its process no longer exists; from another host (whose processes cannot be
seen) when it has not been refreshed for ``STALE_AFTER_S`` seconds. Written here rather than with ``filelock``: its
locks are either held by an open file descriptor (``fcntl.flock``, which NFS and other shared filesystems may not
carry between machines) or are plain marker files (``SoftFileLock``) that name no holder and are never known to be
stale. Creating the file with O_EXCL is atomic on the filesystems a run directory lives on, local or shared, and its
modification time is the heartbeat every machine can read.

After the Accelerator is made nothing is device-specific: the same code runs on a CPU, GPUs or a TPU.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Optional

import accelerate.utils
import torch
from accelerate import Accelerator, PartialState
from accelerate.tracking import LOGGER_TYPE_TO_CLASS
from accelerate.utils import DataLoaderConfiguration, GradientAccumulationPlugin, broadcast_object_list, set_seed

from mpp.commands import COMMANDS
from mpp.config.building import save_config
from mpp.config.runtime import RuntimeConfig
from mpp.errors import ConfigError, RunError
from mpp.private_apis import launched_on_cpu, launched_with_fsdp

# what study/, tools/ and users may import from here
__all__ = [
    "CONFIG_FILE", "PREDICTIONS_FILE", "logged_scalars", "read_metrics", "write_whole", "configure_logging",
]

logger = logging.getLogger(__name__)

# The lock: one writer per run directory.
LOCK_FILE = "run.lock"
REFRESH_S = 30.0
STALE_AFTER_S = 300.0  # ten missed refreshes: a holder on another host is taken for gone


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


# The run directory: its layout, claimed without overwriting an earlier run.
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
# LOCK_FILE (above): run.lock, held by the run writing here
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


# The session: what every entry point does first and last.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class ProcessLost(RunError):
    """A collective between the run's processes failed: another process ended or stopped answering."""


def create_accelerator(runtime: RuntimeConfig, seed: int, output_dir: str) -> Accelerator:
    """The one Accelerator of a run: mixed precision, optionally torch.compile (applied by ``prepare``), seeded data
    order, TensorBoard in the run directory and any other trackers ``log_with`` names."""
    if launched_with_fsdp() and not torch.accelerator.is_available():
        # FSDP version 1 would stop on "no available devices", version 2 run unsharded as MULTI_CPU
        raise ConfigError(f"accelerate launch --use_fsdp was given, but accelerate {accelerate.__version__} shards "
                          "with FSDP only across GPUs (and other accelerators), and this machine has none; drop "
                          "--use_fsdp here (ACCELERATE_USE_CPU=1 --multi_gpu runs data parallel), or launch on GPUs")
    # The process group first, so that a collective waits at most runtime.collective_timeout_s. Made as accelerate's
    # PartialState documents it: its InitProcessGroupKwargs drops a timeout equal to its own default of 600 s.
    PartialState(cpu=launched_on_cpu(),
                 timeout=timedelta(seconds=runtime.collective_timeout_s))
    return Accelerator(
        mixed_precision=runtime.mixed_precision,
        dynamo_backend="inductor" if runtime.compile else None,
        gradient_accumulation_plugin=GradientAccumulationPlugin(sync_with_dataloader=False),  # steps: the loop's
        # Batches go to the device asynchronously from pinned memory (data.pin_memory: on with CUDA).
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=seed, non_blocking=True),
        log_with=trackers(runtime),
        # TensorBoard writes to <project_dir>/<run name>: the run directory itself (see Session.start).
        project_dir=str(runs_parent(output_dir)),
    )


def trackers(runtime: RuntimeConfig) -> list[str]:
    """TensorBoard and the trackers ``log_with`` adds, each one accelerate knows and whose package is installed
    (accelerate would drop a missing one without a word). Checked here, not in the config, so that reading a config
    never imports accelerate (``--help`` and a mistyped key answer in a second)."""
    names = list(dict.fromkeys(["tensorboard", *runtime.log_with]))
    unknown = [name for name in names if name not in LOGGER_TYPE_TO_CLASS]
    if unknown:
        raise ConfigError(f"{runtime.section}.log_with names {', '.join(unknown)}, which accelerate does not track "
                          f"with; choose from {', '.join(LOGGER_TYPE_TO_CLASS)}")
    missing = [name for name in names if not getattr(accelerate.utils, f"is_{name}_available")()]
    if missing:
        raise ConfigError(f"{runtime.section}.log_with names {', '.join(missing)}, whose package is not installed: "
                          f"pip install {' '.join(missing)}, or leave {'them' if len(missing) > 1 else 'it'} out")
    return names


def check_joined(accelerator: Accelerator) -> None:
    """Refuse processes that accelerate started but did not connect, before anything is written."""
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > 1 and accelerator.num_processes == 1:  # each would run alone, all on the same run directory
        raise ConfigError(
            f"accelerate launch started {launched} processes, but they did not join into one run (without a GPU, "
            "accelerate does not connect them): on a CPU-only machine launch with ACCELERATE_USE_CPU=1 and "
            "--multi_gpu, see docs/scaling.md, Devices"
        )


def local_processes(accelerator: Accelerator) -> int:
    """Processes of this run on this machine (they share its cores)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", accelerator.num_processes))


def set_cpu_threads(accelerator: Accelerator, threads: int) -> int:
    """On a CPU, use ``threads`` per process, or share this machine's cores (accelerate launch sets just one)."""
    if accelerator.device.type == "cpu":
        torch.set_num_threads(threads or max(1, len(os.sched_getaffinity(0)) // local_processes(accelerator)))
    return torch.get_num_threads()


def configure_logging() -> None:
    """The package's log lines on the console, from the main process only; other libraries' at warnings. Forced: a
    library may have set up the root logger already (torch_xla does), and an entry point owns its console."""
    logging.basicConfig(format=LOG_FORMAT, datefmt="%H:%M:%S", level=logging.WARNING, force=True)
    logging.getLogger("mpp").setLevel(logging.INFO if PartialState().is_main_process else logging.WARNING)


def log_to_file(run_dir: Path) -> None:
    """Send the package's log records to ``<run>/log.txt`` too (main process only, appending across resumes)."""
    if PartialState().is_main_process:
        handler = logging.FileHandler(run_dir / LOG_FILE)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        logging.getLogger().addHandler(handler)


def is_collective_failure(error: BaseException) -> bool:
    """torch.distributed's errors, and gloo's (a plain RuntimeError naming gloo: a peer's connection closed or
    reset, a timed-out wait)."""
    return isinstance(error, torch.distributed.DistError) or (isinstance(error, RuntimeError) and "gloo" in str(error))


def warn_of_gpu_settings_on_a_cpu(runtime: RuntimeConfig, device_type: str, prefix: str) -> None:
    """One line where a run on a CPU asks for what only pays on a GPU: bf16 autocast (emulated, slower than fp32 on
    most CPUs) or torch.compile (minutes of compilation before the first step); it names the CPU preset of its kind
    of run (``prefix``: a recipe's, else an evaluation's)."""
    asked = [setting for setting, on in (("mixed_precision=bf16", runtime.mixed_precision == "bf16"),
                                         ("compile=true", runtime.compile)) if on]
    if device_type == "cpu" and asked:
        logger.warning("this run asks for %s, a GPU's settings, on a CPU: it will be slow; "
                       "--config %s is sized for a CPU", " and ".join(asked),
                       COMMANDS[command_named_by(prefix)].cpu_preset)


def command_named_by(prefix: str) -> str:
    """The command whose run directories are ``runs/<prefix>-<date>-<time>``: MPP's are runs/mpp-..., and an
    evaluation's name is its command's with hyphens (runs/linear-probe-...)."""
    return "pretrain" if prefix == "mpp" else prefix.replace("-", "_")


class Session:
    """One run of an entry point. Made first: the Accelerator (``runtime``: precision, compilation, threads), console
    logging, the run directory's name (``runs/<prefix>-<date>-<time>`` unless ``config.output_dir`` says), every
    random generator seeded from ``config.seed``. Leaving the ``with`` block on an error (a signal, a non-finite step,
    bad data) closes TensorBoard; checkpoints stay as they are."""

    def __init__(self, config: Any, runtime: RuntimeConfig, prefix: str) -> None:
        self.config = config
        self.runtime = runtime
        self.accelerator = create_accelerator(runtime, config.seed, config.output_dir)
        check_joined(self.accelerator)
        configure_logging()
        warn_of_gpu_settings_on_a_cpu(runtime, self.accelerator.device.type, prefix)
        self.run_dir = resolve_output_dir(config.output_dir, prefix, getattr(config, "resume", "") == "auto")
        set_seed(config.seed)
        self.threads = set_cpu_threads(self.accelerator, runtime.cpu_threads)
        self.lock: Optional[RunLock] = None  # the run directory's, held by the main process from start()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, error_type: Any, error: Any, traceback: Any) -> None:
        if error_type is None:
            return
        lost = self.accelerator.num_processes > 1 and is_collective_failure(error)
        if lost:  # the launcher's SIGTERM to the survivors follows: this process ends itself, saying why
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # first: releasing the lock below leaves time for it
        self.release_lock()
        self.accelerator.end_training()  # TensorBoard flushed; what was written stays
        if lost:
            raise ProcessLost(
                "a collective between this run's processes failed: another process ended (killed, out of memory, its "
                f"machine lost) or did not answer within collective_timeout_s={self.runtime.collective_timeout_s} s, "
                "so every process stops. The launcher's report names the process that failed first; continue from "
                f"the last checkpoint with --resume ({str(error).splitlines()[0]})"
            ) from error

    def start(self) -> None:
        """Claim the run directory (never silently overwritten), write its config, open its log file and TensorBoard.
        Call once everything that can be wrong with the config has been checked: nothing is written before."""
        resume = bool(getattr(self.config, "resume", ""))  # an evaluation has nothing to resume (features are cached)
        self.lock = claim_output_dir(self.run_dir, resume=resume, overwrite=self.config.overwrite)
        log_to_file(self.run_dir)
        if self.accelerator.is_main_process:
            save_config(self.config, self.run_dir / CONFIG_FILE)
        self.accelerator.init_trackers(self.run_dir.name)
        logger.info("run directory %s on %s, %d threads per process", self.run_dir, self.accelerator.device,
                    self.threads)

    def finish(self, metrics: dict[str, Any]) -> None:
        """``metrics.json``, last (a run that has one is complete), with the backend it ran on; TensorBoard closed."""
        self.accelerator.wait_for_everyone()
        backend = {"distributed_type": self.accelerator.distributed_type.value, "device": str(self.accelerator.device)}
        write_metrics(self.run_dir, {**metrics, "backend": backend})
        self.accelerator.end_training()
        self.release_lock()

    def release_lock(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None
