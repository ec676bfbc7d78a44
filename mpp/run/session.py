"""What every entry point does first and last, training or evaluation: one ``Session`` per run.

    with Session(cfg, cfg.train, prefix="mpp") as session:
        ...  # build the model and data: everything that can be wrong with the config fails here
        session.start()  # claims the run directory: config.yaml, log.txt, TensorBoard
        ...  # train or evaluate
        session.finish(metrics)  # metrics.json, last

After the Accelerator is made nothing is device-specific: the same code runs on a CPU, GPUs or a TPU.
"""

from __future__ import annotations

import logging
import os
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import accelerate.utils
import torch
from accelerate import Accelerator, PartialState
from accelerate.tracking import LOGGER_TYPE_TO_CLASS
from accelerate.utils import DataLoaderConfiguration, GradientAccumulationPlugin, set_seed

from mpp.config.runtime import RuntimeConfig
from mpp.config.building import save_config
from mpp.errors import ConfigError, RunError
from mpp.commands import COMMANDS
from mpp.private_apis import launched_on_cpu, launched_with_fsdp
from mpp.run.directory import CONFIG_FILE, LOG_FILE, claim_output_dir, resolve_output_dir, runs_parent, write_metrics
from mpp.run.lock import RunLock

__all__ = ["configure_logging"]  # what study/, tools/ and users may import from here

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger(__name__)


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
