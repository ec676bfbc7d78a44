"""The comparison over seeds on a user's own images (recipes/compare.py, ``mpp.compare``): its plan, its tables, and
the whole command at toy size on folders of images made here."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

import mpp
from mpp.config.building import build_config
from mpp.errors import ConfigError, DataError
from mpp.experiments import comparison as comparison_module
from mpp.experiments.comparison import compare, plan_runs, publish, results_table
from mpp.experiments.config import ComparisonConfig
from tests.launching import ROOT, run_here
from tests.recipes.test_own_images import write_images

PRESET = ROOT / "recipes" / "configs" / "compare_own_images_cpu.yaml"
IMAGES = ["unlabelled=hf:/data/images", "labelled=hf:/data/labelled"]


def test_each_seed_pre_trains_once_draws_its_labelled_images_and_reads_every_arm_after_it(tmp_path):
    cfg = build_config(ComparisonConfig, PRESET, [*IMAGES, f"output_dir={tmp_path}", "seeds=[3,4]",
                                                  "labelled_per_class=20", "scratch=[train.epochs=200]"])
    runs = {run.name: run for run in plan_runs(cfg)}
    assert sorted(runs) == sorted(f"{stage}-seed{seed}" for seed in (3, 4) for stage in (
        "pretrain/mpp", "finetune/mpp", "finetune/scratch", "finetune/random", "linear_probe/mpp",
        "linear_probe/random", "linear_probe/pixels", "knn/mpp", "knn/random", "knn/pixels"))
    pretraining = runs["pretrain/mpp-seed3"]
    assert "data.source=hf:/data/images" in pretraining.command and "seed=3" in pretraining.command
    assert pretraining.command[:5] == (sys.executable, "-m", "mpp", "pretrain", "--config")  # the installed package
    for name, source in (("finetune/mpp", f"init={tmp_path}/pretrain/mpp-seed3"),
                         ("finetune/scratch", f"init=random:{tmp_path}/pretrain/mpp-seed3"),
                         ("finetune/random", f"init=random:{tmp_path}/pretrain/mpp-seed3"),
                         ("knn/pixels", "eval.features=pixels")):
        run = runs[f"{name}-seed3"]
        assert source in run.command and "data.source=hf:/data/labelled" in run.command
        # each seed its own labelled images, the same for every arm and protocol of the seed
        assert {"data.shots_per_class=20", "data.subset_seed=3"} <= set(run.command)
        assert "data.subset_seed=4" in runs[f"{name}-seed4"].command
        assert run.after == (None if name == "knn/pixels" else "pretrain/mpp-seed3")
    # the baseline trains to its plateau, beside the recipe every fine-tuning shares
    assert "train.epochs=200" in runs["finetune/scratch-seed3"].command
    assert "train.epochs=200" not in runs["finetune/random-seed3"].command


def test_the_images_are_required_and_few_shot_is_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match="^unlabelled and labelled must name your images as data.source does"):
        compare(build_config(ComparisonConfig, PRESET, [f"output_dir={tmp_path}"]))
    assert not any(tmp_path.iterdir())  # refused before anything was written
    with pytest.raises(ConfigError, match="^few_shot: the comparison reads no few-shot regression"):
        build_config(ComparisonConfig, PRESET, [*IMAGES, "few_shot=[few_shot.seeds=2]"])


@pytest.fixture
def folders(tmp_path) -> dict[str, str]:
    """Unlabelled images and labelled ones in two classes (6 training, 4 test images each), as folder: sources."""
    classes = {"circles": (30, 90, 200), "leaves": (40, 160, 60)}
    write_images(tmp_path / "images", 12, {"all": (200, 60, 40)})
    write_images(tmp_path / "train", 6, classes)
    write_images(tmp_path / "val", 4, classes)
    return {name: str(tmp_path / name) for name in ("images", "train", "val")}


def checked(tmp_path, folders, *overrides: str) -> None:
    cfg = build_config(ComparisonConfig, PRESET, [f"unlabelled=folder:{folders['images']}",
                                                  f"labelled=folder:{folders['train']}",
                                                  f"output_dir={tmp_path / 'comparison'}", "labelled_per_class=0",
                                                  *overrides])  # the preset's 100 per class: more than these have
    compare(cfg)


def test_a_mistyped_key_or_labelled_images_that_cannot_serve_are_refused_before_anything_runs(tmp_path, folders,
                                                                                             monkeypatch):
    monkeypatch.setattr(comparison_module, "run_experiment", lambda *args: pytest.fail("a run would have started"))
    test_split = f"data=[data.eval_folder={folders['val']}]"
    with pytest.raises(DataError, match="has no evaluation split: set data.eval_folder"):
        checked(tmp_path, folders)
    with pytest.raises(ConfigError, match=r"^pretrain/mpp-seed0 cannot start: unknown config key 'train.epoch' \(did "
                                          r"you mean 'train.epochs'\?\)(.|\n)*from the experiment's mpp=\[...\]"):
        checked(tmp_path, folders, test_split, "mpp=[train.epoch=3]")
    with pytest.raises(ConfigError, match=r"^finetune/scratch-seed0 cannot start: .*'train.step'"):
        checked(tmp_path, folders, test_split, "scratch=[train.step=3]")
    with pytest.raises(ConfigError, match=r"^tune_once=true .* the fine-tuning has no sweep: give finetune=\[...\] a "
                                          r"finetune.sweep_lrs=\[...\] \(a list given on the command line replaces "
                                          r"the preset's\), or set tune_once=false"):
        checked(tmp_path, folders, test_split, "finetune=[finetune.ema_decay=0.5]")
    with pytest.raises(DataError, match=r"labelled_per_class=10, but of the 12 labelled training images class 0 "
                                        r"\(circles\) has 6, class 1 \(leaves\) has 6: lower labelled_per_class to "
                                        "at most 6"):
        checked(tmp_path, folders, test_split, "labelled_per_class=10")
    for split in ("train", "val"):  # one class left
        shutil.rmtree(Path(folders[split]) / "leaves")
    with pytest.raises(DataError, match="has a single class, and a classifier needs two or more"):
        checked(tmp_path, folders, test_split)
    assert not (tmp_path / "comparison").exists()  # nothing was written


def test_a_class_of_one_image_and_test_images_also_unlabelled_are_said_before_anything_runs(tmp_path, folders,
                                                                                           monkeypatch, caplog):
    monkeypatch.setattr(comparison_module, "run_experiment", lambda *args: None)
    leaves = Path(folders["train"]) / "leaves"
    for extra in sorted(leaves.iterdir())[1:]:
        extra.unlink()
    # Three test images are unlabelled ones, at twice the size: the same content
    for index, image in enumerate(sorted(Path(folders["images"], "all").iterdir())[:3]):
        with Image.open(image) as opened:
            opened.resize((80, 72)).save(Path(folders["val"]) / "circles" / f"also-unlabelled-{index}.png")
    with caplog.at_level(logging.INFO):
        checked(tmp_path, folders, f"data=[data.eval_folder={folders['val']}]")
    said = caplog.text
    assert "the labelled training images of class 1 (leaves) number one" in said
    assert "3 of the 11 test images are also among the 12 unlabelled images (by content, at any size)" in said


def test_the_python_call_builds_the_config_the_command_line_does(tmp_path, monkeypatch):
    called = {}
    monkeypatch.setattr(comparison_module, "compare", lambda cfg: called.update(cfg=cfg))
    mpp.compare("hf:/data/images", "hf:/data/labelled", tmp_path, seeds=[0, 1], mpp=["train.epochs=200"])
    assert called["cfg"] == build_config(ComparisonConfig, PRESET, [*IMAGES, f"output_dir={tmp_path}", "seeds=[0,1]",
                                                                     "mpp=[train.epochs=200]"])


def arm(*values: float) -> dict[str, list[float]]:
    return {"accuracy": list(values), "balanced_accuracy": list(values)}


FLOORS = {"majority_class_accuracy": 0.4, "chance_balanced_accuracy": 1 / 3}


def example_results(**finetuned: dict[str, list[float]]) -> dict:
    return {"seeds": [0, 1, 2], "pretraining_steps": 3600, "finetuning_steps": {"mpp": 250, "scratch": 1000,
                                                                                "random": 250},
            "protocols": {
                "finetune": {"mpp": arm(0.6, 0.7, 0.65), "scratch": arm(0.55, 0.6, 0.6),
                             "random": arm(0.5, 0.55, 0.5), "floors": FLOORS, **finetuned},
                "linear_probe": {"mpp": arm(0.5, 0.5, 0.6), "random": arm(0.5, 0.5, 0.5),
                                 "pixels": arm(0.62, 0.66, 0.64), "floors": FLOORS},
                "knn": {"mpp": arm(0.5, 0.6, 0.7), "random": arm(0.5, 0.6, 0.7), "pixels": arm(0.3, 0.3, 0.3),
                        "floors": FLOORS}}}


def test_the_tables_open_with_the_verdict_and_read_every_fine_tuned_arm_against_scratch_and_the_pixels():
    table = results_table(example_results())
    verdict = table.split("Seeds:")[0]
    assert verdict.startswith("**What pre-training bought** (fine-tuned, balanced accuracy, MPP against a ViT from "
                              "scratch (1,000 steps) with the same recipe and its own rate): +6.7 [")
    # MPP fine-tuned 65.0 against the pixels' logistic regression 64.0: +1.0, not shown; scratch 58.3: below, shown
    assert "Fine-tuned from MPP against logistic regression on the raw pixels of the same labelled images (the floor " \
           "an encoder must clear): +1.0 [" in verdict and "the encoder **is not shown to clear it**." in verdict
    assert "Fine-tuned from scratch against" in verdict and "-5.7 [-9.5, -1.9], the opposite shown (p 0.023); the " \
           "encoder **does not clear it**: it is below the pixels." in verdict
    header = ("| Protocol | MPP pre-trained (3,600 + 250 steps) | from scratch (1,000 steps) | random weights, as "
              "briefly (250 steps) | raw pixels |")
    assert f"{header} largest class |" in table and f"{header} chance |" in table
    assert "| Fine-tuned | 65.0 ± 5.0 | 58.3 ± 2.9 | 51.7 ± 2.9 | 64.0 ± 2.0 | 33.3 |" in table  # pixels: the probe's
    assert "| Linear probe | 53.3 ± 5.8 | — | 50.0 ± 0.0 | 64.0 ± 2.0 | 33.3 |" in table
    assert "| MPP pre-trained - from scratch | +6.7 [" in table
    assert "| from scratch - raw pixels (logistic regression) | -5.7 [" in table
    # kNN: MPP and random weights agree on every seed (no interval); the linear probe's differ by +3.3, +3.3 and
    # +13.3; the pixels' kNN is 30 on every seed, so MPP's +20, +30, +40 against it has a spread
    assert "+0.0 on every seed: no difference, no interval" in table


def test_the_tables_name_each_arms_rate_and_one_chosen_at_an_end_of_its_grid():
    results = example_results()
    results["rates"] = {"mpp": {"chosen": 0.1, "grid": [0.03, 0.1, 0.3]},
                        "scratch": {"chosen": 0.3, "grid": [0.03, 0.1, 0.3]}}
    table = results_table(results)
    assert ("Learning rates, each arm's sweep on seed 0 of 0.03, 0.1, 0.3: MPP pre-trained 0.1; from scratch 0.3 "
            "(**the grid's highest**: the best rate may lie above it; add one to finetune.sweep_lrs).") in table
    assert "Learning rates" not in results_table(example_results())  # a comparison without a sweep says nothing
    results["rates"]["mpp"]["grid"] = [0.01, 0.03, 0.1, 0.3]  # an arm with a grid of its own: each arm's is named
    assert ("Learning rates, each arm's sweep on seed 0: MPP pre-trained 0.1 of 0.01, 0.03, 0.1, 0.3; from scratch "
            "0.3 of 0.03, 0.1, 0.3 (**the grid's highest**") in results_table(results)


def test_a_rate_at_either_end_of_its_grid_is_named_and_one_inside_it_or_alone_is_not():
    from mpp.training.classifier_training import grid_edge

    assert [grid_edge(rate, [0.3, 0.03, 0.1]) for rate in (0.03, 0.1, 0.3)] == ["lowest", None, "highest"]
    assert grid_edge(0.1, [0.1]) is None


def test_with_the_papers_recipe_beside_both_arms_run_it_too_and_the_tables_read_what_regularising_changes(tmp_path):
    paper = "paper_recipe=[augment.auto_augment=none,augment.mixup_alpha=0]"
    cfg = build_config(ComparisonConfig, PRESET, [*IMAGES, f"output_dir={tmp_path}", "seeds=[3]", paper,
                                                  "scratch=[train.epochs=200]"])
    runs = {run.name: run for run in plan_runs(cfg)}
    assert {"finetune/mpp_paper-seed3", "finetune/scratch_paper-seed3"} < set(runs) and len(runs) == 12
    for paper_arm, twin in (("mpp_paper", "mpp"), ("scratch_paper", "scratch")):
        command, regularised = runs[f"finetune/{paper_arm}-seed3"].command, runs[f"finetune/{twin}-seed3"].command
        # the twin's command with the paper's recipe after its own overrides (so it wins), in a folder of its own
        init = next(part for part in regularised if part.startswith("init="))
        assert command.index("augment.mixup_alpha=0") > command.index(init)
        assert [part for part in command if not part.startswith(("augment.", "output_dir="))] == [
            part for part in regularised if not part.startswith("output_dir=")]
    results = example_results(mpp_paper=arm(0.62, 0.66, 0.64), scratch_paper=arm(0.5, 0.52, 0.54))
    results["finetuning_steps"] |= {"mpp_paper": 250, "scratch_paper": 1000}
    table = results_table(results)
    assert ("| Protocol | MPP pre-trained (3,600 + 250 steps) | from scratch (1,000 steps) | MPP pre-trained, the "
            "paper's recipe (3,600 + 250 steps) | from scratch, the paper's recipe (1,000 steps) |") in table
    fine_tuned = "| Fine-tuned | 65.0 ± 5.0 | 58.3 ± 2.9 | 64.0 ± 2.0 | 52.0 ± 2.0 | 51.7 ± 2.9 | 64.0 ± 2.0 | 33.3 |"
    assert fine_tuned in table
    assert "| Linear probe | 53.3 ± 5.8 | — | — | — | 50.0 ± 0.0 | 64.0 ± 2.0 | 33.3 |" in table
    for finding in ("MPP pre-trained, the paper's recipe - from scratch, the paper's recipe",
                    "MPP pre-trained - MPP pre-trained, the paper's recipe",
                    "from scratch - from scratch, the paper's recipe"):
        assert f"| {finding} | " in table


def test_a_difference_equal_on_every_seed_says_so_and_stays_out_of_holm():
    table = results_table(example_results(scratch=arm(0.58, 0.68, 0.63)))  # MPP is 2 points ahead on every seed
    assert "| MPP pre-trained - from scratch | +2.0 on every seed: no spread, no t-test |" in table
    assert "These tables read 6 comparisons" in table  # of 8 per measure: this one and kNN's 0 on every seed left out


def test_the_results_are_copied_to_publish_dir_and_its_tables_written_again_from_there(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the preset names its stage presets from the repository root
    finished, published = tmp_path / "comparison", tmp_path / "published"
    finished.mkdir()
    results = {**example_results(), "runs": 30, "wall_seconds": 120.0}
    (finished / "results.json").write_text(json.dumps(results))
    cfg = build_config(ComparisonConfig, PRESET, [*IMAGES, f"output_dir={finished}", f"publish_dir={published}"])
    table = publish(cfg, results, finished)["table"]
    assert (published / "results.md").read_text() == (finished / "results.md").read_text() == table
    assert json.loads((published / "results.json").read_text()) == results
    (published / "results.md").unlink()
    again = build_config(ComparisonConfig, PRESET, [f"output_dir={tmp_path / 'elsewhere'}",
                                                     f"publish_dir={published}", "tables_only=true"])
    assert compare(again)["table"] == table == (published / "results.md").read_text()
    assert not (tmp_path / "elsewhere").exists()  # nothing ran


@pytest.mark.slow
@pytest.mark.many_runs
@pytest.mark.usefixtures("experiment_runs_here")
def test_the_comparison_runs_end_to_end_on_folders_of_images_and_continues_without_rerunning(tmp_path):
    write_images(tmp_path / "images", 32, {"all": (200, 60, 40)})
    for split, count in (("train", 16), ("val", 8)):
        write_images(tmp_path / "labelled" / split, count, {"circles": (30, 90, 200), "leaves": (40, 160, 60)})
    subprocess.run([sys.executable, "-m", "mpp.data.prepare", f"folder:{tmp_path / 'labelled' / 'train'}",
                    str(tmp_path / "labelled-prepared"), f"eval_folder={tmp_path / 'labelled' / 'val'}", "--splits",
                    "train", "test", "--short-side", "40"], check=True, cwd=ROOT, capture_output=True)
    schedule = "train.epochs=2,train.warmup_epochs=0.5,train.global_batch_size=16,train.log_every=2"
    command = [f"unlabelled=folder:{tmp_path / 'images'}",
               f"labelled=hf:{tmp_path / 'labelled-prepared'}", f"output_dir={tmp_path / 'comparison'}",
               "seeds=[0,1]", "encoder=[model.img_size=16,model.patch_size=4,model.embed_dim=32,model.depth=2]",
               f"mpp=[{schedule},train.checkpoint_every=4,monitor.mosaic_every=0]", f"finetune=[{schedule}]",
               "scratch=[train.epochs=4]", "labelled_per_class=12", "knn=[knn.k=5]", "tune_once=false"]
    ended = run_here(*command, script=ROOT / "recipes" / "compare.py", check=False)
    assert ended.returncode == 0, ended.stderr[-3000:]
    assert "progress: 20 of 20 runs done" in ended.stderr and "min left at this pace" in ended.stderr
    results = json.loads((tmp_path / "comparison" / "results.json").read_text())
    assert results["runs"] == 20 and results["seeds"] == [0, 1]
    assert results["finetuning_steps"] == {"mpp": 2, "scratch": 4, "random": 2}  # 24 images, batch 16: a step an epoch
    assert results["version"]["package"] == mpp.__version__ and len(results["version"]["commit"]) >= 40
    for protocol, arms in (("finetune", {"mpp", "scratch", "random"}), ("linear_probe", {"mpp", "random", "pixels"}),
                           ("knn", {"mpp", "random", "pixels"})):
        scores = results["protocols"][protocol]
        assert set(scores) == arms | {"floors"}
        assert all(len(scores[arm]["accuracy"]) == 2 and all(0 <= value <= 1 for value in scores[arm]["accuracy"])
                   for arm in arms)
        assert scores["floors"] == {"majority_class_accuracy": 0.5, "chance_balanced_accuracy": 0.5}  # 8 val each
    table = (tmp_path / "comparison" / "results.md").read_text()
    assert table.startswith("**What pre-training bought**") and "20 runs, 2 at a time" in table
    assert "MPP pre-trained - from scratch" in table and "MPP pre-trained - random weights, as briefly" in table
    # each seed drew its own 12 of the 16 labelled training images per class, the pixels' readings included
    for seed in (0, 1):
        config = (tmp_path / "comparison" / "linear_probe" / f"pixels-seed{seed}" / "config.yaml").read_text()
        assert f"subset_seed: {seed}\n" in config and "shots_per_class: 12\n" in config
    again = run_here(*command, script=ROOT / "recipes" / "compare.py", check=False)
    assert again.returncode == 0 and "20 runs, 20 already finished" in again.stderr
