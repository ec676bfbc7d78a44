"""The trail of one MPP training step (tools/step_trail.py): traced from the command line to the first
``optimizer.step()``, set-up included and imports left out, at most 15 files of mpp/ outside its config sections, and
the very list docs/layout.md shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.step_trail import BEGIN, END, outside_config, page_with_trail, step_trail, trail_markdown

LAYOUT = Path(__file__).parents[2] / "docs" / "layout.md"
# The tests that read the trail run on one worker, so that its traced run (a fresh interpreter, 10-19 s) runs once.
TRAIL_TESTS = pytest.mark.xdist_group("step trail")


@pytest.fixture(scope="module")
def trail() -> dict[str, list[str]]:
    return step_trail()


@TRAIL_TESTS
def test_one_step_runs_through_at_most_15_files_from_the_command_line_down(trail):
    files = outside_config(trail)
    assert len(files) <= 15, files
    # From the command line, through the table of commands and the recipe, to the trainer, whose loop reaches the
    # model and the loader; the set-up before the step counts as much as the step.
    assert files[:2] == ["mpp/command_line.py", "mpp/commands.py"]
    order = {path: index for index, path in enumerate(files)}
    assert order["mpp/recipes/pretraining_run.py"] < order["mpp/run.py"] < order["mpp/training/trainer.py"]
    assert {"parse_command_line", "build_config"} <= set(trail["mpp/config/building.py"])
    assert {"pretrain_mpp", "pre_training_monitors"} <= set(trail["mpp/recipes/pretraining_run.py"])
    assert {"fit", "train_steps"} <= set(trail["mpp/training/trainer.py"])
    assert {"build_dataset", "plan_batches", "training_batches", "__next__"} <= set(trail["mpp/data/loading.py"])
    assert {"corrupt_patch_embeddings", "colour_targets", "loss"} <= set(trail["mpp/models/masked_patch_prediction.py"])
    assert {"learning_rate", "only_if_finite"} <= set(trail["mpp/training/optimizer.py"])


@TRAIL_TESTS
def test_imports_are_left_out_of_the_trail(trail):
    # Class bodies and module-level code run at import: none of the modules imported only for their names is met.
    assert "mpp/recipes/run_result.py" not in trail and "mpp/data/cifar.py" not in trail


@TRAIL_TESTS
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
