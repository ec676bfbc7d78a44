"""Checkpoints: the full training state, to resume a run exactly, and the stop signals that save one.

``<run>/checkpoints/step_00001000/`` holds ``accelerator.save_state`` (model, optimizer, every process's RNG state),
``trainer_state.json`` (the step), the run's ``config.yaml`` and, when the run averages its weights,
``averaged_model.safetensors``. A checkpoint is written under a temporary name and
renamed into place, so a run killed while saving never leaves a broken latest checkpoint. (The encoder a finished
run exports for use elsewhere is written by ``mpp.models.pretrained.export_encoder``.)

A checkpoint verifies itself: ``trainer_state.json``, written last, records every other file's size and CRC-32
(the check zip archives use against damage, read at several GB/s). ``resume=auto`` takes the newest checkpoint that
still matches its record, warning about any newer damaged one (a truncated file, a dying disk, an interrupted copy);
a checkpoint named explicitly is refused when damaged, naming the newest intact one. Before writing, the free space
is checked against the size of the last checkpoint (or of the state to save); a write that fails for want of room
leaves the earlier checkpoints as they were and says so.

Stopping cleanly when the machine is taken away: SIGTERM (schedulers, preemptible VMs) or SIGINT (Ctrl-C) does not
kill training: it asks the loop to save a checkpoint at the next step boundary and exit, so ``--resume`` loses nothing.
A second signal acts as it normally would (stops at once). With several processes, all must stop at the same step
(saving is collective): they agree every ``every`` steps, one tiny all-reduce; a single process reads its own flag
every step, at no cost.
"""

from __future__ import annotations

import ctypes
import errno
import json
import logging
import os
import re
import shutil
import signal
import sys
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any, Optional

import torch
import yaml
from accelerate import Accelerator, PartialState
from accelerate.utils import broadcast_object_list
from safetensors.torch import load_file, save_file
from timm.utils import ModelEmaV3

from mpp.config.building import config_to_dict, save_config
from mpp.config.runs import TrainingRunConfig
from mpp.errors import ConfigError, RunError, RunFinished
from mpp.private_apis import accelerate_launch_variable, prepared_models_and_optimizers, saved_model_file
from mpp.run import CHECKPOINTS_DIR, CONFIG_FILE, EXPORT_DIR, PARTIAL_SUFFIX, read_metrics

# what study/, tools/ and users may import from here
__all__ = [
    "checkpoint_path", "list_checkpoints", "newest_intact_checkpoint", "read_step",
]


# Checkpoints: writing, verifying, resuming.
STATE_FILE = "trainer_state.json"  # the step and every other file's size and CRC-32; written last
AVERAGED_FILE = "averaged_model.safetensors"
READ_CHUNK = 16 * 2**20
MIB = 2**20
logger = logging.getLogger(__name__)


class CheckpointError(RunError):
    """A checkpoint cannot be written (no room) or is damaged."""


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINTS_DIR / f"step_{step:08d}"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run (renamed into place, whether or not since damaged), oldest first."""
    directory = run_dir / CHECKPOINTS_DIR
    if not directory.is_dir():
        return []
    found = [path for path in directory.glob("step_*") if re.fullmatch(r"step_\d+", path.name)
             and (path / STATE_FILE).is_file()]  # a .partial one is still being written
    return sorted(found, key=lambda path: int(path.name.removeprefix("step_")))


def read_step(checkpoint: Path) -> int:
    return json.loads((checkpoint / STATE_FILE).read_text())["step"]


def file_crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as file:
        while chunk := file.read(READ_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def files_crc32(paths: list[Path]) -> list[int]:
    """The files' CRC-32s, several files at once (zlib releases the GIL): the model's and the optimizer's files
    are read side by side."""
    with ThreadPoolExecutor(max_workers=max(1, min(len(paths), os.cpu_count() or 1))) as pool:
        return list(pool.map(file_crc32, paths))


def record_files(checkpoint: Path) -> dict[str, dict[str, int]]:
    """Each file of ``checkpoint`` but the state file, by its path inside: its size in bytes and CRC-32."""
    paths = [path for path in sorted(checkpoint.rglob("*")) if path.is_file() and path.name != STATE_FILE]
    return {path.relative_to(checkpoint).as_posix(): {"bytes": path.stat().st_size, "crc32": crc}
            for path, crc in zip(paths, files_crc32(paths), strict=True)}


def checkpoint_damage(checkpoint: Path) -> Optional[str]:
    """What no longer matches ``checkpoint``'s record of its files, or None when it is intact. (A checkpoint
    written before checkpoints recorded their files has nothing to check against.)"""
    try:
        recorded = json.loads((checkpoint / STATE_FILE).read_text())
        recorded["step"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"{STATE_FILE} cannot be read"
    files = recorded.get("files", {})
    for name, expected in files.items():  # the sizes first: they cost nothing
        path = checkpoint / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != expected["bytes"]:
            return f"{name} holds {path.stat().st_size} bytes, {expected['bytes']} when saved"
    for (name, expected), crc in zip(files.items(), files_crc32([checkpoint / name for name in files]), strict=True):
        if crc != expected["crc32"]:
            return f"{name} does not match the checksum recorded when saved"
    return None


def checkpoint_bytes(checkpoint: Path) -> int:
    return sum(path.stat().st_size for path in checkpoint.rglob("*") if path.is_file())


def state_bytes(accelerator: Accelerator, averaged: Optional[ModelEmaV3]) -> int:
    """The tensors ``save_state`` writes (models, optimizers) and the averaged weights: a lower bound of a
    checkpoint's size, for the first one of a run."""
    models, optimizers = prepared_models_and_optimizers(accelerator)
    tensors = [t for model in models for t in model.state_dict().values()]
    tensors += [t for optimizer in optimizers for state in optimizer.state.values()
                for t in state.values() if isinstance(t, torch.Tensor)]
    tensors += list(averaged.module.state_dict().values()) if averaged is not None else []
    return sum(t.numel() * t.element_size() for t in tensors)


def no_room_error(directory: Path, name: str, needed: int, earlier: list[Path]) -> CheckpointError:
    free = shutil.disk_usage(directory).free
    kept = f"the earlier checkpoints are kept ({', '.join(path.name for path in earlier)})" if earlier else \
        "no earlier checkpoint was touched"
    return CheckpointError(
        f"no room for checkpoint {name} in {directory}: {free / MIB:.1f} MiB free, a checkpoint needs about "
        f"{needed / MIB:.1f} MiB; free some space on that disk and continue with --resume (it needs only the "
        f"newest checkpoint); {kept}"
    )


def save_checkpoint(
    accelerator: Accelerator, run_dir: Path, step: int, config: Any, keep: int, averaged: Optional[ModelEmaV3] = None
) -> Path:
    """Save the full training state after ``step`` optimizer steps (and the averaged weights, if any); keep the
    ``keep`` newest. Every process calls."""
    final = checkpoint_path(run_dir, step)
    partial = final.with_name(final.name + PARTIAL_SUFFIX)
    earlier = list_checkpoints(run_dir)
    needed = checkpoint_bytes(earlier[-1]) if earlier else state_bytes(accelerator, averaged)
    if accelerator.is_main_process:
        final.parent.mkdir(parents=True, exist_ok=True)
        for leftover in final.parent.glob(f"*{PARTIAL_SUFFIX}"):  # left by a run killed while saving
            shutil.rmtree(leftover)
        if shutil.disk_usage(final.parent).free < needed:
            raise no_room_error(final.parent, final.name, needed, earlier)
    accelerator.wait_for_everyone()
    try:
        accelerator.save_state(str(partial))
        accelerator.wait_for_everyone()  # every process's random state is in before the files are recorded
        if accelerator.is_main_process:
            save_config(config, partial / CONFIG_FILE)
            if averaged is not None:
                save_file({name: value.detach().cpu().contiguous()
                           for name, value in averaged.module.state_dict().items()}, partial / AVERAGED_FILE)
            (partial / STATE_FILE).write_text(json.dumps({"step": step, "files": record_files(partial)}))
    except Exception as error:  # a partial checkpoint is never used; torch and safetensors report a full disk in
        # their own exception types (RuntimeError, SafetensorError), some without an errno
        written = checkpoint_bytes(partial) if partial.is_dir() else 0
        no_room = getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or \
            shutil.disk_usage(final.parent).free < needed - written  # the rest cannot fit (others took the room)
        if accelerator.is_main_process:
            shutil.rmtree(partial, ignore_errors=True)
        if no_room:
            raise no_room_error(final.parent, final.name, max(needed, written), earlier) from error
        raise
    if accelerator.is_main_process:
        if final.exists():  # the same step saved by an earlier, resumed attempt
            shutil.rmtree(final)
        partial.rename(final)
        for old in list_checkpoints(run_dir)[:-keep]:
            shutil.rmtree(old)
    accelerator.wait_for_everyone()
    return final


def newest_intact_checkpoint(run_dir: Path) -> Optional[Path]:
    """The newest of a run's checkpoints that matches its record; a warning names each newer one found damaged."""
    for checkpoint in reversed(list_checkpoints(run_dir)):
        damage = checkpoint_damage(checkpoint)
        if damage is None:
            return checkpoint
        logger.warning("checkpoint %s is damaged (%s); looking at the one before it: the steps since are lost",
                       checkpoint, damage)
    return None


def resume_checkpoint(resume: str, run_dir: Path) -> Optional[Path]:
    """The checkpoint ``resume`` names: none for "", the run's newest intact one (if any) for "auto", else that
    path, if intact. The main process reads the files; every process resumes from its choice."""
    if not resume:
        return None
    # sent as plain strings: XLA's broadcast unpickles with torch.load(weights_only=True), which refuses paths and
    # exceptions; [path or "", error class name or "", error message]
    choice: list[str] = ["", "", ""]
    if PartialState().is_main_process:
        try:
            checkpoint = find_resume_checkpoint(resume, run_dir)
            choice = [str(checkpoint or ""), "", ""]
        except (CheckpointError, ConfigError) as error:
            choice = ["", type(error).__name__, str(error)]
    broadcast_object_list(choice)
    path, error_kind, message = choice
    if error_kind:
        raise {"CheckpointError": CheckpointError, "ConfigError": ConfigError}[error_kind](message)
    return Path(path) if path else None


def find_resume_checkpoint(resume: str, run_dir: Path) -> Optional[Path]:
    if resume == "auto":
        checkpoint = newest_intact_checkpoint(run_dir)
        if checkpoint is None and list_checkpoints(run_dir):
            raise CheckpointError(f"every checkpoint in {run_dir / CHECKPOINTS_DIR} is damaged (see the warnings "
                                  "above); start again with overwrite=true")
        return checkpoint
    path = Path(resume)
    if not (path / STATE_FILE).is_file():
        raise ConfigError(
            f"resume={resume} is not a checkpoint (no {STATE_FILE} inside); "
            f"pass resume=auto or a directory under <output_dir>/{CHECKPOINTS_DIR}/"
        )
    damage = checkpoint_damage(path)
    if damage is not None:
        intact = newest_intact_checkpoint(path.parent.parent)  # <run>/checkpoints/step_N
        raise CheckpointError(f"resume={resume} is damaged ({damage}); "
                              + (f"the newest intact checkpoint of its run is {intact}: pass resume={intact}"
                                 if intact else "its run has no intact checkpoint; start again with overwrite=true"))
    return path


def check_resume_length(checkpoint: Path, steps: int, run_dir: Path) -> None:
    """Refuse a checkpoint past the run's last step (``train.steps``, one line naming both); a run whose checkpoint
    is at its last step and whose results are written has finished (``RunFinished``, nothing rewritten)."""
    step = read_step(checkpoint)
    if step > steps:
        raise ConfigError(f"cannot resume from {checkpoint}: it is at step {step}, past train.steps={steps}; pass "
                          f"train.steps={step} or more to continue it, or start a new run in another output_dir")
    finished = read_metrics(run_dir)
    if step == steps and finished is not None:
        export = run_dir / EXPORT_DIR
        raise RunFinished(f"the run in {run_dir} has finished (step {step} of train.steps={steps})"
                          + (f"; its encoder is exported to {export}" if export.is_dir() else "")
                          + ": nothing to resume. A larger train.steps with --resume trains it further",
                          run_dir, finished)


def check_resume_compatible(checkpoint: Path, config: TrainingRunConfig) -> None:
    """Refuse to resume a checkpoint whose model or objective differs from the current config: each section (or
    top-level key, such as ``init``) of the config's ``RESUME_MUST_MATCH`` must be as it was, but for the fields its
    ``FREE_ON_RESUME`` names."""
    saved = yaml.safe_load((checkpoint / CONFIG_FILE).read_text())
    current = config_to_dict(config)
    changed = []
    for section in config.RESUME_MUST_MATCH:
        # A section that the version which wrote the checkpoint did not have (augment) trained at its defaults
        now, then = current[section], saved[section] if section in saved else config_to_dict(type(config)())[section]
        if isinstance(now, dict):
            free = getattr(getattr(config, section), "FREE_ON_RESUME", ())
            pairs = [(f"{section}.{key}", value, (then or {}).get(key)) for key, value in now.items()
                     if key not in free]
        else:
            pairs = [(section, now, then)]
        changed += [f"{key}: {old!r} in the checkpoint, {new!r} now" for key, new, old in pairs if new != old]
    if changed:
        raise ConfigError(
            f"cannot resume from {checkpoint}: the model or objective changed:\n  "
            + "\n  ".join(changed)
            + "\nresume with the checkpoint's settings, or start a new run in another output_dir"
        )


def load_checkpoint(accelerator: Accelerator, checkpoint: Path, averaged: Optional[ModelEmaV3] = None) -> int:
    """Restore the full training state; returns the number of optimizer steps already taken."""
    hook = accelerator.register_load_state_pre_hook(load_weights_through_the_host)
    try:
        accelerator.load_state(str(checkpoint))
    finally:
        hook.remove()
    if averaged is not None:
        if not (checkpoint / AVERAGED_FILE).is_file():
            raise ConfigError(f"{checkpoint} holds no averaged weights ({AVERAGED_FILE}); resume with the "
                              "checkpoint's settings (no weight averaging)")
        averaged.module.load_state_dict(load_file(checkpoint / AVERAGED_FILE))  # read on the host, copied over
    return read_step(checkpoint)


def load_weights_through_the_host(models: list[torch.nn.Module], input_dir: str) -> None:
    """accelerate's load_state pre-hook: each model's weights, as save_state wrote them, read on the host and copied
    in; the models are then taken off the list accelerate loads. Its own loading asks safetensors where the model's
    tensors are stored, which an XLA tensor cannot say."""
    for index, model in enumerate(models):
        model.load_state_dict(load_file(Path(input_dir) / saved_model_file(index)))
    models.clear()


# The stop signals: save a checkpoint at the next step boundary, then exit.
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
