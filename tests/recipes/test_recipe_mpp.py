"""recipes/mpp.py end to end on the CPU, its command line as a user gives it: in the test's process (run_here), or
through ``accelerate launch`` in a subprocess where what the command prints is under test."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
import yaml
from PIL import Image
from safetensors.torch import load_file

from mpp.config.model import ModelConfig
from mpp.models.encoder import create_encoder
from tests.launching import RECIPE, TINY, accelerate_command, launch, run_here

pytestmark = pytest.mark.slow  # every test here launches a recipe or trains (pytest -m "not slow" leaves them out)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("recipe") / "run"
    run_here(f"output_dir={run_dir}", *TINY)
    return run_dir


def test_the_run_says_whether_mpp_beat_always_predicting_the_most_frequent_colour(run):
    metrics = json.loads((run / "metrics.json").read_text())
    above = metrics["mpp_accuracy"] > metrics["mpp_majority_class_accuracy"]
    assert metrics["mpp_accuracy_above_floor"] == above
    last = (run / "log.txt").read_text().strip().splitlines()[-1]
    assert ("is not above always predicting the most frequent colour" in last) == (not above), last


def test_a_run_writes_its_whole_directory(run):
    assert (run / "config.yaml").is_file() and (run / "log.txt").is_file()
    assert list(run.glob("events.out.tfevents.*")), "TensorBoard events belong in the run directory"
    assert [p.name for p in sorted((run / "checkpoints").iterdir())] == ["step_00000003", "step_00000006"]
    assert (run / "export" / "config.json").is_file() and (run / "export" / "model.safetensors").is_file()
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["train"]["steps"] == 6 and config["model"]["depth"] == 2 and config["mpp"]["target"] == "mean_colour"

    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["step"] == 6 and metrics["num_processes"] == 1 and metrics["images_seen"] == 48
    assert 0 < metrics["loss"] < 10 and 0 <= metrics["mpp_accuracy"] <= 1 and metrics["images_per_second"] > 0
    assert 0 <= metrics["data_wait_share"] < 1


def test_tensorboard_has_the_promised_scalars(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run)).Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/mpp_accuracy", "train/lr", "train/grad_norm", "train/images_per_second",
            "train/data_wait_share"} <= tags
    assert [event.step for event in events.Scalars("train/loss")] == [16, 32, 48]  # x-axis: images seen


def test_exported_encoder_is_the_trained_one_in_timm(run):
    trained = load_file(run / "checkpoints" / "step_00000006" / "model.safetensors")
    encoder = create_encoder(ModelConfig(name="vit_tiny_patch16_224", img_size=16, patch_size=4, embed_dim=32,
                                         depth=2, num_heads=2))
    encoder.load_state_dict({k.removeprefix("encoder."): v for k, v in trained.items() if k.startswith("encoder.")})
    exported = timm.create_model(f"local-dir:{run / 'export'}", pretrained=True)
    images = torch.rand(3, 3, 16, 16)
    with torch.no_grad():
        # What MPP trains: the mean of the patch tokens after the final norm, as the package's evaluations read it.
        tokens = encoder.eval().forward_features(images)
        assert torch.allclose(exported.eval()(images), tokens[:, encoder.num_prefix_tokens:].mean(1), atol=1e-6)
        assert torch.equal(exported.forward_features(images), encoder.forward_features(images))
    assert list(exported.pretrained_cfg["mean"]) == [0.5, 0.5, 0.5]


def test_the_export_carries_a_model_card_of_this_run(run):
    card = (run / "export" / "README.md").read_text()
    front_matter = yaml.safe_load(card.split("---")[1])
    assert front_matter["library_name"] == "timm" and "image-feature-extraction" in front_matter["tags"]
    metrics = json.loads((run / "metrics.json").read_text())
    assert "16x16 px images in 4x4 patches, width 32,\n2 blocks, 2 heads" in card
    assert "target `mean_colour`" in card and "- Data: `data.source=shapes`" in card
    assert "6 steps of 8 images, adamw" in card
    assert f"| `mpp_accuracy` | {metrics['mpp_accuracy']:.6g} |" in card
    assert "MIT licence" in card and "An Image is Worth 16x16 Words" in card
    assert "Without a head, timm gives the mean of the patch tokens after the final norm" in card.replace("\n", " ")
    assert json.loads((run / "export" / "config.json").read_text())["model_args"]["global_pool"] == "avg"


def test_resuming_from_a_checkpoint_gives_the_uninterrupted_result(run, tmp_path):
    interrupted = tmp_path / "interrupted"
    shutil.copytree(run, interrupted)  # as if the run had been stopped right after its step-3 checkpoint
    for later in ("checkpoints/step_00000006", "export"):
        shutil.rmtree(interrupted / later)
    (interrupted / "metrics.json").unlink()

    result = run_here(f"output_dir={interrupted}", *TINY, "--resume")
    assert "resumed from" in result.stderr and "at step 3" in result.stderr
    assert json.loads((interrupted / "metrics.json").read_text())["step"] == 6
    straight = load_file(run / "checkpoints" / "step_00000006" / "model.safetensors")
    resumed = load_file(interrupted / "checkpoints" / "step_00000006" / "model.safetensors")
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[key], resumed[key]) for key in straight)  # data, corruption, lr, Adam: all resumed


def test_a_damaged_newest_checkpoint_is_passed_over_for_the_newest_intact_one(run, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(run, damaged)  # as if the run had died while its step-6 checkpoint's weights were being copied
    with open(damaged / "checkpoints" / "step_00000006" / "model.safetensors", "r+b") as weights:
        weights.truncate(1000)
    for later in ("export", "metrics.json"):
        shutil.rmtree(damaged / later) if (damaged / later).is_dir() else (damaged / later).unlink()

    result = run_here(f"output_dir={damaged}", *TINY, "--resume")
    assert "step_00000006 is damaged (model.safetensors holds 1000 bytes" in result.stderr
    assert "resumed from" in result.stderr and "at step 3" in result.stderr  # steps 4-6 lost, not the run
    straight = load_file(run / "checkpoints" / "step_00000006" / "model.safetensors")
    resumed = load_file(damaged / "checkpoints" / "step_00000006" / "model.safetensors")
    assert all(torch.equal(straight[key], resumed[key]) for key in straight)


def test_a_compiled_run_checkpoints_the_eager_model_and_resumes_exactly(run, tmp_path):
    compiled = tmp_path / "compiled"
    result = run_here(f"output_dir={compiled}", *TINY, "train.compile=true")
    assert "compiled with torch.compile (inductor)" in result.stderr
    straight = load_file(compiled / "checkpoints" / "step_00000006" / "model.safetensors")
    assert straight.keys() == load_file(run / "checkpoints" / "step_00000006" / "model.safetensors").keys()
    for later in ("checkpoints/step_00000006", "export", "metrics.json"):
        shutil.rmtree(compiled / later) if (compiled / later).is_dir() else (compiled / later).unlink()
    run_here(f"output_dir={compiled}", *TINY, "train.compile=true", "--resume")
    resumed = load_file(compiled / "checkpoints" / "step_00000006" / "model.safetensors")
    assert all(torch.equal(straight[key], resumed[key]) for key in straight)


def test_an_earlier_run_is_never_overwritten_silently(run):
    before = {path: path.stat().st_mtime_ns for path in run.rglob("*")}
    result = launch(f"output_dir={run}", *TINY, check=False)
    assert result.returncode != 0
    assert "already holds a run" in result.stderr and "resume=auto" in result.stderr
    assert {path: path.stat().st_mtime_ns for path in run.rglob("*")} == before


def test_accelerate_launch_dash_m_mpp_runs_the_command_from_any_directory(tmp_path):
    command, env = accelerate_command(RECIPE, (), 1)
    command = [*command[:-1], "-m", "mpp", "pretrain", "--config", "mpp_tiny_cpu", *TINY, "output_dir=run",
               "monitor.few_shot_every=0", "monitor.mosaic_every=0", "monitor.final_few_shot_draws=0"]
    ended = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert ended.returncode == 0, ended.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["step"] == 6


def test_an_unknown_key_is_refused_with_the_valid_keys(tmp_path):
    result = subprocess.run([sys.executable, str(RECIPE), f"output_dir={tmp_path / 'run'}", "mpp.corruption=0.5"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "unknown config key 'mpp.corruption'" in result.stderr and "mpp.corruption_rate" in result.stderr
    assert "valid keys:" in result.stderr and not (tmp_path / "run").exists()


def test_a_preset_that_is_not_valid_yaml_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: {steps: 3\nmodel:\n  depth: [1, 2\n")
    result = subprocess.run([sys.executable, str(RECIPE), "--config", str(bad), f"output_dir={tmp_path / 'run'}"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: config file {bad}, line 2, column 6: not valid")
    assert not (tmp_path / "run").exists()


def test_an_output_dir_that_is_a_file_is_refused_in_one_line(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    result = launch(f"output_dir={notes}", *TINY, check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: output_dir={notes}: {notes} is a file, not a directory; choose another output_dir")
    assert notes.read_text() == "mine"


def test_a_small_folder_shrinks_the_default_monitors_with_one_warning_and_trains(tmp_path):
    """The default preset's few-shot reports ask 70 images per class; a folder of 20 per class still trains."""
    for name in ("cats", "dogs"):
        (tmp_path / "images" / name).mkdir(parents=True)
        for index in range(20):
            colour = (40 + 9 * index, 200 if name == "dogs" else 20, 90)
            Image.new("RGB", (20, 20), colour).save(tmp_path / "images" / name / f"{index}.png")
    result = run_here(f"output_dir={tmp_path / 'run'}", f"data.source=folder:{tmp_path / 'images'}", *TINY,
                      "monitor.few_shot_every=3", "monitor.final_few_shot_draws=2")
    warnings = [line for line in result.stderr.splitlines() if "WARNING" in line and "monitor.few_shot_*" in line]
    assert len(warnings) == 1, result.stderr[-3000:]
    assert warnings[0].endswith("the smallest class of the training split, class 0 (cats), has 20 images, fewer "
                                "than the 70 per class its slices ask (10 shots, 10 to choose the penalty on, 50 to "
                                "score on); they use 10, 1 and 9")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert 0 <= metrics["few_shot_accuracy"] <= 1 and len(metrics["few_shot_comparison"]["trained"]) == 2


def test_the_same_command_with_resume_after_the_run_finished_says_so_and_exits_0(run):
    written = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}
    result = launch(f"output_dir={run}", *TINY, "--resume")  # run twice, or requeued by a scheduler after its end
    assert result.returncode == 0 and f"the run in {run} has finished (step 6 of train.steps=6)" in result.stderr
    assert f"its encoder is exported to {run / 'export'}" in result.stderr and "Traceback" not in result.stderr
    assert {path: path.read_bytes() for path in run.rglob("*") if path.is_file()} == written
