"""``python -m mpp inspect`` as a script (mpp/commands.py says what it does; ``--help`` says it here too):

    accelerate launch eval/inspect_encoder.py [--config <preset name or file>] [key=value ...]
"""

from __future__ import annotations

import sys

from mpp.command_line import run_command


def cli() -> None:
    """The command line; what each process runs under `accelerate launch --tpu --main_training_function cli`."""
    run_command("inspect", [sys.argv[0]], sys.argv[1:])


if __name__ == "__main__":
    cli()
