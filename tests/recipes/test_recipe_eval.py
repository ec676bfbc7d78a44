"""The evaluation entry points (eval/) and the pre-training monitors end to end on the CPU, each command line run in
the test's process (run_here; through ``accelerate launch`` where two processes share the work): each protocol on a
random encoder and on an MPP run, the feature cache, the pictures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from mpp.config.data import DataConfig
from mpp.data.loading import build_dataset
from mpp.images import unit_interval
from tests.launching import ROOT, TINY, launch, run_here

pytestmark = pytest.mark.slow  # every test here launches a recipe or trains (pytest -m "not slow" leaves them out)

EVAL = ROOT / "eval"
ENCODER = TINY[:5]  # the model settings of TINY: 16 px, 4 px patches, width 32, 2 blocks
DATA = ["data.shots_per_class=40", "eval.batch_size=512"]  # 400 shapes training images (10 classes); all 10,000 test
MONITORED = ["monitor.few_shot_every=3", "monitor.few_shot_shots=2", "monitor.few_shot_test_per_class=5",
             "monitor.mosaic_every=3", "monitor.mosaic_images=4", "monitor.final_few_shot_draws=2"]


def tags(run_dir: Path) -> dict[str, list[str]]:
    return EventAccumulator(str(run_dir), size_guidance={"images": 0}).Reload().Tags()


@pytest.fixture(scope="module")
def mpp_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("mpp") / "run"
    run_here(f"output_dir={run_dir}", *TINY, *MONITORED)
    return run_dir


def test_mpp_pre_training_logs_few_shot_accuracy_and_mosaics_as_it_goes(mpp_run):
    found = tags(mpp_run)
    assert "few_shot/2shot" in found["scalars"] and "mpp/mosaic" in found["images"]
    steps = [event.step for event in EventAccumulator(str(mpp_run)).Reload().Scalars("few_shot/2shot")]
    assert steps == [0, 24, 48]  # before the first step and every 3 steps of 8 images
    assert sorted(path.name for path in (mpp_run / "pictures").iterdir()) == [
        "mpp_step_00000000.png", "mpp_step_00000003.png", "mpp_step_00000006.png"]


def final_few_shot(run_dir: Path) -> tuple[list[float], list[float]]:
    """The closing comparison's per-draw accuracies in metrics.json: (trained, at initialisation)."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    comparison = metrics["few_shot_comparison"]
    assert metrics["few_shot_accuracy"] == pytest.approx(sum(comparison["trained"]) / 2)
    assert metrics["few_shot_accuracy_at_init"] == pytest.approx(sum(comparison["at_init"]) / 2)
    gains = [a - b for a, b in zip(comparison["trained"], comparison["at_init"], strict=True)]
    low, high = comparison["gain_interval"]
    half = 12.7062 * abs(gains[0] - gains[1]) / 2  # t(0.975, 1) sd / sqrt(2), where sd = |a - b| / sqrt(2)
    assert comparison["gain_mean"] == pytest.approx(sum(gains) / 2) and high - low == pytest.approx(2 * half, rel=1e-4)
    assert comparison["gain_shown"] == (low > 0)
    return comparison["trained"], comparison["at_init"]


def test_mpp_ends_by_scoring_the_trained_encoder_against_itself_at_initialisation(tmp_path, mpp_run):
    trained, at_init = final_few_shot(mpp_run)
    assert len(trained) == len(at_init) == 2 and trained != at_init
    assert {"few_shot/final_trained", "few_shot/final_at_init"} <= set(tags(mpp_run)["scalars"])
    # With a learning rate too small to move a weight (1e-30 against weights of ~1e-2, whose float32 spacing is ~1e-9)
    # the trained encoder is the initial one: the two must agree, draw for draw.
    run_here(f"output_dir={tmp_path / 'still'}", *TINY, *MONITORED, "train.lr=1e-30")
    still_trained, still_at_init = final_few_shot(tmp_path / "still")
    assert still_trained == still_at_init == at_init
    # A resumed run compares with the same initial encoder, not with the checkpoint it resumed from.
    resumed = tmp_path / "resumed"
    shutil.copytree(mpp_run, resumed)
    for later in ("checkpoints/step_00000006", "export"):
        shutil.rmtree(resumed / later)
    (resumed / "metrics.json").unlink()
    run_here(f"output_dir={resumed}", *TINY, *MONITORED, "--resume")
    assert final_few_shot(resumed) == (trained, at_init)


def test_a_monitored_run_trains_exactly_as_an_unmonitored_one(tmp_path, mpp_run):
    run_here(f"output_dir={tmp_path / 'plain'}", *TINY)
    monitored, plain = (load_file(run / "checkpoints" / "step_00000006" / "model.safetensors")
                        for run in (mpp_run, tmp_path / "plain"))
    assert monitored.keys() == plain.keys() and all(monitored[name].equal(plain[name]) for name in plain)


def test_supervised_monitor_asking_more_images_than_a_class_has_shrinks_with_one_warning(tmp_path):
    result = run_here(f"output_dir={tmp_path / 'run'}", *TINY, "data.shots_per_class=30", "monitor.few_shot_every=3",
                    script=ROOT / "recipes" / "supervised.py")
    warnings = [line for line in result.stderr.splitlines() if "WARNING" in line and "monitor.few_shot_*" in line]
    assert len(warnings) == 1 and warnings[0].endswith("has 30 images, fewer than the 70 per class its slices ask "
                                                       "(10 shots, 10 to choose the penalty on, 50 to score on); "
                                                       "they use 10, 3 and 17")
    assert "few_shot/10shot" in tags(tmp_path / "run")["scalars"]


@pytest.mark.parametrize("init", ["random", "mpp"])
def test_each_protocol_reports_its_accuracy_and_shares_the_cached_features(tmp_path, mpp_run, init):
    common = [*ENCODER, *DATA, f"eval.feature_cache={tmp_path / 'cache'}"]
    common += [f"init={mpp_run}"] if init == "mpp" else []
    few_shot = run_here(f"output_dir={tmp_path / 'few_shot'}", "few_shot.shots=[1,5]", "few_shot.seeds=2", *common,
                      script=EVAL / "few_shot.py")
    metrics = json.loads((tmp_path / "few_shot" / "metrics.json").read_text())
    assert set(metrics["few_shot"]) == {"1", "5"} and len(metrics["few_shot"]["5"]["per_seed"]) == 2
    assert metrics["init"] == (str(mpp_run) if init == "mpp" else None) and metrics["test_images"] == 10_000
    assert {"few_shot/1shot", "few_shot/5shot"} <= set(tags(tmp_path / "few_shot")["scalars"])
    assert "test: 10000 features of dimension 32 extracted" in few_shot.stderr

    probe = run_here(f"output_dir={tmp_path / 'probe'}", "linear_probe.max_iterations=20", *common,
                   script=EVAL / "linear_probe.py")
    metrics = json.loads((tmp_path / "probe" / "metrics.json").read_text())
    assert 0 <= metrics["linear_probe"]["test_accuracy"] <= 1 and metrics["train_images"] == 400
    assert "linear_probe/test_accuracy" in tags(tmp_path / "probe")["scalars"]
    assert "test: 10000 features read from" in probe.stderr  # extracted once, by the few-shot run

    knn = run_here(f"output_dir={tmp_path / 'knn'}", "knn.k=5", *common, script=EVAL / "knn.py")
    metrics = json.loads((tmp_path / "knn" / "metrics.json").read_text())
    assert 0 <= metrics["knn"]["test_accuracy"] <= 1 and metrics["knn"]["k"] == 5
    assert "train: 400 features read from" in knn.stderr and "test: 10000 features read from" in knn.stderr


def test_two_processes_extract_the_features_one_does(tmp_path, mpp_run):
    common = [*ENCODER, *DATA, f"init={mpp_run}", "knn.k=5"]
    run_here(f"output_dir={tmp_path / 'one'}", *common, script=EVAL / "knn.py")
    launch(f"output_dir={tmp_path / 'two'}", *common, script=EVAL / "knn.py", processes=2)
    for name in ("train", "test"):
        one, two = (load_file(next((tmp_path / run / "features").glob(f"{name}-*.safetensors")))
                    for run in ("one", "two"))
        assert one["labels"].tolist() == two["labels"].tolist()  # same images, same order, none repeated
        assert (one["features"] - two["features"]).abs().max() < 1e-4
    accuracies = [json.loads((tmp_path / run / "metrics.json").read_text())["knn"]["test_accuracy"]
                  for run in ("one", "two")]
    assert accuracies[0] == accuracies[1]


def test_the_inspection_command_writes_every_picture_it_promises(tmp_path, mpp_run):
    run_dir = tmp_path / "inspect"
    run_here(f"output_dir={run_dir}", f"init={mpp_run}", *ENCODER, "inspect.attention_images=6",
             "inspect.rollout_images=3", script=EVAL / "inspect_encoder.py")
    pictures = ["patch_embedding_filters", "position_embedding_similarity", "mean_attention_distance",
                "attention_rollout"]
    assert sorted(path.name for path in (run_dir / "pictures").iterdir()) == sorted(f"{p}.png" for p in pictures)
    assert set(tags(run_dir)["images"]) == {f"inspect/{p}" for p in pictures}
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert len(metrics["mean_attention_distance"]) == 2 and len(metrics["mean_attention_distance"][0]) == 2


def test_an_init_that_does_not_fit_is_refused_before_anything_is_written(tmp_path, mpp_run):
    result = run_here(f"output_dir={tmp_path / 'run'}", f"init={mpp_run}", *ENCODER[:1], "model.patch_size=8",
                    script=EVAL / "few_shot.py", check=False)
    assert result.returncode != 0 and "you set model.patch_size=8 (the encoder has 4)" in result.stderr
    assert not (tmp_path / "run").exists()


def test_an_init_run_sets_the_architecture_over_the_presets(tmp_path, mpp_run):
    # eval_tiny_cpu.yaml's encoder is 4 blocks of width 64; the run's, 2 of 32: the run's is the one evaluated
    run_here(f"output_dir={tmp_path / 'run'}", f"init={mpp_run}", *DATA, "knn.k=5", script=EVAL / "knn.py")
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["init"] == str(mpp_run)


def test_the_raw_pixel_baseline_reads_the_normalised_images_and_refuses_an_encoder(tmp_path, mpp_run):
    run_dir = tmp_path / "pixels"
    knn = run_here(f"output_dir={run_dir}", *ENCODER, *DATA, "eval.features=pixels", "knn.k=5", script=EVAL / "knn.py")
    assert "test: 10000 features of dimension 768 extracted" in knn.stderr  # 3 x 16 x 16, no encoder
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["features"] == "pixels" and 0 <= metrics["knn"]["test_accuracy"] <= 1
    stored = load_file(next((run_dir / "features").glob("train-*.safetensors")))
    train_set = build_dataset(DataConfig(shots_per_class=40), "train", 16, 3, augment=False, seed=0)
    image, label, _ = train_set[0]
    expected = ((unit_interval(image) - 0.5) / 0.5).flatten()  # data.mean = data.std = 0.5 by default
    assert stored["features"].shape == (400, 768) and stored["labels"][0] == label
    assert torch.allclose(stored["features"][0], expected, atol=1e-6)

    refused = run_here(f"output_dir={tmp_path / 'refused'}", *ENCODER, "eval.features=pixels", f"init={mpp_run}",
                     script=EVAL / "knn.py", check=False)
    assert refused.returncode != 0 and "eval.features=pixels reads the images themselves" in refused.stderr
    assert not (tmp_path / "refused").exists()
