"""What a run returns to its caller: its metrics (as ``metrics.json`` holds them) and where it wrote."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from mpp.run import EXPORT_DIR


@dataclass(frozen=True)
class RunResult:
    """A finished run: its results, ``metrics`` (``metrics.json`` holds them, with what the run was: its backend, and
    an evaluation's encoder and features), and its ``run_dir``. Plain values only, so that a launcher can send it from
    one process to another."""

    run_dir: Path
    metrics: dict[str, Any]

    @property
    def export_dir(self) -> Optional[Path]:
        """The encoder in timm's hub format (``timm.create_model(f"local-dir:{export_dir}", pretrained=True)``), for
        the runs that export one (MPP and supervised pre-training); else None."""
        path = self.run_dir / EXPORT_DIR
        return path if path.is_dir() else None
