"""What every entry point does with its command line: build the config, run, and turn the failures a user can act
on into a one-line message and an exit status.

Only the config is read before the run starts: torch, timm and accelerate are imported after it is valid, so that
``--help``, ``--print-config`` and a mistyped key answer in about a second."""

from __future__ import annotations

import importlib
import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Union

from mpp.config.building import parse_command_line
from mpp.errors import RunError, RunFinished

logger = logging.getLogger(__name__)


def continue_command(checkpoint: Path) -> str:
    """The command that continues a run stopped after writing ``checkpoint``: this one, with ``--resume`` and the
    run's directory (the nearest folder above the checkpoint that holds the run's config), under the launcher it
    ran under (``accelerate launch``, with its process count; or this Python)."""
    from accelerate import PartialState

    from mpp.private_apis import accelerate_launch_variable
    from mpp.run.directory import CONFIG_FILE

    run_dir = next(folder for folder in Path(checkpoint).parents if (folder / CONFIG_FILE).is_file())
    kept = [arg for arg in sys.argv[1:] if arg != "--resume" and not arg.startswith(("output_dir=", "resume="))]
    processes = PartialState().num_processes
    launcher = (["accelerate", "launch", *(["--num_processes", str(processes)] if processes > 1 else [])]
                if accelerate_launch_variable() in os.environ else [sys.executable])
    return shlex.join([*launcher, sys.argv[0], *kept, "--resume", f"output_dir={run_dir}"])


def run_recipe(main: Union[str, Callable[[Any], Any]], config_class: type, default_preset: Path,
               description: str) -> None:
    """``main(config)`` from ``sys.argv``: ``[--config FILE] [--resume] [key=value ...]``; ``main`` is the function or
    its name, ``module:function``, imported (with torch) once the config is valid."""
    try:
        config = parse_command_line(config_class, sys.argv[1:], default_preset, description=description)
    except RunError as error:
        sys.exit(f"error: {error}")
    from accelerate import PartialState

    from mpp.training.preemption import Preempted, stop_with_launcher

    stop_with_launcher()  # a launcher killed alone: training saves a checkpoint and stops rather than run on orphaned
    if isinstance(main, str):
        module, function = main.split(":")
        main = getattr(importlib.import_module(module), function)
    try:
        main(config)
    except RunError as error:
        sys.exit(f"error: {error}")
    except RunFinished as finished:  # resumed after its end (run twice, a scheduler's requeue): nothing to do
        logger.info("%s", finished)
        sys.exit(0)
    except Preempted as stop:
        said = f"{stop.continued_by('--resume')}: {continue_command(stop.checkpoint)}"
        if PartialState().is_main_process:
            logger.warning(said)  # on the console and in the run's log.txt
        else:
            print(said, file=sys.stderr)
        sys.exit(128 + stop.signum)  # the shell's code for "ended by this signal", so schedulers see why
