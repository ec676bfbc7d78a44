"""A reproduction's plan cost (study.cost): the images each stage trains on, counted by hand on a tiny plan,
and the time a measured step gives them; and the GPU presets as the pre-registration plans them: the scratch row
trained as long as MPP, the learning-rate grid and its validation slice, the seeds from the power analysis."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from mpp.config.building import build_config
from mpp.data.loading import steps_per_epoch
from mpp.errors import ConfigError
from mpp.evaluation.statistics import paired_t_power, seeds_for_power
from study.cost import (
    H100_PER_H200,
    H200_MEASURED_STEPS,
    NO_MEASURED_STEP,
    cost_record,
    cost_table,
    finetuning_config,
    main,
    plan_cost,
    pretraining_config,
)
from study.primary_family import (
    CLAIMS,
    FAMILY_LEVEL,
    PRETRAINING_EPOCHS,
    PROTOCOLS,
    family_size,
    paired_sd,
    power_plan,
    seeds_per_protocol,
)
from study.reproduction_config import ReproductionConfig
from tests.launching import ROOT
from tests.study.test_reproduction import TINY_PRESETS

CONFIGS = ROOT / "recipes" / "configs"
STUDY_CONFIGS = ROOT / "study" / "configs"  # the reproductions' presets
TINY_PLAN = {  # three seeds of three rows: every stage's steps and batch its own, so each count is told apart
    **{key: str(CONFIGS / name) for key, name in TINY_PRESETS.items()},
    "seeds": [0, 1, 2],
    "pretraining": ["train.steps=10", "train.global_batch_size=16"],
    "mpp": ["train.steps=20"],  # after ``pretraining``: MPP's own length
    "finetune": ["finetune.sweep_lrs=[0.01,0.1]", "train.steps=5", "train.global_batch_size=8"],
    "scratch_finetune": ["train.steps=30"],
    "rows": [{"name": "scratch", "label": "from scratch"},
             {"name": "mpp-colour-50", "label": "MPP", "pretraining": "mpp"},
             {"name": "supervised", "label": "supervised", "pretraining": "supervised"}],
    "claims": [{"claim": "MPP beats scratch", "better": "mpp-colour-50", "worse": "scratch"}],
}


def tiny_plan(tmp_path, **changes) -> ReproductionConfig:
    preset = tmp_path / "reproduce.yaml"
    preset.write_text(yaml.safe_dump(TINY_PLAN | changes))
    return build_config(ReproductionConfig, preset)


def test_each_stage_counts_the_images_of_its_trainings_sweeps_included(tmp_path):
    costs = {cost.stage: cost for cost in plan_cost(tiny_plan(tmp_path))}
    assert list(costs) == ["pre-training (MPP)", "pre-training (supervised)", "fine-tuning", "from scratch"]
    assert (costs["pre-training (MPP)"].trainings, costs["pre-training (MPP)"].images) == (3, 3 * 20 * 16)
    assert (costs["pre-training (supervised)"].trainings, costs["pre-training (supervised)"].images) == (3, 3 * 10 * 16)
    # Two pre-trained rows, each seed sweeping two rates before the run at the chosen one: 3 trainings a seed.
    assert (costs["fine-tuning"].trainings, costs["fine-tuning"].images) == (2 * 3 * 3, 2 * 3 * 3 * 5 * 8)
    assert (costs["from scratch"].trainings, costs["from scratch"].images) == (3 * 3, 3 * 3 * 30 * 8)
    assert costs["from scratch"].shapes == ("30 x 8",) and costs["fine-tuning"].shapes == ("5 x 8",)


def test_with_tune_once_only_the_first_seed_sweeps(tmp_path):
    costs = {cost.stage: cost for cost in plan_cost(tiny_plan(tmp_path, tune_once=True))}
    assert costs["fine-tuning"].trainings == 2 * (3 + 2)  # per row: a run per seed, and the first seed's two rates
    assert costs["from scratch"].images == (3 + 2) * 30 * 8
    assert costs["pre-training (MPP)"].images == 3 * 20 * 16  # pre-training has no sweep


def test_an_encoder_with_a_measured_step_gets_a_time_on_an_h100_and_any_other_says_so(tmp_path):
    vit_b16 = ["model.embed_dim=768", "model.depth=12", "model.num_heads=12", "model.img_size=224",
               "model.patch_size=16", "model.in_chans=3"]
    measured = tiny_plan(tmp_path, encoder=vit_b16,
                         pretraining=[*TINY_PLAN["pretraining"], "train.mixed_precision=bf16", "train.compile=true"],
                         finetune=[*TINY_PLAN["finetune"], "train.mixed_precision=bf16"])
    compiled, eager = H200_MEASURED_STEPS  # the MPP and supervised pre-training compiled, the fine-tuning eager
    costs = {cost.stage: cost for cost in plan_cost(measured)}
    assert costs["pre-training (MPP)"].h100_seconds == pytest.approx(3 * 20 * 16 / (compiled.mpp * H100_PER_H200))
    assert costs["pre-training (supervised)"].h100_seconds == pytest.approx(
        3 * 10 * 16 / (compiled.supervised * H100_PER_H200))
    assert costs["from scratch"].h100_seconds == pytest.approx(3 * 3 * 30 * 8 / (eager.supervised * H100_PER_H200))
    record = cost_record(measured)
    assert record["h100_seconds"] == pytest.approx(sum(cost.h100_seconds for cost in costs.values()))
    assert record["h100_time"] == f"{record['h100_seconds'] / 3600:.1f} h"
    # The tiny presets' own encoder (width 32 at 16 px) was never timed on a GPU: no time is made up for it.
    unmeasured = cost_record(tiny_plan(tmp_path))
    assert all(stage["h100_seconds"] is None for stage in unmeasured["stages"])
    assert unmeasured["h100_seconds"] is None and unmeasured["h100_time"] == NO_MEASURED_STEP


def test_a_stage_whose_length_is_in_epochs_is_refused_naming_it(tmp_path):
    with pytest.raises(ConfigError, match="row scratch's from scratch gives train.epochs=2.0: .* give its length as "
                                          "train.steps"):
        plan_cost(tiny_plan(tmp_path, scratch_finetune=["train.steps=null", "train.epochs=2"]))


def test_the_command_prints_the_table_and_writes_the_json(tmp_path, capsys):
    tiny_plan(tmp_path)
    main(["--config", str(tmp_path / "reproduce.yaml"), "seeds=[0]", "--json", str(tmp_path / "cost.json")])
    printed = capsys.readouterr().out
    assert "| from scratch | 3 | 30 x 8 | 720 | no measured step |" in printed  # one seed: a sweep of 2 and its run
    images = 20 * 16 + 10 * 16 + 2 * 3 * 5 * 8 + 720
    assert f"| all | {1 + 1 + 2 * 3 + 3} | | {images:,} | no measured step |" in printed
    assert printed.startswith(f"Plan cost of {tmp_path / 'reproduce.yaml'}\n\n1 seed; ")
    record = json.loads((tmp_path / "cost.json").read_text())
    assert record["seeds"] == 1 and record["images"] == images


def test_a_wrong_key_is_one_line(tmp_path):
    tiny_plan(tmp_path)
    with pytest.raises(SystemExit, match="^error: .*nowhere"):
        main(["--config", str(tmp_path / "reproduce.yaml"), "nowhere=1"])


# --- the GPU presets, as the pre-registration plans them (results/preregistration.md) ---------------------------

# Each GPU preset: its data's classes and training images, and the published CPU experiment of its protocol whose
# paired SD of claim 1 plans its seeds (all labels: Fashion-MNIST's on all labels; few: Fashion-MNIST's at 100 per
# class, the protocol the CIFAR-10 preset copies).
GPU_PRESETS = {
    "reproduce_fashion_mnist_all_labels_gpu.yaml": (10, 60_000, "reproduce-fashion-mnist-all-labels-cpu"),
    "reproduce_fashion_mnist_gpu.yaml": (10, 60_000, "reproduce-fashion-mnist-cpu"),
    "reproduce_cifar10_gpu.yaml": (10, 50_000, "reproduce-fashion-mnist-cpu"),
}
CLAIM = CLAIMS[0]  # MPP beats training from scratch


def gpu_preset(name: str, monkeypatch) -> ReproductionConfig:
    monkeypatch.chdir(ROOT)  # a preset names the stage presets from the repository's root
    return build_config(ReproductionConfig, STUDY_CONFIGS / name)


def header(name: str) -> str:
    """A preset's comments, as one line of text."""
    comments = [line.lstrip("#").strip() for line in (STUDY_CONFIGS / name).read_text().splitlines()
                if line.startswith("#")]
    return " ".join(comments)


def test_every_gpu_preset_is_planned_here():
    assert sorted(path.name for path in STUDY_CONFIGS.glob("reproduce_*_gpu.yaml")) == sorted(GPU_PRESETS)


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_a_gpu_presets_scratch_trains_as_many_steps_as_mpps_pretraining_and_finetuning_at_the_same_batch(
        name, monkeypatch):
    cfg = gpu_preset(name, monkeypatch)
    rows = {row.name: row for row in cfg.rows}
    pretraining = pretraining_config(cfg, rows[CLAIM.better]).train
    finetuning = finetuning_config(cfg, rows[CLAIM.better]).train
    scratch = finetuning_config(cfg, rows[CLAIM.worse]).train
    assert scratch.global_batch_size == finetuning.global_batch_size
    mpp_images = (pretraining.steps * pretraining.global_batch_size
                  + finetuning.steps * finetuning.global_batch_size)
    assert scratch.steps * scratch.global_batch_size == mpp_images  # every step counted at scratch's batch
    assert scratch.steps >= pretraining.steps + finetuning.steps
    said = header(name)
    assert (f"the ViT from scratch trains {scratch.steps:,} steps of {scratch.global_batch_size}" in said
            and f"the same {mpp_images:,} images" in said)


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_a_gpu_presets_rates_are_chosen_from_a_wide_grid_on_the_registered_validation_slice(name, monkeypatch):
    cfg = gpu_preset(name, monkeypatch)
    classes, training_images, _ = GPU_PRESETS[name]
    assert not cfg.tune_once  # the registration: each row's rate chosen per seed
    for row in cfg.rows:
        run = finetuning_config(cfg, row)
        grid = sorted(run.finetune.sweep_lrs)
        assert len(grid) >= 4 and {0.01, 0.03, 0.1, 0.3} <= set(grid), row.name
        assert all(2.5 <= high / low <= 3.5 for low, high in zip(grid, grid[1:], strict=False)), grid  # ~3 apart
        labelled = run.data.shots_per_class * classes or training_images
        assert round(labelled * run.finetune.sweep_holdout_fraction) >= max(0.2 * labelled, 200), row.name
        assert run.finetune.sweep_score == "balanced_accuracy", row.name


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_a_gpu_presets_seeds_are_its_protocols_registered_seeds_and_give_claim_one_their_power(name, monkeypatch):
    cfg = gpu_preset(name, monkeypatch)
    experiment = GPU_PRESETS[name][2]
    protocol = next(protocol.name for protocol in PROTOCOLS if protocol.experiment == experiment)
    seeds = seeds_per_protocol(power_plan(ROOT / "results"))[protocol]  # the most any claim of the protocol needs
    assert len(cfg.seeds) == seeds
    published = json.loads((ROOT / "results" / experiment / "results.json").read_text())
    sd, level = paired_sd(published["rows"], CLAIM), FAMILY_LEVEL / family_size()
    assert seeds >= seeds_for_power(CLAIM.effect, sd, level)
    said = header(name)
    power = paired_t_power(CLAIM.effect, sd, seeds, level)
    assert re.search(rf"\b{seeds} seeds: the registered seeds of (its protocol|the protocol it copies)", said)
    assert "0.05/16 = 0.0031" in said and f"({sd:.2f} points" in said and f"power {power:.2f}" in said


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_a_gpu_preset_pre_trains_the_registered_length(name, monkeypatch):
    cfg = gpu_preset(name, monkeypatch)
    _, training_images, _ = GPU_PRESETS[name]
    for row in cfg.rows:
        if row.pretraining:
            train = pretraining_config(cfg, row).train
            assert train.steps == PRETRAINING_EPOCHS * steps_per_epoch(training_images, train.global_batch_size)
    assert (f"{PRETRAINING_EPOCHS} epochs of the {training_images:,} training images ({train.steps:,} steps of "
            f"{train.global_batch_size})") in header(name)


def test_the_performance_page_shows_each_gpu_presets_cost_as_the_command_prints_it(monkeypatch):
    page = (ROOT / "docs" / "performance.md").read_text()
    for name in GPU_PRESETS:
        command = f"python -m study.cost --config study/configs/{name}"
        table = "\n".join(line for line in cost_table(gpu_preset(name, monkeypatch)).splitlines()
                          if line.startswith("|"))
        assert f"```\n{command}\n```\n\n{table}\n" in page, name
