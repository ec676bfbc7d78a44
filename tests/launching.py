"""Running the recipes as users do, through ``accelerate launch`` in a subprocess: one process, or two gloo
processes on this CPU-only machine; or, where the launcher is not what a test is about, the script's own command line
in the test's process (``run_here``), as ``mpp.pretrain`` runs it: a launch costs two process starts."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from devices import USE_CPU

ROOT = Path(__file__).parents[1]
RECIPE = ROOT / "recipes" / "mpp.py"
TINY = [  # a ViT small enough for end-to-end tests
    "model.img_size=16", "model.patch_size=4", "model.embed_dim=32", "model.depth=2", "model.num_heads=2",
    "train.global_batch_size=8", "train.warmup_steps=2", "train.log_every=2", "train.checkpoint_every=3",
    "train.steps=6",
]
# The default MPP preset's reports off: they read the training split by position (no stream) with 70 images per class
NO_MPP_MONITORS = ["monitor.few_shot_every=0", "monitor.mosaic_every=0", "monitor.final_few_shot_draws=0"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def accelerate_command(script: Path, args: tuple[str, ...], processes: int) -> tuple[list[str], dict[str, str]]:
    # -q: a failed run ends with its own one-line error, not the launcher's traceback after it (single process)
    command = [sys.executable, "-m", "accelerate.commands.launch", "-q", "--num_processes", str(processes),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if USE_CPU:  # on a machine with a GPU too; MPP_TEST_DEVICE=cuda leaves accelerate to take the GPU
        env["ACCELERATE_USE_CPU"] = "1"
    if processes > 1:
        # accelerate 1.15: `--cpu --num_processes 2` silently starts ONE process; this starts two (MULTI_CPU, gloo).
        command += ["--multi_gpu", "--main_process_port", str(free_port())]
        env["ACCELERATE_USE_CPU"] = "1"
    return command + [str(script), *args], env


def launch(*args: str, script: Path = RECIPE, processes: int = 1, check: bool = True) -> subprocess.CompletedProcess:
    command, env = accelerate_command(script, args, processes)
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def run_here(*args: str, script: Path = RECIPE, check: bool = True) -> subprocess.CompletedProcess:
    """``script``'s command line (``--config``, ``--resume``, ``key=value`` overrides) run in this process, as the
    Python API runs a recipe (``run_in_this_process``), reported as ``launch`` reports a launch: its exit status, and
    as ``stderr`` what it logged and printed there (its error message included). With ``check``, a run that fails
    fails the test with the recipe's message."""
    recipe = load_script(script, f"recipe_{script.parent.name}_{script.stem}")
    return reported_here([str(script), *args], recipe.cli, check)


def run_command_here(command: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``python -m mpp command args`` run in this process, reported as run_here reports a recipe."""
    from mpp.command_line import main

    return reported_here(["mpp", command, *args], lambda: main([command, *args]), check)


def run_module_here(module: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``python -m module args`` run in this process (the module's ``cli``), reported as run_here reports a recipe."""
    return reported_here([module, *args], importlib.import_module(module).cli, check)


def reported_here(argv: list[str], main: Callable[[], object], check: bool) -> subprocess.CompletedProcess:
    """``main()`` with ``sys.argv`` set to ``argv``, in this process, on this test's device: its exit status, and what
    it logged and printed to stderr."""
    from mpp.recipes.python_api import run_in_this_process

    saved_argv, saved_cpu = sys.argv, os.environ.get("ACCELERATE_USE_CPU")
    sys.argv = list(argv)
    if USE_CPU:
        os.environ["ACCELERATE_USE_CPU"] = "1"
    said = io.StringIO()
    logged = logging.StreamHandler(said)
    logged.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(logged)
    code = 0
    try:
        with run_in_this_process(), contextlib.redirect_stderr(said):
            main()
    except SystemExit as exit:  # a message is printed and exits 1, as Python does at the top level
        code = exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 1
        if isinstance(exit.code, str):
            print(exit.code, file=said)
    finally:
        logging.getLogger().removeHandler(logged)
        sys.argv = saved_argv
        if saved_cpu is None:
            os.environ.pop("ACCELERATE_USE_CPU", None)
        else:
            os.environ["ACCELERATE_USE_CPU"] = saved_cpu
    result = subprocess.CompletedProcess(argv, code, "", said.getvalue())
    if check:
        assert code == 0, f"{' '.join(argv)}: exit {code}\n{result.stderr[-3000:]}"
    return result


class RunHere:
    """In an experiment's runner, in place of ``subprocess.Popen``: the run's command (``python -m mpp <command>``)
    run in this process (``run_command_here``), to its end, one run at a time; its console output written where the
    process's would go."""

    one_at_a_time = threading.Lock()

    def __init__(self, command: tuple[str, ...], stdout: io.TextIOBase, stderr: int) -> None:
        python, module_flag, package, name, *args = command
        assert (python, module_flag, package) == (sys.executable, "-m", "mpp"), command  # another launcher is a
        # process the runner starts
        root = logging.getLogger()
        with self.one_at_a_time:
            handlers, level = root.handlers[:], root.level  # the experiment's console, which a recipe sets anew
            try:
                result = run_command_here(name, *args, check=False)
            finally:
                root.handlers[:], root.level = handlers, level
        stdout.write(result.stderr)
        self.returncode = result.returncode

    def wait(self) -> int:
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """Nothing to stop: the run has ended."""


def start(*args: str, processes: int = 1) -> subprocess.Popen:
    """The recipe running in the background, in a process group of its own (as a scheduler's job)."""
    command, env = accelerate_command(RECIPE, args, processes)
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


def wait_for_log(path: Path, pattern: str, process: subprocess.Popen, timeout: float = 120) -> re.Match:
    """Waits until ``path`` (a run's log.txt) holds ``pattern``; fails if ``process`` ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, path.read_text()) if path.is_file() else None
        if found:
            return found
        assert process.poll() is None, process.communicate()[1][-3000:]
        time.sleep(0.02)
    raise AssertionError(f"no {pattern!r} in {path} after {timeout} s")


def training_process(launcher: subprocess.Popen, rank: int | None = None) -> int:
    """The pid of one rank's training process: a child of the launcher (torchrun runs inside accelerate launch); with
    one process (no rank), the launcher's child."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])  # after "pid (name) state"
            environment = (stat.parent / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
        if parent == launcher.pid and (rank is None or f"RANK={rank}".encode() in environment):
            return int(stat.parent.name)
    raise AssertionError(f"no training process of rank {rank} under launcher {launcher.pid}")


def load_script(script: Path, name: str):
    """A recipe script imported as module ``name``, ``sys.path`` as it was before (the recipes take their own folder
    off it)."""
    spec = importlib.util.spec_from_file_location(name, script)
    module = importlib.util.module_from_spec(spec)
    saved_path = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved_path
    return module


def write_two_noise_classes(root: Path, counts: dict[str, int]) -> None:
    """``root/<split>/{bright,dark}/<i>.png``: 16x16 noise about a bright and a dark level, ``counts[split]`` images
    per class, seeded."""
    rng = np.random.default_rng(0)
    for split, count in counts.items():
        for name, level in (("bright", 0.7), ("dark", 0.3)):
            (root / split / name).mkdir(parents=True)
            for index in range(count):
                pixels = np.clip(level + 0.15 * rng.standard_normal((16, 16, 3)), 0, 1)
                Image.fromarray((pixels * 255).astype(np.uint8)).save(root / split / name / f"{index}.png")
