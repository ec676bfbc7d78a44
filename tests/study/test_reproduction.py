"""The reproduction experiment (python -m study.reproduce): the grid of runs it plans, the order it runs them in, how it
continues after a stop, the table it writes, and the whole experiment end to end on tiny runs."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import yaml

from mpp.config.building import build_config
from mpp.errors import ConfigError
from mpp.evaluation.statistics import PairedDifference
from mpp.experiments.runner import Run
from mpp.experiments.checks import run_config
from study.learning_rate_widening import finished_widenings, widened_grid
from study.primary_family import CLAIMS
from study.reproduction import (
    check_validation_split,
    collect_results,
    plan_runs,
    reproduce,
    with_sweep_grids,
)
from study.reproduction_config import PAPER_CLAIMS, PAPER_ROWS, ReproductionConfig
from study.reproduction_plots import finetune_plot_figures, monitor_plot_figures
from study.reproduction_tables import holm_cell, primary_record, results_table, rows_at_chance
from tests.launching import ROOT, run_module_here
from tools.gpu import PLAN_COSTS, dry_run_plan, reproduce_stage, reproduction_overrides, summary

CONFIGS = ROOT / "recipes" / "configs"
STUDY_CONFIGS = ROOT / "study" / "configs"  # the reproductions' presets
TINY_PRESETS = {"mpp_preset": "mpp_tiny_cpu.yaml", "supervised_preset": "supervised_tiny_cpu.yaml",
                "finetune_preset": "finetune_tiny_cpu.yaml", "eval_preset": "eval_tiny_cpu.yaml"}
TINY = {  # every run a few steps of a one-block ViT on 16x16 shapes
    **{key: str(CONFIGS / name) for key, name in TINY_PRESETS.items()},
    "encoder": ["model.img_size=16", "model.embed_dim=16", "model.depth=1", "model.num_heads=2"],
    "pretraining": ["train.steps=4", "train.global_batch_size=8", "train.warmup_steps=1", "train.log_every=2",
                    "train.checkpoint_every=4", "monitor.few_shot_every=2", "monitor.few_shot_shots=2",
                    "monitor.few_shot_test_per_class=4"],
    "mpp": ["mpp.downsampled_size=2"],
    "finetune": ["train.steps=4", "train.global_batch_size=8", "train.warmup_steps=1", "train.log_every=2",
                 "data.shots_per_class=4"],
    "few_shot": ["few_shot.shots=[1,2]", "few_shot.seeds=2", "few_shot.holdout_per_class=2"],
    "linear_probe": ["linear_probe.max_iterations=5"],
    "knn": ["knn.k=3"],
    "parallel_runs": 2,
    "chance_margin": 0.0,  # a few steps do not leave chance
}
# Per seed: few-shot on raw pixels, logistic regression and kNN on the labelled images; once: both on all images
BASELINE_RUNS = {"seed": 3, "once": 2}
ROW_RUNS = 7  # per row and seed: fine-tuning, few-shot through 2 readouts, logistic regression and kNN through 2


def tiny_config(tmp_path: Path, **changes) -> ReproductionConfig:
    preset = tmp_path / "reproduce.yaml"
    preset.write_text(yaml.safe_dump({**TINY, "output_dir": str(tmp_path / "experiment"), **changes}))
    return build_config(ReproductionConfig, preset)


def test_the_plan_runs_every_row_for_every_seed_each_after_its_own_pre_training(tmp_path):
    cfg = tiny_config(tmp_path, seeds=[3, 7])
    runs = plan_runs(cfg)
    stages = [run.stage for run in runs]
    first_pretraining = stages.index("pretrain")  # the raw-pixel baselines start first, then pre-training
    assert all(run.after is None and "eval.features=pixels" in run.command for run in runs[:first_pretraining])
    assert stages[first_pretraining:] == sorted(stages[first_pretraining:], key=lambda stage: stage != "pretrain")
    pretrained = [row for row in PAPER_ROWS if row.pretraining]
    # Per seed: each pre-training; each row's fine-tuning, few-shot through both readouts, logistic regression and
    # kNN through both readouts; the baselines.
    per_seed = len(pretrained) + ROW_RUNS * len(PAPER_ROWS) + BASELINE_RUNS["seed"]
    assert len(runs) == 2 * per_seed + BASELINE_RUNS["once"]
    by_name = {run.name: run for run in runs}
    for seed in (3, 7):
        for row in PAPER_ROWS:
            source = f"pretrain/{row.name}-seed{seed}" if row.pretraining else None
            for stage in ("finetune", "few_shot"):
                run = by_name[f"{stage}/{row.name}-seed{seed}"]
                assert run.after == source
                inits = [arg for arg in run.command if arg.startswith("init=")]
                assert inits == ([f"init={cfg.output_dir}/{source}"] if source else [])
            if row.pretraining:
                assert set(row.overrides) <= set(by_name[source].command)
    for run in runs:  # every command is a valid command line of its recipe
        config = run_config(run)
        assert config.output_dir == f"{cfg.output_dir}/{run.name}" and config.seed in (3, 7)
        if run.stage == "finetune":
            assert config.data.subset_seed == config.seed  # each seed its own labelled subset
        if run.stage in ("linear_probe", "knn"):  # the frozen encoder fitted to fine-tuning's labelled images
            assert config.data.subset_seed == config.seed and config.data.shots_per_class == 4
            assert config.eval.features in ("token", "avg")
            assert config.eval.feature_cache == f"{cfg.output_dir}/features"
        if run.stage == "baseline":  # raw pixels, fitted to fine-tuning's labelled images or to all of them
            assert config.eval.features == "pixels" and config.data.subset_seed == config.seed and run.after is None
            assert config.data.shots_per_class == (0 if "-all-" in run.name else 4) and "-all-seed7" not in run.name
    assert "eval.features=pixels" in by_name["few_shot/pixels-seed7"].command


def test_a_preset_lists_its_own_rows_and_claims_and_the_plan_follows_them(tmp_path):
    rows = [{"name": "none", "label": "random init"},
            {"name": "pixels", "label": "MPP pixels", "pretraining": "mpp", "overrides": ["mpp.target=pixels"]}]
    cfg = tiny_config(tmp_path, seeds=[0], rows=rows, claims=[{"claim": "pixels beat nothing", "better": "pixels",
                                                                "worse": "none"}])
    assert [row.name for row in cfg.rows] == ["none", "pixels"] and cfg.claims[0].better == "pixels"
    runs = {run.name: run for run in plan_runs(cfg)}
    assert {name for name in runs if name.startswith(("pretrain/", "finetune/"))} == {
        "pretrain/pixels-seed0", "finetune/none-seed0", "finetune/pixels-seed0"}
    assert "mpp.target=pixels" in runs["pretrain/pixels-seed0"].command
    # Few-shot through both readouts: eval.features=auto's, and the other one named.
    assert "eval.features=token" in runs["few_shot/pixels-token-seed0"].command
    assert runs["few_shot/pixels-token-seed0"].after == "pretrain/pixels-seed0"
    assert "eval.features=avg" in runs["few_shot/none-avg-seed0"].command
    for script in ("linear_probe", "knn"):  # and logistic regression and kNN through both
        for readout in ("token", "avg"):
            run = runs[f"{script}/pixels-{readout}-seed0"]
            assert f"eval.features={readout}" in run.command and run.after == "pretrain/pixels-seed0"
            assert f"init={cfg.output_dir}/pretrain/pixels-seed0" in run.command
            assert not any(arg.startswith("init=") for arg in runs[f"{script}/none-{readout}-seed0"].command)
    assert not any(arg.startswith(("init=", "eval.features")) for arg in runs["few_shot/none-seed0"].command)
    # tune_once: the first seed's sweep chooses each row's rate; the other seeds train at it, after that run.
    once = tiny_config(tmp_path, seeds=[0, 5], rows=rows, claims=[], tune_once=True,
                       finetune=[*TINY["finetune"], "finetune.sweep_lrs=[0.1,0.3]"])
    runs = {run.name: run for run in plan_runs(once)}
    first, other = runs["finetune/pixels-seed0"], runs["finetune/pixels-seed5"]
    assert first.also_after == () and not any(arg.startswith("finetune.lr_from") for arg in first.command)
    assert other.also_after == ("finetune/pixels-seed0",) and other.after == "pretrain/pixels-seed5"
    assert {"finetune.sweep_lrs=[]", f"finetune.lr_from={once.output_dir}/finetune/pixels-seed0"} <= set(other.command)
    config = run_config(other)
    assert config.finetune.sweep_lrs == () and config.finetune.lr_from.endswith("finetune/pixels-seed0")
    assert runs["finetune/none-seed5"].also_after == ("finetune/none-seed0",)
    longer = tiny_config(tmp_path, seeds=[0], rows=rows, claims=[], scratch_finetune=["train.steps=7"])
    runs = {run.name: run for run in plan_runs(longer)}
    assert "train.steps=7" in runs["finetune/none-seed0"].command  # the from-scratch row trains longer ...
    assert "train.steps=7" not in runs["finetune/pixels-seed0"].command  # ... than the pre-trained ones
    with pytest.raises(ConfigError, match="claims: 'x' compares 'pixels' with 'scratch', and the rows are none, "
                                          "pixels"):
        tiny_config(tmp_path, rows=rows, claims=[{"claim": "x", "better": "pixels", "worse": "scratch"}])
    with pytest.raises(ConfigError, match="one row must have no pre-training"):
        tiny_config(tmp_path, rows=rows[1:], claims=[])
    with pytest.raises(ConfigError, match=r"rows\[1\]: unknown config key 'pretrainig' \(did you mean 'pretraining'"):
        tiny_config(tmp_path, rows=[rows[0], {"name": "b", "pretrainig": "mpp"}])


def test_fine_tuning_on_all_the_labels_fits_each_raw_pixel_baseline_once_per_seed_and_says_so(tmp_path):
    cfg = tiny_config(tmp_path, seeds=[0, 1], finetune=[*TINY["finetune"], "data.shots_per_class=0"])
    names = [run.name for run in plan_runs(cfg)]
    # One fit to all the labels, which are the labelled images: the same for every seed.
    assert [name for name in names if name.startswith("baseline/")] == [
        f"baseline/pixels-{script}-all-seed0" for script in ("linear_probe", "knn")]
    results = example_results()
    results["labelled_per_class"] = 0
    results["pixels"] |= {"labelled_images": 600, "linear_probe_all": [0.70], "knn_all": [0.60]}
    table = results_table(results, "experiment")
    assert "| Starting point: accuracy | Fine-tuned, all labels | 5-shot |" in table
    assert "| Reference on the same training images | all 600 labels |\n|---|---:|\n" in table
    assert "| logistic regression on raw pixels | 70.0 ± 0.0 |\n" in table
    assert "| the ViT from scratch: fine-tuning recipe | 45.0 ± 7.1 |" in table


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(STUDY_CONFIGS.glob("reproduce_*.yaml")), ids=lambda path: path.stem)
def test_every_shipped_experiment_plans_runs_its_recipes_accept(preset, monkeypatch):
    monkeypatch.chdir(ROOT)  # the presets name the stage presets from the repository root, as the README runs them
    runs = plan_runs(build_config(ReproductionConfig, preset))
    assert runs, f"{preset.name} plans no run"
    for run in runs:
        assert run.command[1:3] == ("-m", "mpp")
        run_config(run)


def example_results() -> dict:
    """results.json of a two-seed experiment, with figures chosen so that each claim's interval can be worked out."""

    def row(label, finetune, few_shot, pretraining="mpp"):
        return {"label": label, "finetune_accuracy": finetune, "few_shot_accuracy": {"5": few_shot},
                "pretraining": pretraining, "few_shot_during_pretraining": {}}

    rows = {"scratch": row("from scratch", [0.40, 0.50], [0.30, 0.30], None),
            "mpp-colour-50": row("MPP colour 50", [0.60, 0.62], [0.30, 0.32]),
            "mpp-downsampled-50": row("MPP down", [0.60, 0.60], [0.30, 0.30]),
            "mpp-pixels-50": row("MPP pixels", [0.70, 0.70], [0.30, 0.30]),
            "mpp-colour-15": row("MPP 15", [0.50, 0.70], [0.30, 0.30]),
            "supervised": row("supervised", [0.80, 0.80], [0.50, 0.50], "supervised")}
    pixels = {"few_shot_accuracy": {"5": [0.20, 0.22]}, "linear_probe_labelled": [0.70, 0.72],
              "linear_probe_all": [0.84], "knn_labelled": [0.60, 0.66], "knn_all": [0.85], "knn_k": 20,
              "labelled_images": 40, "all_images": 600}
    return {"seeds": [0, 1], "rows": rows, "pixels": pixels, "supervised_test_accuracy": [0.9, 0.9],
            "labelled_per_class": 4, "claims": [dataclasses.asdict(claim) for claim in PAPER_CLAIMS],
            "wall_seconds": 600.0, "majority_class_accuracy": 0.376, "classes": 10}


def test_the_table_gives_mean_and_deviation_and_judges_each_claim_by_its_95_percent_interval():
    table = results_table(example_results(), "experiment")
    assert "| Starting point: accuracy | Fine-tuned, 4 labels per class | 5-shot |" in table
    assert "| from scratch | 45.0 ± 7.1 | 30.0 ± 0.0 |" in table
    assert "balanced" not in table and "learning rate" not in table  # results.json of an experiment without them
    assert "| raw pixels, no encoder | — | 21.0 ± 1.4 |" in table
    assert "| always the largest class (chance: 10.0) | 37.6 | 37.6 |" in table
    assert "| Reference on the same training images | 4 labels per class (40 images) | all 600 labels |" in table
    assert "| logistic regression on raw pixels | 71.0 ± 1.4 | 84.0 ± 0.0 |" in table
    assert "| kNN on raw pixels (cosine), k=20 | 63.0 ± 4.2 | 85.0 ± 0.0 |" in table
    assert "supervised pre-training with its own head | 45.0 ± 7.1 | 90.0 ± 0.0 |" in table
    lines = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()}
    # Pairs +20, +12: mean 16, sd 5.66, standard error 4, t(0.975, 1) = 12.71: 16 ± 50.8; t = 4, p = 1 - 2 atan(4) / pi.
    assert "| +16.0 [-34.8, +66.8], not shown (p 0.16; power 0.8 needs 4 seeds at this mean and SD) |" in lines[
        "MPP pre-training beats training from scratch"]
    # Pairs +20, +18: standard error 1, 19 ± 12.7; t = 19, p = 1 - 2 atan(19) / pi = 0.033.
    assert "| +19.0 [+6.3, +31.7], shown (p 0.033) |" in lines["supervised pre-training beats MPP"]
    assert "| -9.0 [-21.7, +3.7], not shown (p 0.07;" in lines["the mean-colour target beats L2 pixel regression"]


def with_balanced_accuracy(results: dict) -> dict:
    """``results`` as an experiment that records balanced accuracy and the chosen learning rates writes them: here
    every balanced accuracy is 10 points below the accuracy, and the pre-trained rows chose 0.1 and 0.3 from a grid
    whose top rate is 0.3."""
    for row in results["rows"].values():
        row["finetune_balanced_accuracy"] = [value - 0.1 for value in row["finetune_accuracy"]]
        row["few_shot_balanced_accuracy"] = {k: [v - 0.1 for v in vs] for k, vs in row["few_shot_accuracy"].items()}
        row["finetune_lr"] = [0.1, 0.3] if row["pretraining"] else [0.3, 0.3]
        row["finetune_sweep_lrs"] = [0.03, 0.1, 0.3]
        row["finetune_steps"] = [250, 250] if row["pretraining"] else [1030, 1030]
        row["few_shot_by_readout"] = {"token": row["few_shot_accuracy"], "avg": {"5": [0.5, 0.7]}}
        row["frozen_labelled"] = {script: {readout: {"accuracy": [0.9, 0.9], "balanced_accuracy": values}
                                           for readout, values in (("token", [0.2, 0.4]), ("avg", [0.3, 0.3]))}
                                  for script in ("linear_probe", "knn")}
    results["pixels"]["few_shot_balanced_accuracy"] = {"5": [0.10, 0.12]}
    results["pixels"] |= {"linear_probe_labelled_balanced": [0.50, 0.52], "knn_labelled_balanced": [0.40, 0.46]}
    return results


def test_balanced_accuracy_gets_its_own_table_and_is_what_the_claims_read():
    table = results_table(with_balanced_accuracy(example_results()), "experiment")
    assert "| Starting point: accuracy | Fine-tuned, 4 labels per class | learning rate (seeds) | 5-shot |" in table
    assert "| from scratch | 45.0 ± 7.1 | 0.3 (grid edge) x2 | 30.0 ± 0.0 |" in table
    assert "| MPP colour 50 | 61.0 ± 1.4 | 0.1 x1, 0.3 (grid edge) x1 | 31.0 ± 1.4 |" in table
    assert "| Starting point: balanced accuracy | Fine-tuned, 4 labels per class | 5-shot |" in table
    assert "| from scratch | 35.0 ± 7.1 | 20.0 ± 0.0 |" in table
    assert "| raw pixels, no encoder | — | 11.0 ± 1.4 |" in table
    # Always the largest class: 37.6% of the images, but balanced accuracy is chance whatever the class's size.
    assert "| always the largest class (chance: 10.0) | 10.0 | 10.0 |" in table
    assert ("| The paper's claim, exploratory (balanced accuracy; where a side lacks it, accuracy, marked) | "
            "Fine-tuned | 5-shot, [class] token | 5-shot, mean patch token |") in table
    lines = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()}
    # Few-shot like with like: MPP's balanced few-shot is recorded for its mean patch token only (the readout auto
    # chose), supervised's for its [class] token, so the [class] token column compares their plain accuracies and
    # says so; two MPP rows compare their mean patch tokens in balanced accuracy (pairs +2, 0: 1 ± 12.7).
    assert ("| +19.0 [+6.3, +31.7], shown (p 0.033) | +19.0 [+6.3, +31.7], shown (p 0.033; accuracy) |"
            in lines["supervised pre-training beats MPP"])
    assert lines["50% corruption beats 15%"].endswith("| +1.0 [-11.7, +13.7], not shown (p 0.5; power 0.8 needs "
                                                      "18 seeds at this mean and SD) |")
    # MPP's frozen encoder against the encoder at initialisation and the pixels, through every fit and readout: the
    # [class] token's logistic regression 20, 40 against the pixels' 50, 52: pairs -30, -12, -21 ± 114.4.
    assert "| -21.0 [-135.4, +93.4], not shown (p 0.26;" in lines["MPP colour 50 beats the raw pixels"]
    # 5 claims x 3 columns, 4 frozen fits against initialisation, fine-tuning, 4 frozen fits and 2 few-shot against
    # the pixels: 26 cells, 12 of them with no spread (3 of those equal on both seeds only to float rounding) and so
    # no t-test. Shown alone: 3, none of them after Holm's correction. An experiment of none of the primary family's
    # protocols: every comparison is exploratory.
    assert ("These tables read 14 exploratory comparisons, 3 shown each on its own; after a Holm correction across "
            "these 14 alone (5% family-wise), none stays shown.") in table
    assert "Primary family" not in table
    assert "| Few-shot accuracy by readout | 5-shot, [class] token | 5-shot, mean patch token |" in table
    assert "| from scratch | 30.0 ± 0.0 | 60.0 ± 14.1 |" in table
    assert "fine-tuning recipe (1,030 steps); supervised pre-training" in table
    assert ("| Frozen, 4 labels per class: balanced accuracy | logistic regression, [class] token | logistic "
            "regression, mean patch token | kNN, [class] token | kNN, mean patch token |") in table
    assert "| from scratch | 30.0 ± 14.1 | 30.0 ± 0.0 | 30.0 ± 14.1 | 30.0 ± 0.0 |" in table
    assert "| raw pixels, no encoder | 51.0 ± 1.4 | 51.0 ± 1.4 | 43.0 ± 4.2 | 43.0 ± 4.2 |" in table
    assert "| chance | 10.0 | 10.0 | 10.0 | 10.0 |" in table
    # The differences are those of the accuracies (every figure moved by the same 10 points): the same intervals.
    assert "| +19.0 [+6.3, +31.7], shown (p 0.033) |" in table


def test_the_fine_tuning_plot_draws_the_claims_measure_with_its_own_reference_lines():
    measure, values, references = finetune_plot_figures(example_results())
    assert measure == "accuracy" and values[0] == [40.0, 50.0]
    assert references == pytest.approx({"logistic regression on raw pixels": 71.0, "kNN on raw pixels (cosine)": 63.0,
                                        "always the largest class": 37.6})
    measure, values, references = finetune_plot_figures(with_balanced_accuracy(example_results()))
    # Balanced accuracy, its pixel fits; no largest-class line, which would sit on chance.
    assert measure == "balanced accuracy" and values[0] == pytest.approx([30.0, 40.0])
    assert references == pytest.approx({"logistic regression on raw pixels": 51.0, "kNN on raw pixels (cosine)": 43.0})


def test_the_monitor_plot_averages_the_seeds_as_far_as_all_reach_and_reads_them_against_chance():
    results = example_results()
    results["classes"] = 8
    row = next(iter(results["rows"].values()))
    row["few_shot_during_pretraining"] = {"0": [[0, 0.1], [64, 0.3], [128, 0.5]], "1": [[0, 0.2], [64, 0.4]]}
    curves, chance = monitor_plot_figures(results)
    assert list(curves) == [row["label"]]  # the rows without a monitor draw no curve
    images, means = curves[row["label"]]
    assert images == [0, 64] and means == pytest.approx([15.0, 35.0])
    assert chance == 12.5  # the monitor's slice holds every class equally: the largest class scores chance too


def test_a_row_that_stays_at_chance_is_named_as_a_broken_baseline():
    results = example_results()
    assert rows_at_chance(results, 0.02) == []
    results["rows"]["scratch"]["finetune_accuracy"] = [0.10, 0.11]  # 10.5% against chance 10%
    assert rows_at_chance(results, 0.02) == ["from scratch (10.5%, chance 10.0%)"]
    assert rows_at_chance(results, 0.0) == []  # no check
    results["rows"]["scratch"]["finetune_accuracy"] = [0.12, 0.13]  # 2.5 points above: it learned something
    assert rows_at_chance(results, 0.02) == []
    # Always answering clip art's largest class: 37.6% accuracy, far from chance, but balanced accuracy at chance.
    results = with_balanced_accuracy(example_results())
    results["rows"]["scratch"]["finetune_accuracy"] = [0.376, 0.376]
    results["rows"]["scratch"]["finetune_balanced_accuracy"] = [0.10, 0.10]
    assert rows_at_chance(results, 0.02) == ["from scratch (10.0%, chance 10.0%)"]


def test_tables_only_rewrites_the_published_tables_plots_and_page_from_results_json(tmp_path):
    published, page = tmp_path / "published", tmp_path / "results.md"
    published.mkdir()
    (published / "results.json").write_text(json.dumps(example_results() | {"runs": 57}))
    (published / "results.md").write_text("an old table\n")
    page.write_text("# Title\n<!-- results: experiment -->\nold\n<!-- /results: experiment -->\n")
    cfg = tiny_config(tmp_path, seeds=[0, 1], publish_dir=str(published), results_page=str(page), tables_only=True)
    results = reproduce(cfg)
    table = (published / "results.md").read_text()
    assert table == results["table"] and "| +19.0 [+6.3, +31.7], shown (p 0.033) |" in table
    # The runs that ran, as results.json records them, not those today's plan would run.
    planned = len(plan_runs(cfg))
    assert planned and planned != 57
    assert table.endswith("\n57 runs, 2 at a time, in 10 min of wall time.\n")
    assert f"<!-- results: experiment -->\n{table}<!-- /results: experiment -->" in page.read_text()
    assert (published / "finetune_accuracy.png").read_bytes().startswith(b"\x89PNG")
    assert not (tmp_path / "experiment").exists()  # nothing ran
    with pytest.raises(ConfigError, match="run the experiment first"):
        reproduce(tiny_config(tmp_path, tables_only=True))


@pytest.mark.slow
@pytest.mark.many_runs
@pytest.mark.usefixtures("experiment_runs_here")  # the runs of the continuation only: the stage starts processes
def test_the_whole_experiment_stopped_and_continued_by_the_gpu_commands_stage_writes_its_table_and_plots(tmp_path):
    """The toy reproduction, run once, by the GPU command's reproduce stage (tools/gpu.py) as a GPU runs its own:
    its plan's cost first, then the experiment, its runs processes of their own, stopped at the stage's time limit;
    continued by the same command, then the stage run again, finding every run finished. On Fashion-MNIST, where the
    stage reads its data. One row of each kind (from scratch, MPP, supervised): the other paper rows are the MPP row
    with other overrides, which test_the_plan_runs_every_row_for_every_seed_each_after_its_own_pre_training plans."""
    preset = tmp_path / "experiment.yaml"  # the stage runs it in work/experiment: the page's section "experiment"
    publish, page = tmp_path / "published", tmp_path / "results.md"
    page.write_text("# Title\n<!-- results: experiment -->\nold table\n<!-- /results: experiment -->\nthe end\n")
    rows = [row for row in PAPER_ROWS if row.name in ("scratch", "mpp-colour-50", "supervised")]
    claims = [dataclasses.asdict(claim) for claim in PAPER_CLAIMS if {claim.better, claim.worse} <= {
        row.name for row in rows}]
    preset.write_text(yaml.safe_dump({**TINY, "seeds": [0], "publish_dir": str(publish), "results_page": str(page),
                                      "rows": [dataclasses.asdict(row) for row in rows], "claims": claims}))
    name, out, work = preset.stem, tmp_path / "out", tmp_path / "work"
    output_dir = work / name
    out.mkdir()
    work.mkdir()
    plan = dataclasses.replace(dry_run_plan(), reproductions=(str(preset),), reproduce_args=())
    # Stopped first, as a GPU's command may be stopped: after 40 s some runs are done and some are not (128 s
    # in all alone). On cores busy with other tests a stop may come before any run ends: the stage run again
    # continues where it stopped, until some runs are done.
    limited = dataclasses.replace(plan, limits_s={"reproduce": 40})
    stops = [reproduce_stage(limited, out, work)]
    while stops[-1]["status"] == "stopped" and stops[-1][name]["finished"] == 0 and len(stops) < 6:
        stops.append(reproduce_stage(limited, out, work))
    stopped = stops[-1]
    assert all(stop["status"] == "stopped" and "run the stage again to continue" in stop["why"] for stop in stops)
    runs = len(rows) * ROW_RUNS + sum(1 for row in rows if row.pretraining) + BASELINE_RUNS["seed"] + BASELINE_RUNS[
        "once"]
    assert stopped[name]["runs"] == runs and 0 < stopped[name]["finished"] < runs
    cost = stopped[PLAN_COSTS][name]  # recorded before the runs
    assert cost["seeds"] == 1 and {stage["stage"] for stage in cost["stages"]} >= {"pre-training (MPP)", "fine-tuning"}
    said = summary("reproduce", stopped)  # the stage's line in the command's results.md
    assert f"{name}: {stopped[name]['finished']} of {runs} runs finished" in said and f"{name}'s plan: " in said
    log = (out / "reproduce.log").read_text()
    assert re.findall(r"(\d+) runs, (\d+) already finished", log)[0] == (str(runs), "0")
    # Continued by the stage's own command, here with its runs in this process (experiment_runs_here); then the stage
    # once more, which finds every run finished, starts none and reads the results.
    continued = run_module_here("study.reproduce", "--config", str(preset), *reproduction_overrides(plan, output_dir))
    (total, before), = re.findall(r"(\d+) runs, (\d+) already finished", continued.stderr)
    assert total == str(runs) and 0 < int(before) < runs
    passed = reproduce_stage(dataclasses.replace(plan, limits_s={"reproduce": 1200}), out, work)  # a hang's guard
    assert passed["status"] == "passed", (out / "reproduce.log").read_text()[-3000:]
    assert passed[PLAN_COSTS] == stopped[PLAN_COSTS]
    last = (out / "reproduce.log").read_text()[len(log):]
    assert f"{runs} runs, {runs} already finished" in last and "start " not in last

    table = (output_dir / "results.md").read_text()
    assert (out / f"{name}.md").read_text() == table
    for row in rows:
        # accuracy, the learning rate its seed used, the few-shot accuracies; then balanced accuracy; both readouts
        assert re.search(rf"\| {re.escape(row.label)} \| [\d.]+ ± 0\.0 \| [\d.e-]+ x1 \| [\d.]+ ± 0\.0 \| "
                         r"[\d.]+ ± 0\.0 \|", table)
        assert len(re.findall(rf"\| {re.escape(row.label)} \| [\d.]+ ± 0\.0 \| [\d.]+ ± 0\.0 \|", table)) >= 2
    assert re.search(r"\| logistic regression on raw pixels \| [\d.]+ ± 0\.0 \| [\d.]+ ± 0\.0 \|", table)
    assert re.search(rf"\n{runs} runs, 2 at a time, in \d+ min of wall time", table)
    results = json.loads((output_dir / "results.json").read_text())
    assert results["runs"] == runs
    figures = passed[name]  # the stage's summary of it
    assert figures["seeds"] == 1 and set(figures["fine_tuned"]) == {row.label for row in rows}
    assert f"{name} (1 seeds, " in summary("reproduce", passed)
    curve = results["rows"]["mpp-colour-50"]["few_shot_during_pretraining"]["0"]
    assert [images for images, _ in curve] == [0, 16, 32]  # before the first step and every 2 steps of 8 images
    assert results["rows"]["scratch"]["few_shot_during_pretraining"] == {}
    assert set(results["rows"]["mpp-colour-50"]["few_shot_by_readout"]) == {"token", "avg"}
    frozen = results["rows"]["mpp-colour-50"]["frozen_labelled"]
    assert {script: set(fits) for script, fits in frozen.items()} == {"linear_probe": {"token", "avg"},
                                                                      "knn": {"token", "avg"}}
    assert re.search(r"\| MPP, 3-bit mean colour, 50% \| [\d.]+ ± 0\.0 \| [\d.]+ ± 0\.0 \| [\d.]+ ± 0\.0 \| "
                     r"[\d.]+ ± 0\.0 \|\n", table)
    assert len(results["rows"]["scratch"]["finetune_per_class_accuracy"][0]) == 10
    assert results["pixels"]["labelled_images"] == 40 and results["pixels"]["all_images"] == 60_000
    assert results["classes"] == 10 and results["majority_class_accuracy"] == 0.1  # Fashion-MNIST's test: balanced
    for plot in ("finetune_accuracy.png", "few_shot_during_pretraining.png"):
        assert (output_dir / plot).read_bytes().startswith(b"\x89PNG")
        assert (publish / plot).read_bytes() == (output_dir / plot).read_bytes()
    assert page.read_text() == ("# Title\n<!-- results: experiment -->\n" + table
                                + "<!-- /results: experiment -->\nthe end\n")


def test_a_results_page_without_its_results_section_is_refused_before_any_run(tmp_path):
    page = tmp_path / "results.md"
    page.write_text("# Title\n<!-- results: other -->\n<!-- /results: other -->\n")
    cfg = tiny_config(tmp_path, results_page=str(page))
    with pytest.raises(ConfigError, match="<!-- results: experiment -->"):
        reproduce(cfg)
    assert not (tmp_path / "experiment").exists()


PRIMARY_EXPERIMENT = "reproduce-fashion-mnist-cpu"  # one of the primary family's protocols


def test_where_the_experiment_runs_a_protocol_of_the_primary_family_its_claims_are_corrected_apart():
    """The family's four claims fine-tuned, in their own table, Holm-corrected over those four alone; every other
    comparison exploratory, with its own Holm line."""
    pilot = results_table(with_balanced_accuracy(example_results()), PRIMARY_EXPERIMENT)
    # Results that record no family (run before the registration) are read as the family would be, as pilot data.
    assert ("| The pre-registered family read on pilot runs made before it (exploratory) (results/preregistration.md):"
            " grey (Fashion-MNIST), 100 labels per class, 4 of its 16 comparisons |") in pilot
    table = results_table(with_balanced_accuracy(example_results()) | {"primary": {}}, PRIMARY_EXPERIMENT)
    assert ("| Primary family, pre-registered (results/preregistration.md): grey (Fashion-MNIST), 100 labels per "
            "class, 4 of its 16 comparisons | Fine-tuned, balanced accuracy | Holm p over these 4 |") in table
    primary, exploratory = table.split("| The paper's claim, exploratory")
    lines = {line.split(" | ")[0].lstrip("| "): line for line in primary.splitlines()}
    # p-values 0.033 (supervised), 0.07 (pixels), 0.16 (scratch) and 0.93 (15%): Holm multiplies them by 4, 3, 2, 1
    # and keeps them in order: 0.13, 0.21, 0.31, 0.93.
    assert lines["supervised pre-training beats MPP"] == ("| supervised pre-training beats MPP | +19.0 [+6.3, +31.7], "
                                                          "shown (p 0.033) | 0.13, not shown |")
    assert lines["MPP beats training from scratch"].endswith("| 0.31, not shown |")
    assert lines["the 3-bit mean colour beats L2 pixel regression"].endswith("| 0.21, not shown |")
    assert lines["corrupting 50% beats 15%"].endswith("| 0.93, not shown |")
    lines = {line.split(" | ")[0].lstrip("| "): line for line in exploratory.splitlines()}
    # The claims' exploratory table leaves their fine-tuned readings to the family's; the downsized target, no
    # claim of the family, keeps its own.
    assert exploratory.startswith(" (balanced accuracy; where a side lacks it, accuracy, marked; the primary claims "
                                  "fine-tuned: above) | Fine-tuned |")
    assert lines["MPP pre-training beats training from scratch"].startswith(
        "| MPP pre-training beats training from scratch | — | +1.0 [-11.7, +13.7], not shown (p 0.5;")
    assert lines["the downsized-patch target beats L2 pixel regression"].startswith(
        "| the downsized-patch target beats L2 pixel regression | -10.0 on every seed: no spread, no t-test |")
    # The 14 comparisons with a t-test of an experiment of no protocol, less the four fine-tuned primary ones.
    assert ("These tables read 10 exploratory comparisons, 2 shown each on its own; after a Holm correction across "
            "these 10 alone (5% family-wise), none stays shown.") in table


def test_results_json_records_the_primary_familys_claims_held_with_their_holm_adjusted_p_values():
    results = with_balanced_accuracy(example_results())
    record = primary_record(results, PRIMARY_EXPERIMENT)
    assert {key: record[key] for key in ("protocol", "family_size", "level")} == {
        "protocol": "grey (Fashion-MNIST), 100 labels per class", "family_size": 16, "level": 0.05}
    assert [(claim["better"], claim["worse"]) for claim in record["claims"]] == [(c.better, c.worse) for c in CLAIMS]
    supervised = record["claims"][1]
    assert supervised["claim"] == "supervised pre-training beats MPP" and supervised["measure"] == "balanced accuracy"
    assert supervised["mean"] == pytest.approx(19.0)
    assert supervised["interval"] == pytest.approx([6.29, 31.71], abs=0.01)
    assert supervised["p_value"] == pytest.approx(0.0335, abs=1e-4)
    assert supervised["holm_p_value"] == pytest.approx(4 * supervised["p_value"])
    assert primary_record(results, "reproduce-shapes-cpu") is None  # no protocol of the family: all exploratory
    # A protocol's experiment with only some of the family's rows holds only their claims, corrected over those.
    results["claims"] = results["claims"][:1]
    (only,) = primary_record(results, PRIMARY_EXPERIMENT)["claims"]
    assert only["better"] == "mpp-colour-50" and only["holm_p_value"] == only["p_value"]


def test_a_claims_holm_verdict_follows_the_preregistration():
    def difference(mean: float) -> PairedDifference:
        return PairedDifference(mean, 1.0, 5, mean - 1, mean + 1, 0.001)

    assert holm_cell(difference(+3.0), 0.012) == "0.012, shown"
    assert holm_cell(difference(-3.0), 0.012) == "0.012, the opposite shown"
    assert holm_cell(difference(+3.0), 0.05) == "0.05, not shown"
    assert holm_cell(difference(+3.0), None) == "—"  # no p-value (one seed, or no spread)


def test_a_rate_chosen_at_its_grids_edge_is_marked_with_a_legend_and_none_without():
    results = with_balanced_accuracy(example_results())
    table = results_table(results, "experiment")
    assert "\n\n(grid edge): the lowest or the highest rate of its row's grid" in table
    for row in results["rows"].values():
        row["finetune_sweep_lrs"] = [0.03, 0.1, 0.3, 0.9]
    table = results_table(results, "experiment")
    assert "| from scratch | 45.0 ± 7.1 | 0.3 x2 | 30.0 ± 0.0 |" in table and "grid edge" not in table
    for row in results["rows"].values():
        row["finetune_sweep_lrs"] = []  # no sweep: a rate given, no edge
    assert "grid edge" not in results_table(results, "experiment")


def test_a_row_without_a_recorded_grid_reads_its_configured_one(tmp_path):
    """results.json written before the rows recorded their grids: no grid was widened then."""
    cfg = tiny_config(tmp_path, finetune=[*TINY["finetune"], "finetune.sweep_lrs=[0.03,0.1,0.3]"],
                      scratch_finetune=["finetune.sweep_lrs=[0.1,0.3,1.0]"])
    results = example_results()
    results["rows"]["supervised"]["finetune_sweep_lrs"] = [0.01, 0.03, 0.1, 0.3]  # recorded: kept
    rows = with_sweep_grids(cfg, results)["rows"]
    assert rows["scratch"]["finetune_sweep_lrs"] == [0.1, 0.3, 1.0]
    assert rows["mpp-colour-50"]["finetune_sweep_lrs"] == [0.03, 0.1, 0.3]
    assert rows["supervised"]["finetune_sweep_lrs"] == [0.01, 0.03, 0.1, 0.3]


def test_a_rate_chosen_at_its_grids_edge_widens_the_grid_by_a_factor_of_3_on_that_side():
    grid = (0.03, 0.1, 0.3)
    assert widened_grid(grid, [0.1, 0.1]) == grid
    assert widened_grid(grid, [0.1, 0.3]) == (0.03, 0.1, 0.3, 0.9)
    assert widened_grid(grid, [0.03]) == (0.01, 0.03, 0.1, 0.3)  # 0.03 / 3 in floats is 0.009999999999999998
    assert widened_grid(grid, [0.3, 0.03, 0.1]) == (0.01, 0.03, 0.1, 0.3, 0.9)
    assert widened_grid((0.3, 0.1, 0.03), [0.3]) == (0.03, 0.1, 0.3, 0.9)  # any order


def finish(output_dir: Path, name: str, **metrics) -> None:
    (output_dir / name).mkdir(parents=True)
    (output_dir / name / "metrics.json").write_text(json.dumps(metrics))


TWO_ROWS = [{"name": "none", "label": "random init"},
            {"name": "pixels", "label": "MPP pixels", "pretraining": "mpp", "overrides": ["mpp.target=pixels"]}]


def test_a_rerun_sweeps_a_row_again_over_a_widened_grid_once_its_sweeps_chose_an_edge(tmp_path):
    cfg = tiny_config(tmp_path, seeds=[0, 1], rows=TWO_ROWS, claims=[],
                      finetune=[*TINY["finetune"], "finetune.sweep_lrs=[0.03,0.1,0.3]"])
    output_dir = Path(cfg.output_dir)

    def finetuning() -> dict[str, Run]:
        return {run.name: run for run in plan_runs(cfg) if run.stage == "finetune"}

    finish(output_dir, "finetune/none-seed0", chosen_lr=0.3)
    assert set(finetuning()) == {f"finetune/{row}-seed{seed}" for row in ("none", "pixels") for seed in (0, 1)}
    finish(output_dir, "finetune/none-seed1", chosen_lr=0.1)  # every seed's sweep finished, one at the top edge
    runs = finetuning()
    assert set(runs) == {"finetune/none-widened1-seed0", "finetune/none-widened1-seed1", "finetune/pixels-seed0",
                         "finetune/pixels-seed1"}
    widened = runs["finetune/none-widened1-seed1"]
    assert "finetune.sweep_lrs=[0.03,0.1,0.3,0.9]" in widened.command
    assert run_config(widened).finetune.sweep_lrs == (0.03, 0.1, 0.3, 0.9)
    # The results read the last grid every seed finished.
    assert finished_widenings(output_dir, "finetune/none", 0) == 0
    for seed, chosen in ((0, 0.9), (1, 0.3)):  # the widened grid's top again: widened once more
        finish(output_dir, f"finetune/none-widened1-seed{seed}", chosen_lr=chosen)
    assert finished_widenings(output_dir, "finetune/none", 0) == 1
    assert "finetune.sweep_lrs=[0.03,0.1,0.3,0.9,2.7]" in finetuning()["finetune/none-widened2-seed0"].command
    # tune_once: the first seed's sweep alone decides, and the other seeds train at the widened sweep's rate.
    once = tiny_config(tmp_path, output_dir=str(tmp_path / "once"), seeds=[0, 5], rows=TWO_ROWS, claims=[],
                       tune_once=True, finetune=[*TINY["finetune"], "finetune.sweep_lrs=[0.03,0.1,0.3]"])
    finish(Path(once.output_dir), "finetune/none-seed0", chosen_lr=0.03)
    runs = {run.name: run for run in plan_runs(once)}
    assert "finetune.sweep_lrs=[0.01,0.03,0.1,0.3]" in runs["finetune/none-widened1-seed0"].command
    other = runs["finetune/none-widened1-seed5"]
    assert other.also_after == ("finetune/none-widened1-seed0",)
    assert f"finetune.lr_from={once.output_dir}/finetune/none-widened1-seed0" in other.command


def fake_finished_experiment(cfg: ReproductionConfig) -> None:
    """Every run of ``cfg``'s plan finished, with the metrics (and, where read, the config) the results read: each
    row's fine-tuning scores 0.1 more per row down the grid, plus 0.01 x the seed."""
    output_dir = Path(cfg.output_dir)
    for run in plan_runs(cfg):
        script = run.command[run.command.index("--config") - 1]  # python -m mpp <command> --config ...
        config = run_config(run)
        row = next((index for index, row in enumerate(cfg.rows) if f"/{row.name}-" in run.name), 0)
        accuracy = 0.1 * row + 0.01 * config.seed
        fit = {"test_accuracy": accuracy, "test_balanced_accuracy": accuracy, "k": 3}
        metrics = {"finetune": {"test_accuracy": accuracy, "test_balanced_accuracy": accuracy,
                                "test_per_class_accuracy": [accuracy], "chosen_lr": 0.1, "lr": 0.1, "step": 4},
                   "few_shot": {"few_shot": {"1": {"mean": accuracy, "balanced_mean": accuracy}},
                                "features": config.eval.features if script == "few_shot" else None},
                   "linear_probe": {script: fit, "train_images": 40}, "knn": {script: fit, "train_images": 40},
                   "pretrain": {}, "supervised": {"test_accuracy": accuracy}}[script]
        finish(output_dir, run.name, **metrics)
        (output_dir / run.name / "config.yaml").write_text(yaml.safe_dump({
            "finetune": {"sweep_lrs": [0.03, 0.1, 0.3]}, "monitor": {"few_shot_every": 0}}))


def test_the_results_read_each_rows_last_widened_grid_and_record_the_primary_family(tmp_path):
    cfg = tiny_config(tmp_path, output_dir=str(tmp_path / PRIMARY_EXPERIMENT), seeds=[0, 1])
    fake_finished_experiment(cfg)
    for seed in (0, 1):  # the scratch row swept a widened grid
        finish(Path(cfg.output_dir), f"finetune/scratch-widened1-seed{seed}", test_accuracy=0.5,
               test_balanced_accuracy=0.5, test_per_class_accuracy=[0.5], chosen_lr=0.9, lr=0.9, step=4)
        (Path(cfg.output_dir) / f"finetune/scratch-widened1-seed{seed}" / "config.yaml").write_text(
            yaml.safe_dump({"finetune": {"sweep_lrs": [0.03, 0.1, 0.3, 0.9]}}))
    results = collect_results(cfg)
    scratch, mpp = results["rows"]["scratch"], results["rows"]["mpp-colour-50"]
    assert scratch["finetune_accuracy"] == [0.5, 0.5] and scratch["finetune_lr"] == [0.9, 0.9]
    assert scratch["finetune_sweep_lrs"] == [0.03, 0.1, 0.3, 0.9]
    assert mpp["finetune_accuracy"] == pytest.approx([0.1, 0.11]) and mpp["finetune_sweep_lrs"] == [0.03, 0.1, 0.3]
    assert results["primary"] == primary_record(results, PRIMARY_EXPERIMENT)
    assert [claim["worse"] for claim in results["primary"]["claims"]] == [claim.worse for claim in CLAIMS]
    assert results["primary"]["claims"][0]["mean"] == pytest.approx(100 * (0.105 - 0.5))


def test_a_sweeps_validation_split_below_a_fifth_of_the_labels_or_200_images_is_refused_naming_a_value_that_fits(
        tmp_path):
    sweep = [*TINY["finetune"], "finetune.sweep_lrs=[0.03,0.1,0.3]"]
    hundred = [*sweep, "data.shots_per_class=100"]  # 1,000 labelled images of the shapes' 10 classes
    check_validation_split(tiny_config(tmp_path, finetune=[*hundred, "finetune.sweep_holdout_fraction=0.2"]))
    with pytest.raises(ConfigError, match=r"finetune.sweep_holdout_fraction=0.1 holds out 100 of row scratch's 1,000 "
                                          r"labelled images \(100 per class x 10 classes\) to choose its learning "
                                          r"rate on, fewer than 200 \(20% of them, and at least 200\): set "
                                          r"finetune.sweep_holdout_fraction=0.2$"):
        check_validation_split(tiny_config(tmp_path, finetune=[*hundred, "finetune.sweep_holdout_fraction=0.1"]))
    with pytest.raises(ConfigError, match=r"fewer than 200 .*: set finetune.sweep_holdout_fraction=0.4$"):
        check_validation_split(tiny_config(tmp_path, finetune=[*sweep, "data.shots_per_class=50",
                                                               "finetune.sweep_holdout_fraction=0.3"]))
    # 40 labelled images cannot hold 200 out: more labels.
    with pytest.raises(ConfigError, match=r"set data.shots_per_class=100 with finetune.sweep_holdout_fraction=0.2$"):
        check_validation_split(tiny_config(tmp_path, finetune=sweep))
    # The from-scratch row's own fine-tuning, checked as its own.
    with pytest.raises(ConfigError, match="holds out 100 of row scratch's"):
        check_validation_split(tiny_config(tmp_path, finetune=[*hundred, "finetune.sweep_holdout_fraction=0.2"],
                                           scratch_finetune=["finetune.sweep_holdout_fraction=0.1"]))
    check_validation_split(tiny_config(tmp_path))  # no sweep: nothing held out
    check_validation_split(tiny_config(tmp_path, finetune=[*sweep, "data.shots_per_class=0"]))  # all labels: the data's
    # Refused before anything runs.
    with pytest.raises(ConfigError, match="finetune.sweep_holdout_fraction"):
        reproduce(tiny_config(tmp_path, finetune=sweep))
    assert not (tmp_path / "experiment").exists()
