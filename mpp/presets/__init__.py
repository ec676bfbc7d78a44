"""The presets: YAML files of a run's settings, installed with the package (``recipes/configs/`` in a checkout links
to this folder). A preset is named by its name (``finetune_own_images_cpu``) anywhere one is asked for; a path to a
YAML file of your own works too. Which command reads which preset is written in mpp/commands.py."""

from __future__ import annotations

from pathlib import Path
from typing import Union

# what study/, tools/ and users may import from here
__all__ = [
    "preset_file", "preset_names", "preset_path",
]

PRESETS = Path(__file__).parent


def preset_file(name: str) -> Path:
    """The installed preset of that name (without ``.yaml``)."""
    return PRESETS / f"{name}.yaml"


def preset_names() -> list[str]:
    """Every installed preset's name."""
    return sorted(path.stem for path in PRESETS.glob("*.yaml"))


def preset_path(preset: Union[str, Path]) -> Path:
    """``preset`` as ``--config`` takes it: a bare name (no folder, no suffix) is the installed preset of that name;
    anything else, a file's path."""
    path = Path(preset)
    return path if path.suffix or len(path.parts) > 1 else preset_file(str(path))
