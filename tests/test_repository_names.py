"""Every preset, script, page and command in the repository names files that exist: a renamed preset or moved script
fails here, not in the hands of the user who copies the line."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# A file in the repository's own folders: with a suffix (mpp/mosaic or eval/test_accuracy without one are TensorBoard
# tags), or one of CI's scripts. A placeholder such as <preset> or a wildcard is not a name.
REPOSITORY_PATH = re.compile(r"(?<![\w/.-])((?:recipes|eval|docs|tests|mpp|results|study|tools)/[\w./-]*\.\w+"
                             r"|\.ci/\w+)")
# A preset named without its folder, as the pages and the presets' comments do: the package's, or the study's
PRESET_NAME = re.compile(r"(?<![\w/.-])((?:mpp|supervised|finetune|eval|compare|reproduce|curve|confirm)_\w+\.yaml)")
PRESET_FOLDERS = ("recipes/configs", "study/configs")
TEXT_FILES = (".md", ".yaml", ".py", ".sbatch", ".cff", ".toml", ".txt", "")


def repository_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / name for name in listed if Path(name).suffix in TEXT_FILES and (ROOT / name).is_file()]


def preset_path(name: str) -> str:
    """A preset's path from its name: in the folder that holds it (the first where none does)."""
    return next((f"{folder}/{name}" for folder in PRESET_FOLDERS if (ROOT / folder / name).is_file()),
                f"{PRESET_FOLDERS[0]}/{name}")


def current_lines(path: Path) -> list[str]:
    """The file's lines; of the changelog, the unreleased section's only (a released version's entry names the files
    of that version)."""
    lines = path.read_text(errors="replace").splitlines()
    if path.name == "CHANGELOG.md":
        released = next(number for number, line in enumerate(lines) if re.match(r"## \d", line))
        return lines[:released]
    return lines


def names_in(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(current_lines(path), start=1):
        for match in REPOSITORY_PATH.finditer(line):
            name = match.group(1).rstrip(".")
            if "<" not in line[match.start():match.end() + 1] and "*" not in name:
                found.append((number, name))
        found += [(number, preset_path(match.group(1))) for match in PRESET_NAME.finditer(line)]
    return found


def test_the_walk_finds_the_names_it_is_meant_to_check():
    names = {name for path in repository_files() for _, name in names_in(path)}
    assert {"recipes/configs/mpp_vit_b16_paper.yaml", "recipes/slurm.sbatch", "recipes/mpp.py",
            "docs/results.md", ".ci/xla"} <= names
    assert len(names) > 50


# A registration is appended to, never edited: the names it gave stay as written, and later amendments say where
# they moved (its Errata).
REGISTRATIONS = ("results/preregistration.md",)


@pytest.mark.parametrize("path", [path for path in repository_files()
                                  if str(path.relative_to(ROOT)) not in REGISTRATIONS],
                         ids=lambda path: str(path.relative_to(ROOT)))
def test_every_name_a_file_gives_exists(path):
    missing = [f"line {number}: {name}" for number, name in names_in(path)
               if not (ROOT / name).exists() and not (ROOT / (name + ".py")).exists()]
    assert not missing, f"{path.relative_to(ROOT)} names files that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize("package", sorted((ROOT / "mpp").glob("*/__init__.py")), ids=lambda path: path.parent.name)
def test_every_module_a_package_docstring_names_is_in_that_package(package):
    # A sub-package's docstring names its modules bare (``loading.py``), as a folder's guide does.
    named = re.findall(r"``(\w+\.py)``", package.read_text())
    missing = [name for name in named if not (package.parent / name).is_file()]
    assert not missing, f"{package.relative_to(ROOT)} names modules it does not hold: {missing}"
