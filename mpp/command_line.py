"""What every entry point does with its command line: build the config, run, and turn the failures a user can act
on into a one-line message and an exit status."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

from mpp.config.building import parse_command_line
from mpp.errors import RunError
from mpp.training.preemption import Preempted, stop_with_launcher


def run_recipe(main: Callable[[Any], Any], config_class: type, default_preset: Path, description: str) -> None:
    """``main(config)`` from ``sys.argv``: ``[--config FILE] [--resume] [key=value ...]``."""
    stop_with_launcher()  # a launcher killed alone: training saves a checkpoint and stops rather than run on orphaned
    try:
        main(parse_command_line(config_class, sys.argv[1:], default_preset, description=description))
    except RunError as error:
        sys.exit(f"error: {error}")
    except Preempted as stop:
        print(stop, file=sys.stderr)
        sys.exit(128 + stop.signum)  # the shell's code for "ended by this signal", so schedulers see why
