"""The trail of one MPP training step (tools/step_trail.py): traced, at most 15 files of mpp/, one way down from the
command line to the model, and the very list docs/layout.md shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.step_trail import BEGIN, END, page_with_trail, step_trail, trail_markdown

LAYOUT = Path(__file__).parents[2] / "docs" / "layout.md"


@pytest.fixture(scope="module")
def trail() -> dict[str, list[str]]:
    return step_trail()


def test_one_step_runs_through_at_most_15_files_from_the_command_line_down(trail):
    files = list(trail)
    assert len(files) <= 15, files
    # The stack above the loop comes first, bottom up; the loop's own calls reach the model and the loader.
    assert files[:3] == ["mpp/command_line.py", "mpp/recipes/pretraining.py", "mpp/training/trainer.py"]
    assert "train_steps" in trail["mpp/training/trainer.py"]
    assert "__next__" in trail["mpp/data/loading.py"]
    assert {"corrupt_patch_embeddings", "colour_targets", "loss"} <= set(trail["mpp/models/masked_patch_prediction.py"])
    assert not any(name.startswith("mpp/config/") for name in files)  # the config is read before the run, not in it


def test_the_layout_page_shows_the_trail_as_traced(trail):
    page = LAYOUT.read_text()
    shown = page.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert shown == trail_markdown(trail), "docs/layout.md's trail is stale: python -m tools.step_trail --write " \
                                           "docs/layout.md"


def test_writing_the_trail_replaces_only_the_block_between_its_markers():
    page = f"before\n{BEGIN}\nold trail\n{END}\nafter\n"
    written = page_with_trail(page, {"mpp/images.py": ["f", "g"]})
    assert written == f"before\n{BEGIN}\n1. `mpp/images.py`: `f`, `g`\n{END}\nafter\n"
    with pytest.raises(SystemExit, match="no .* block"):
        page_with_trail("a page without the markers", {})
