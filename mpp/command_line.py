"""What every command does with its command line (``python -m mpp <command>``, a script of recipes/ or eval/, a
study's): build the config, run, and turn the failures a user can act on into a one-line message and an exit status.

Only the config is read before the run starts: torch, timm and accelerate are imported after it is valid, so that
``--help``, ``--print-config`` and a mistyped key answer in about a second."""

from __future__ import annotations

import logging
import os
import shlex
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from mpp.commands import COMMANDS, help_text, imported
from mpp.config.building import parse_command_line, preset_names
from mpp.errors import RunError, RunFinished

__all__ = ["main", "run_command", "run_recipe"]  # what study/, tools/ and users may import from here


logger = logging.getLogger(__name__)


def continue_command(checkpoint: Path, invocation: Sequence[str], argv: Sequence[str]) -> str:
    """The command that continues a run stopped after writing ``checkpoint``: this one (``invocation``, what followed
    the launcher, and its arguments ``argv``), with ``--resume`` and the run's directory (the nearest folder above the
    checkpoint that holds the run's config), under the launcher it ran under (``accelerate launch``, with its process
    count; or this Python)."""
    from accelerate import PartialState

    from mpp.private_apis import accelerate_launch_variable
    from mpp.run import CONFIG_FILE

    run_dir = next(folder for folder in Path(checkpoint).parents if (folder / CONFIG_FILE).is_file())
    kept = [arg for arg in argv if arg != "--resume" and not arg.startswith(("output_dir=", "resume="))]
    processes = PartialState().num_processes
    launcher = (["accelerate", "launch", *(["--num_processes", str(processes)] if processes > 1 else [])]
                if accelerate_launch_variable() in os.environ else [sys.executable])
    return shlex.join([*launcher, *invocation, *kept, "--resume", f"output_dir={run_dir}"])


def main(argv: Optional[Sequence[str]] = None) -> None:
    """``python -m mpp <command> [--config <preset>] [key=value ...]``: the command's own arguments follow its name;
    with none, or ``--help``, the table of commands and the presets."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(commands_help())
        sys.exit(0 if argv else 2)
    if argv[0] not in COMMANDS:
        sys.exit(f"error: {argv[0]!r} is not a command of mpp; the commands: {', '.join(COMMANDS)} (python -m mpp "
                 "--help describes them)")
    run_command(argv[0], ["-m", "mpp", argv[0]], argv[1:])


def commands_help() -> str:
    """``python -m mpp --help``: each command with what it does and the preset it reads without --config, then
    the presets' names."""
    width = max(map(len, COMMANDS))
    lines = ["usage: python -m mpp <command> [--config <preset name or file>] [key=value ...]",
             "       accelerate launch -m mpp <command> ...", "", "commands (python -m mpp <command> --help: its "
             "keys, each with its value in the default preset):"]
    lines += [textwrap.fill(f"{name:<{width}}  {command.summary} (default preset: {command.preset})", 118,
                            initial_indent="  ", subsequent_indent=" " * (width + 4))
              for name, command in COMMANDS.items()]
    presets = textwrap.fill(", ".join(preset_names()), 116, initial_indent="  ", subsequent_indent="  ")
    return "\n".join([*lines, "", "presets (--config <name>, or the path of a YAML file of your own):", presets])


def run_command(name: str, invocation: Sequence[str], argv: Sequence[str]) -> None:
    """Command ``name`` of mpp/commands.py with its arguments ``argv``; ``invocation``: what followed the launcher
    (``-m mpp <name>``, or a script's path), for the command that continues a stopped run."""
    command = COMMANDS[name]
    run_recipe(command.run, command.config_class(), command.preset, help_text(name), invocation, argv,
               prog=f"python -m mpp {name}")


def run_recipe(main: Union[str, Callable[[Any], Any]], config_class: type, default_preset: Union[str, Path],
               description: str, invocation: Optional[Sequence[str]] = None, argv: Optional[Sequence[str]] = None,
               prog: Optional[str] = None) -> None:
    """``main(config)`` from ``argv`` (``sys.argv[1:]``): ``[--config PRESET] [--resume] [key=value ...]``; ``main``
    is the function or its name, ``module:function``, imported (with torch) once the config is valid;
    ``invocation``: what followed the launcher (``sys.argv[0]``, a script)."""
    invocation = [sys.argv[0]] if invocation is None else list(invocation)
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        config = parse_command_line(config_class, argv, str(default_preset), description=description, prog=prog)
    except RunError as error:
        sys.exit(f"error: {error}")
    from accelerate import PartialState

    from mpp.training.checkpoint import Preempted, stop_with_launcher

    stop_with_launcher()  # a launcher killed alone: training saves a checkpoint and stops rather than run on orphaned
    if isinstance(main, str):
        main = imported(main)
    try:
        main(config)
    except RunError as error:
        sys.exit(f"error: {error}")
    except RunFinished as finished:  # resumed after its end (run twice, a scheduler's requeue): nothing to do
        logger.info("%s", finished)
        sys.exit(0)
    except Preempted as stop:
        said = f"{stop.continued_by('--resume')}: {continue_command(stop.checkpoint, invocation, argv)}"
        if PartialState().is_main_process:
            logger.warning(said)  # on the console and in the run's log.txt
        else:
            print(said, file=sys.stderr)
        sys.exit(128 + stop.signum)  # the shell's code for "ended by this signal", so schedulers see why
