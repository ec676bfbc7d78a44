"""``python -m mpp <command> [--config <preset>] [key=value ...]``, and ``accelerate launch -m mpp <command> ...``:
every command of mpp/commands.py."""

from mpp.command_line import main

if __name__ == "__main__":
    main()
