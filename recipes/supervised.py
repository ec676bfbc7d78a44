"""``python -m mpp supervised`` as a script (mpp/commands.py says what it does; ``--help`` says it here too):

    accelerate launch recipes/supervised.py [--config <preset name or file>] [key=value ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

# Python puts this script's folder first on sys.path, where recipes/mpp.py would shadow the `mpp` package.
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from mpp.command_line import run_command


def cli() -> None:
    """The command line; what each process runs under `accelerate launch --tpu --main_training_function cli`."""
    run_command("supervised", [sys.argv[0]], sys.argv[1:])


if __name__ == "__main__":
    cli()
