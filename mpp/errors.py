"""The errors a user can act on. Every module raises these; entry points print the message as one line (``error:
<message>``) and exit with status 1 (mpp/command_line.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# what study/, tools/ and users may import from here
__all__ = [
    "ConfigError", "DataError", "RunError", "RunFinished",
]



class RunError(Exception):
    """A run cannot start or go on, for a reason the user can act on; the message says what to do. Entry points print
    it as one line, ``error: <message>``, and exit with status 1 (mpp/command_line.py)."""


class ConfigError(RunError, ValueError):
    """A configuration value or key that cannot be used; the message names it and the fix."""


class DataError(ConfigError):
    """Data that cannot be read as asked; the message names the path or column and how to fix it."""


class RunFinished(Exception):
    """Not a failure: a run asked to resume had already trained its last step and written its results, so there is
    nothing to do. Entry points say so and exit with status 0; the Python API returns the finished run's result."""

    def __init__(self, message: str, run_dir: Path, metrics: dict[str, Any]) -> None:
        super().__init__(message)
        self.run_dir, self.metrics = run_dir, metrics
