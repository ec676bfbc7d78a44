"""recipes/supervised.py and recipes/finetune.py end to end on the CPU, in the test's process (run_here), or through
``accelerate launch`` where the one-line error a user sees is under test: every starting point (an MPP run, a
supervised run, none) goes through the same fine-tuning code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.launching import ROOT, TINY, launch, run_here, write_two_noise_classes

pytestmark = pytest.mark.slow  # every test here launches a recipe or trains (pytest -m "not slow" leaves them out)

SUPERVISED = ROOT / "recipes" / "supervised.py"
FINETUNE = ROOT / "recipes" / "finetune.py"


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> list[str]:
    """A two-class image folder (dark and bright 16x16 noise), 16 training and 6 test images per class, as the
    data overrides of a classifier run."""
    root = tmp_path_factory.mktemp("folders")
    write_two_noise_classes(root, {"train": 16, "test": 6})
    return [f"data.source=folder:{root / 'train'}", f"data.eval_folder={root / 'test'}", "data.shots_per_class=0"]


@pytest.fixture(scope="module")
def mpp_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("mpp") / "run"
    run_here(f"output_dir={run_dir}", *TINY)
    return run_dir


@pytest.fixture(scope="module")
def supervised_run(tmp_path_factory, folders) -> Path:
    run_dir = tmp_path_factory.mktemp("supervised") / "run"
    run_here(f"output_dir={run_dir}", *TINY, *folders, "monitor.few_shot_every=3", "monitor.few_shot_shots=2",
             "monitor.few_shot_holdout_per_class=2", "monitor.few_shot_test_per_class=5", "classifier.head=mlp",
             script=SUPERVISED)  # the paper's pre-training head (the preset's is linear)
    return run_dir


def test_supervised_pre_training_writes_the_run_directory_mpp_does(supervised_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    metrics = json.loads((supervised_run / "metrics.json").read_text())
    assert metrics["step"] == 6 and 0 <= metrics["test_accuracy"] <= 1 and 0 < metrics["loss"] < 10
    assert (supervised_run / "export" / "model.safetensors").is_file()
    card = (supervised_run / "export" / "README.md").read_text()  # the model card: how it was trained, its figures
    assert "supervised classification: a mlp head on the [class] token" in card
    assert f"| `test_accuracy` | {metrics['test_accuracy']:.6g} |" in card
    assert [p.name for p in sorted((supervised_run / "checkpoints").iterdir())] == ["step_00000003", "step_00000006"]
    tags = set(EventAccumulator(str(supervised_run)).Reload().Tags()["scalars"])
    assert {"train/loss", "train/train_accuracy", "train/lr", "eval/test_accuracy", "few_shot/2shot"} <= tags
    # The pre-training head (tanh hidden layer) is trained, then left out of the export: fine-tuning replaces it.
    trained = load_file(supervised_run / "checkpoints" / "step_00000006" / "model.safetensors")
    assert {"head.0.weight", "head.2.weight"} <= trained.keys()
    assert not any(name.startswith("head") for name in load_file(supervised_run / "export" / "model.safetensors"))


def test_fine_tuning_an_mpp_run_at_a_higher_resolution(mpp_run, folders, tmp_path):
    run_dir = tmp_path / "finetune"
    result = run_here(f"output_dir={run_dir}", f"init={mpp_run}", *TINY, *folders, "model.img_size=24",
                      script=FINETUNE)
    assert "36 patches of 4 px at 24 px" in result.stderr  # 6x6 patches where pre-training had 4x4
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["step"] == 6 and 0 <= metrics["test_accuracy"] <= 1 and metrics["init"] == str(mpp_run)
    trained = load_file(run_dir / "checkpoints" / "step_00000006" / "model.safetensors")
    assert trained["encoder.pos_embed"].shape == (1, 1 + 36, 32) and trained["head.weight"].shape == (2, 32)


def test_fine_tuning_learns_classes_that_the_brightness_separates(mpp_run, folders, tmp_path):
    """A recipe that mis-paired images and labels, or never stepped, would stay near chance (50%) here."""
    run_dir = tmp_path / "learns"
    run_here(f"output_dir={run_dir}", f"init={mpp_run}", *TINY, *folders, "train.steps=40", "train.lr=0.1",
             "train.warmup_steps=4", "train.checkpoint_every=40", script=FINETUNE)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["test_accuracy"] >= 0.9 and metrics["train_accuracy"] >= 0.9, metrics


def test_the_fine_tuning_model_starts_from_every_encoder_tensor_of_the_mpp_run(mpp_run):
    from mpp.config.runs import FinetuneRunConfig
    from mpp.models.classifier import ImageClassifier
    from mpp.models.pretrained import fine_tuning_encoder, fine_tuning_model_config, read_pretrained

    pretrained = read_pretrained(str(mpp_run))
    cfg = FinetuneRunConfig()
    model = ImageClassifier(fine_tuning_encoder(fine_tuning_model_config(cfg.model, pretrained), pretrained), 5,
                            cfg.classifier, (0.5,) * 3, (0.5,) * 3)
    trained = load_file(mpp_run / "checkpoints" / "step_00000006" / "model.safetensors")  # the MPP model's own
    encoder_tensors = {name.removeprefix("encoder."): value for name, value in trained.items()
                       if name.startswith("encoder.")}
    assert encoder_tensors.keys() == model.encoder.state_dict().keys()
    assert all(torch.equal(value, encoder_tensors[name]) for name, value in model.encoder.state_dict().items())


def test_a_sweep_picks_the_best_held_out_learning_rate_then_trains_on_everything(supervised_run, folders, tmp_path):
    run_dir = tmp_path / "sweep"
    swept = run_here(f"output_dir={run_dir}", f"init={supervised_run / 'export'}", *TINY, *folders,
                     "finetune.sweep_lrs=[0.001,0.1]", "finetune.sweep_holdout_fraction=0.25",
                     "finetune.ema_decay=0.5", script=FINETUNE)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    sweep = metrics["sweep_holdout_accuracy"]
    assert set(sweep) == {"0.001", "0.1"} and metrics["chosen_lr"] == float(max(sweep, key=sweep.get))
    # Of two rates, the one chosen is an end of the grid: the log says the best may lie beyond it.
    edge, side = ("lowest", "below") if metrics["chosen_lr"] == 0.001 else ("highest", "above")
    assert (f"sweep: lr {metrics['chosen_lr']:g} is the {edge} rate of finetune.sweep_lrs, so the best rate may lie "
            f"beyond it; add a rate {side} it and run again") in swept.stderr
    assert {"test_accuracy", "test_accuracy_averaged"} <= metrics.keys()
    for lr in sweep:
        point = json.loads((run_dir / "sweep" / f"lr_{lr}" / "metrics.json").read_text())
        assert point["holdout_accuracy_averaged"] == sweep[lr] and point["lr"] == float(lr)
    assert metrics["lr"] == metrics["chosen_lr"]
    # Scored by balanced accuracy (unbalanced classes), each point's own figure is what is compared.
    balanced = tmp_path / "balanced"
    run_here(f"output_dir={balanced}", f"init={supervised_run / 'export'}", *TINY, *folders,
             "finetune.sweep_lrs=[0.001,0.1]", "finetune.sweep_holdout_fraction=0.25",
             "finetune.sweep_score=balanced_accuracy",
             script=FINETUNE)
    by_balanced = json.loads((balanced / "metrics.json").read_text())["sweep_holdout_balanced_accuracy"]
    assert by_balanced == {lr: json.loads((balanced / "sweep" / f"lr_{lr}" / "metrics.json").read_text())[
        "holdout_balanced_accuracy"] for lr in ("0.001", "0.1")}
    # Another seed at the rate this one chose (a reproduction's tune_once), without a sweep of its own.
    reused = tmp_path / "reused"
    without_sweep = run_here(f"output_dir={reused}", f"init={supervised_run / 'export'}", *TINY, *folders, "seed=1",
                             f"finetune.lr_from={run_dir}", script=FINETUNE)
    assert json.loads((reused / "metrics.json").read_text())["lr"] == metrics["chosen_lr"]
    assert "rate of finetune.sweep_lrs" not in without_sweep.stderr  # no sweep, no grid to be at the end of
    assert not (reused / "sweep").exists()
    # A run that chose nothing (no sweep) has no rate to give: refused before anything is written.
    result = launch(f"output_dir={tmp_path / 'refused'}", *TINY, *folders, f"finetune.lr_from={reused}",
                    script=FINETUNE, check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"finetune.lr_from={reused}: no fine-tuning run there has finished a learning-rate sweep" in result.stderr
    assert not (tmp_path / "refused").exists()


REGULARISED = ("augment.auto_augment=randaugment", "augment.random_erasing=0.25", "augment.mixup_alpha=0.8",
               "augment.cutmix_alpha=1.0", "classifier.label_smoothing=0.1", "model.drop_path_rate=0.1")


@pytest.mark.parametrize("recipe", [(), REGULARISED], ids=["paper", "regularised"])
def test_a_resumed_fine_tuning_run_ends_with_the_uninterrupted_weights_and_average(folders, tmp_path, recipe):
    straight = tmp_path / "straight"
    args = [*TINY, *folders, "finetune.ema_decay=0.5", *recipe]
    run_here(f"output_dir={straight}", *args, script=FINETUNE)  # from scratch: the baseline
    interrupted = tmp_path / "interrupted"
    shutil.copytree(straight, interrupted)  # as if stopped right after the step-3 checkpoint
    shutil.rmtree(interrupted / "checkpoints" / "step_00000006")
    (interrupted / "metrics.json").unlink()
    result = run_here(f"output_dir={interrupted}", *args, "--resume", script=FINETUNE)
    assert "at step 3" in result.stderr
    for name in ("model.safetensors", "averaged_model.safetensors"):
        expected = load_file(straight / "checkpoints" / "step_00000006" / name)
        resumed = load_file(interrupted / "checkpoints" / "step_00000006" / name)
        assert expected.keys() == resumed.keys()
        assert all(torch.equal(expected[key], resumed[key]) for key in expected), name
    assert json.loads((interrupted / "metrics.json").read_text())["test_accuracy"] == json.loads(
        (straight / "metrics.json").read_text())["test_accuracy"]


def test_supervised_pre_training_trains_with_the_regularisers_and_says_what_it_adds(folders, tmp_path):
    plain = tmp_path / "plain"
    run_here(f"output_dir={plain}", *TINY, *folders, script=SUPERVISED)
    regularised = tmp_path / "regularised"
    said = run_here(f"output_dir={regularised}", *TINY, *folders, *REGULARISED, script=SUPERVISED).stderr
    assert "then RandAugment (2 operations at magnitude 9 of 10), random erasing 0.25" in said
    assert "each pass mixed: mixup alpha 0.8 or cutmix alpha 1 on 100% of the passes, cutmix on 50% of those" in said
    trained = [load_file(run / "checkpoints" / "step_00000006" / "model.safetensors") for run in (plain, regularised)]
    # the same seed, other images: other weights
    assert not torch.equal(trained[0]["encoder.pos_embed"], trained[1]["encoder.pos_embed"])


def test_weights_that_do_not_fit_stop_the_run_before_it_writes_anything(mpp_run, folders, tmp_path):
    checkpoint_file = mpp_run / "checkpoints" / "step_00000006" / "model.safetensors"
    result = run_here(f"output_dir={tmp_path / 'run'}", f"init={checkpoint_file}", *TINY, *folders,
                      "model.patch_size=8", script=FINETUNE, check=False)
    assert result.returncode != 0
    assert "do not fit the model" in result.stderr
    assert "patch_embed.proj.weight: (32, 3, 4, 4) in init, (32, 3, 8, 8) in the model" in result.stderr
    assert not (tmp_path / "run").exists()


def test_an_init_file_that_holds_no_weights_is_refused_in_one_line(folders, tmp_path):
    not_weights = tmp_path / "encoder.safetensors"
    not_weights.write_text("these are not weights")
    result = launch(f"output_dir={tmp_path / 'run'}", f"init={not_weights}", *TINY, *folders, script=FINETUNE,
                    check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: init={not_weights}: cannot read {not_weights} as weights") and "header" in last
    assert not (tmp_path / "run").exists()


def test_sealed_predictions_score_as_the_same_run_scored_and_a_held_out_slice_is_scored_in_place_of_the_test(
        mpp_run, folders, tmp_path):
    from mpp.metrics import scores_of

    same = (f"init={mpp_run}", *TINY, *folders, "train.steps=12", "train.lr=0.1", "finetune.ema_decay=0.5")
    run_here(f"output_dir={tmp_path / 'scored'}", *same, script=FINETUNE)
    sealed = run_here(f"output_dir={tmp_path / 'sealed'}", *same, "finetune.sealed=true", script=FINETUNE)
    scored = json.loads((tmp_path / "scored" / "metrics.json").read_text())
    metrics = json.loads((tmp_path / "sealed" / "metrics.json").read_text())
    assert metrics["test_predictions"] == "predictions.json" and not any(
        key.startswith("test_") and key != "test_predictions" for key in metrics)
    assert "test_accuracy" not in sealed.stderr and "predicted and sealed" in sealed.stderr  # not even logged
    predictions = json.loads((tmp_path / "sealed" / "predictions.json").read_text())
    assert len(predictions["labels"]) == len(predictions["final"]) == len(predictions["averaged"]) == 12
    for weights, suffix in (("final", ""), ("averaged", "_averaged")):
        found = scores_of(torch.tensor(predictions[weights]), torch.tensor(predictions["labels"]), 2)
        assert found["accuracy"] == scored[f"test_accuracy{suffix}"]
        assert found["balanced_accuracy"] == scored[f"test_balanced_accuracy{suffix}"]
    # Scored on a quarter of the training images held out (8 of 32), never the test folder.
    held_out = run_here(f"output_dir={tmp_path / 'holdout'}", *same, "data.holdout_fraction=0.25",
                        "finetune.scored_split=holdout", script=FINETUNE)
    metrics = json.loads((tmp_path / "holdout" / "metrics.json").read_text())
    assert "holdout_balanced_accuracy" in metrics and "test_accuracy" not in metrics
    assert "on 8 holdout images" in held_out.stderr
