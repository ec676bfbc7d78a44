"""The registered confirmatory test (study/confirmatory.py): its runs seed after seed, its one-sided tests against
known t-tables, the fixed sequence that stops at the first test not shown, and a whole test on tiny runs that records
each seed as it finishes and, continued, runs only the seeds not yet recorded."""

from __future__ import annotations

import re
import json
from pathlib import Path

import pytest
import yaml

from mpp.config.building import build_config
from mpp.errors import ConfigError
from mpp.evaluation.statistics import paired_difference
from mpp.experiments.runner import claim_experiment
from study.confirmatory import (
    ConfirmatoryConfig,
    candidates,
    one_sided_p,
    plan_runs,
    plan_tuning,
    publish,
    read_tests,
    record_finished_tuning,
    record_tuning,
    tables,
    tuning_that_fits,
)
from tests.launching import ROOT, run_module_here

CONFIGS = ROOT / "recipes" / "configs"
ARMS = [
    {"name": "scratch", "label": "from scratch", "pretrained": False, "overrides": ["train.steps=6"]},
    {"name": "mpp", "label": "MPP", "pretrained": True, "overrides": ["train.steps=3"]},
    {"name": "mpp-short", "label": "MPP, short", "pretrained": True, "exploratory": True,
     "overrides": ["train.steps=2"]},
]
TINY = {  # 40 shapes images, a one-block ViT on 16x16 images, batches of 8
    "mpp_preset": str(CONFIGS / "mpp_tiny_cpu.yaml"), "eval_preset": str(CONFIGS / "eval_tiny_cpu.yaml"),
    "finetune_preset": str(CONFIGS / "finetune_tiny_cpu.yaml"),
    "data": ["data.shots_per_class=4"],
    "encoder": ["model.img_size=16", "model.embed_dim=16", "model.depth=1", "model.num_heads=2"],
    "mpp": ["train.global_batch_size=8", "train.warmup_steps=1", "train.steps=3", "mpp.downsampled_size=2"],
    "finetune": ["train.global_batch_size=8", "train.warmup_steps=1", "train.log_every=1", "finetune.sweep_lrs=[]"],
    "arms": ARMS, "better": "mpp", "worse": "scratch", "registration": "a test's registration",
    "sequence": [{"test": "the same comparison in top-1 accuracy", "measure": "accuracy"},
                 {"test": "the gain smaller than +2 points", "against": 2.0, "alternative": "less"}],
    "secondary": ["claim 2"], "parallel_runs": 2,
}


def tiny_config(tmp_path: Path, **changes) -> ConfirmatoryConfig:
    preset = tmp_path / "confirm.yaml"
    preset.write_text(yaml.safe_dump({**TINY, "output_dir": str(tmp_path / "confirm"), **changes}))
    return build_config(ConfirmatoryConfig, preset)


def test_each_seed_pre_trains_once_and_runs_every_arm_seed_after_seed_in_the_registered_order(tmp_path):
    cfg = tiny_config(tmp_path, seeds=[9, 4])
    runs = plan_runs(cfg, [9, 4], {})
    assert [run.name for run in runs] == [
        "pretrain/mpp-seed9", "finetune/scratch-seed9", "finetune/mpp-seed9", "finetune/mpp-short-seed9",
        "pretrain/mpp-seed4", "finetune/scratch-seed4", "finetune/mpp-seed4", "finetune/mpp-short-seed4"]
    by_name = {run.name: run for run in runs}
    assert by_name["finetune/scratch-seed9"].after is None  # from scratch: beside the pre-training
    mpp = by_name["finetune/mpp-seed4"]
    assert mpp.after == "pretrain/mpp-seed4" and f"init={tmp_path / 'confirm' / 'pretrain/mpp-seed4'}" in mpp.command
    assert "data.subset_seed=4" in mpp.command and "seed=4" in mpp.command
    assert mpp.command.index("train.steps=3") > mpp.command.index("finetune.sweep_lrs=[]")  # the arm's last


def test_the_arms_the_test_compares_must_exist_and_not_be_exploratory(tmp_path):
    with pytest.raises(ConfigError, match="must name two arms that are not exploratory"):
        tiny_config(tmp_path, better="mpp-short")
    with pytest.raises(ConfigError, match="must name two arms"):
        tiny_config(tmp_path, worse="mpp")


def test_the_one_sided_p_value_is_half_the_two_sided_on_its_side_and_tests_against_a_bound():
    difference = paired_difference([3.0, 2.5, 4.0, 1.0, 2.0], [0.0] * 5)  # mean 2.5, sd 1.118, t 5.0 on 4 df
    assert one_sided_p(difference, 0.0, "greater") == pytest.approx(difference.p_value / 2)
    assert one_sided_p(difference, 0.0, "greater") == pytest.approx(0.00374, abs=2e-5)  # t-tables: t=5, 4 df
    assert one_sided_p(difference, 0.0, "less") == pytest.approx(1 - difference.p_value / 2)
    # Against +2.5, the mean itself: t = 0, one-sided p 0.5 either way.
    assert one_sided_p(difference, 2.5, "less") == pytest.approx(0.5)
    assert one_sided_p(paired_difference([1.0], [0.0]), 0.0, "greater") is None  # one seed: no test


def records(gains: list[float], base: float = 0.5) -> dict[str, dict]:
    """Per-seed records whose MPP arm beats scratch by ``gains`` (fractions) in both accuracies."""
    def arm(value: float) -> dict:
        return {"accuracy": value, "balanced_accuracy": value, "steps": 6, "lr": 0.1, "train_accuracy": 0.9,
                "train_accuracy_last_fifth": 0.85}
    return {str(seed): {"scratch": arm(base), "mpp": arm(base + gain), "mpp-short": arm(base)}
            for seed, gain in zip([1, 2, 3, 4, 5], gains, strict=True)}


def test_the_sequence_reads_the_next_test_only_where_the_one_before_is_shown(tmp_path):
    cfg = tiny_config(tmp_path, seeds=[1, 2, 3, 4, 5])
    shown = read_tests(cfg, records([0.030, 0.025, 0.040, 0.010, 0.020]))  # +2.5 points, p 0.0037 one-sided
    assert shown["primary"]["verdict"] == "gain shown" and shown["primary"]["seeds"] == [1, 2, 3, 4, 5]
    top1, against_effect, later = shown["secondary"]
    assert top1["reached"] and top1["shown"]
    assert against_effect["reached"] and not against_effect["shown"]  # +2.5 is not below +2
    assert later == {"test": "claim 2", "reached": False, "ran": False}
    unclear = read_tests(cfg, records([0.02, -0.02, 0.01, -0.01, 0.0]))
    assert unclear["primary"]["verdict"] == "no gain shown" and not unclear["secondary"][0]["reached"]
    opposite = read_tests(cfg, records([-0.030, -0.025, -0.040, -0.010, -0.020]))
    assert opposite["primary"]["verdict"] == "the opposite shown" and not opposite["primary"]["shown"]


def test_the_tables_give_no_accuracy_until_every_registered_seed_is_recorded(tmp_path):
    cfg = tiny_config(tmp_path, seeds=[1, 2, 3, 4, 5])
    partial = {"per_seed": dict(list(records([0.03, 0.02, 0.04, 0.01, 0.02]).items())[:2]),
               "classes": 10, "majority_class_accuracy": 0.1}
    table = tables(cfg, partial)
    assert "Seeds recorded: 2 of 5 (1, 2)" in table and "read once all 5 registered seeds have run" in table
    assert "Balanced accuracy" not in table and "| 90.0 ± 0.0 | +5.0 ± 0.0 |" in table  # training accuracy alone
    whole = {"per_seed": records([0.03, 0.02, 0.04, 0.01, 0.02]), "classes": 10, "majority_class_accuracy": 0.1}
    whole |= read_tests(cfg, whole["per_seed"])
    table = tables(cfg, whole)
    assert "**Primary test**" in table and "+2.4 points [+1.0, +3.8]" in table and "**gain shown**" in table
    assert "| the primary test, balanced accuracy | yes | +2.4 [+1.0, +3.8], shown (p 0.0" in table
    unclear = {**whole, **read_tests(cfg, records([0.02, -0.02, 0.01, -0.01, 0.0]))}  # the sequence stops at once
    assert re.search(r"\| the same comparison in top-1 accuracy \| no \| not reached \(p [\d.]+ against \+0\) \|",
                     tables(cfg, unclear))
    assert "| claim 2 | no | not run |" in tables(cfg, unclear)
    assert "| MPP, short - from scratch | +0.0" in table and "| MPP, short - MPP | -2.4" in table


@pytest.mark.slow
@pytest.mark.many_runs
@pytest.mark.usefixtures("experiment_runs_here")
def test_a_whole_test_records_each_seed_as_it_finishes_and_continued_runs_only_the_seeds_not_recorded(tmp_path):
    published, page = tmp_path / "published", tmp_path / "results.md"
    page.write_text("# Title\n<!-- results: confirm -->\n<!-- /results: confirm -->\n")
    preset = tmp_path / "confirm.yaml"
    settings = {**TINY, "output_dir": str(tmp_path / "confirm"), "publish_dir": str(published),
                "results_page": str(page)}
    preset.write_text(yaml.safe_dump({**settings, "seeds": [0, 1]}))
    command = ["study.confirmatory", "--config", str(preset)]  # the test and its runs in this process
    # Seed 1's pre-training cannot start (a file stands where its run directory goes): seed 0 is recorded all the
    # same, the moment its last run finished, and the test is not read.
    claim_experiment(build_config(ConfirmatoryConfig, preset))  # its output_dir, as the command would
    blocked = tmp_path / "confirm" / "pretrain" / "mpp-seed1"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("in the way")
    result = run_module_here(*command, check=False)
    assert result.returncode != 0 and "runs failed: pretrain/mpp-seed1" in result.stderr, result.stderr[-3000:]
    results = json.loads((published / "results.json").read_text())
    assert list(results["per_seed"]) == ["0"] and "primary" not in results
    assert results["per_seed"]["0"]["scratch"]["steps"] == 6 and results["per_seed"]["0"]["mpp"]["steps"] == 3
    assert "Seeds recorded: 1 of 2 (0)" in page.read_text()

    blocked.unlink()  # continued: seed 1's runs alone (its scratch arm had finished), then the test read
    result = run_module_here(*command, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "4 runs, 1 already finished" in result.stderr
    results = json.loads((published / "results.json").read_text())
    assert list(results["per_seed"]) == ["0", "1"] and results["primary"]["seeds"] == [0, 1]
    assert results["classes"] == 10 and "**Primary test**" in page.read_text()

    # The recorded seeds are never run again, even where their runs are gone: elsewhere, the new seed alone runs.
    preset.write_text(yaml.safe_dump({**settings, "seeds": [0, 1, 2], "output_dir": str(tmp_path / "b" / "confirm")}))
    result = run_module_here(*command, check=False)
    assert result.returncode == 0 and "4 runs, 0 already finished" in result.stderr, result.stderr[-3000:]
    results = json.loads((published / "results.json").read_text())
    assert list(results["per_seed"]) == ["0", "1", "2"] and results["primary"]["seeds"] == [0, 1, 2]
    # A registered test's seeds do not shrink under its published records.
    preset.write_text(yaml.safe_dump({**settings, "seeds": [0, 1]}))
    result = run_module_here(*command, check=False)
    assert result.returncode != 0 and "records seeds ['2'] that seeds=[0, 1] does not register" in result.stderr


@pytest.mark.slow
@pytest.mark.many_runs
@pytest.mark.usefixtures("experiment_runs_here")
def test_the_gpu_test_dry_run_tunes_on_its_tuning_seed_times_its_runs_and_runs_only_the_seeds_that_fit(tmp_path):
    # The GPU preset itself, its encoder and batches shrunk for a CPU and every run cut to 2 steps.
    settings = yaml.safe_load((ROOT / "study" / "configs" / "confirm_fashion_mnist_gpu.yaml").read_text())
    assert settings["tuning_seed"] not in settings["seeds"] and settings["time_budget_minutes"] > 0
    small = ["train.global_batch_size=16", "train.mixed_precision=no", "train.eval_batch_size=256"]
    settings |= {"output_dir": str(tmp_path / "runs" / "confirm"), "publish_dir": str(tmp_path / "published"),
                 "encoder": ["model.embed_dim=16", "model.num_heads=2", "model.depth=1"],
                 "mpp": [*settings["mpp"], *small], "finetune": [*settings["finetune"], *small],
                 "max_steps": 2, "timing_steps": 2, "time_budget_minutes": 60, "seeds": settings["seeds"][:1],
                 "arms": [arm for arm in settings["arms"] if not arm.get("exploratory")]}  # the fewest runs
    preset = tmp_path / "confirm.yaml"
    preset.write_text(yaml.safe_dump(settings))
    command = ["study.confirmatory", "--config", str(preset)]  # the test and its runs in this process
    result = run_module_here(*command, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "timed over 2 steps" in result.stderr and "1 of the 1 seeds not yet recorded fit" in result.stderr
    assert "the tuning seed first" in result.stderr
    results = json.loads((tmp_path / "published" / "results.json").read_text())
    arms = [arm["name"] for arm in settings["arms"]]
    assert sorted(results["tuned_rates"]) == sorted(arms)  # chosen once, on the tuning seed, from the grid
    assert all(rate in (0.03, 0.1, 0.3) for rate in results["tuned_rates"].values())
    for seed in map(str, settings["seeds"]):  # every test seed trained each arm at the rate its tuning chose
        assert {arm: results["per_seed"][seed][arm]["lr"] for arm in arms} == results["tuned_rates"]
    assert results["primary"]["seeds"] == settings["seeds"]

    # On a later machine, too little time for the seed left: the rates are not chosen again and nothing runs.
    settings |= {"seeds": [*settings["seeds"], 99], "time_budget_minutes": 0.01}
    preset.write_text(yaml.safe_dump(settings))
    result = run_module_here(*command, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "0 of the 1 seeds not yet recorded fit" in result.stderr and "tuning seed first" not in result.stderr
    assert list(json.loads((tmp_path / "published" / "results.json").read_text())["per_seed"]) == \
        [str(seed) for seed in settings["seeds"][:1]]


def test_a_registered_seed_added_after_a_reading_withdraws_it_until_that_seed_is_in_too(tmp_path):
    results = {"per_seed": records([0.03, 0.02, 0.04, 0.01, 0.02]), "classes": 10, "majority_class_accuracy": 0.1,
               "wall_seconds": 60.0}
    assert "**Primary test**" in publish(tiny_config(tmp_path, seeds=[1, 2, 3, 4, 5]), results) and "primary" in results
    table = publish(tiny_config(tmp_path, seeds=[1, 2, 3, 4, 5, 6]), results)
    assert "primary" not in results and "secondary" not in results and "Seeds recorded: 5 of 6" in table
    assert json.loads((tmp_path / "confirm" / "results.json").read_text()).keys() == results.keys()


SEALED = {  # the tiny test sealed, tuned on its own seed among two rates and one set of regularisers, with pixels
    "sealed": True, "pixels": ["data.shots_per_class=4"],
    "tuning": {"seed": 50, "rates": [0.03, 0.1], "holdout_fraction": 0.2,
               "regularisers": [{"name": "smoothing", "overrides": ["classifier.label_smoothing=0.1"]}]},
    "arms": [{**ARMS[0], "regularised": True}, {**ARMS[1], "regularised": True}],
}


def test_the_tuning_trains_each_arm_at_each_candidate_on_its_own_seed_and_scores_it_on_a_held_out_slice(tmp_path):
    cfg = tiny_config(tmp_path, **{**SEALED, "arms": [*SEALED["arms"], {**ARMS[1], "name": "mpp-paper"}]},
                      seeds=[0, 1])
    runs = {run.name: run for run in plan_tuning(cfg, {})}
    assert sorted(runs) == sorted([
        "pretrain/mpp-seed50", *(f"tuning/{arm}-{candidate}-seed50" for arm in ("scratch", "mpp") for candidate in
                                 ("smoothing-lr0.03", "smoothing-lr0.1")),
        "tuning/mpp-paper-paper-lr0.03-seed50", "tuning/mpp-paper-paper-lr0.1-seed50"])
    scratch = runs["tuning/scratch-smoothing-lr0.1-seed50"].command
    assert {"classifier.label_smoothing=0.1", "train.lr=0.1", "data.holdout_fraction=0.2",
            "finetune.scored_split=holdout", "data.subset_seed=50", "seed=50"} <= set(scratch)
    assert "classifier.label_smoothing=0.1" not in runs["tuning/mpp-paper-paper-lr0.1-seed50"].command
    assert runs["tuning/mpp-smoothing-lr0.03-seed50"].after == "pretrain/mpp-seed50"
    # The test seeds train at what the tuning chose, their predictions sealed.
    test_runs = {run.name: run for run in plan_runs(cfg, [0], {"mpp": ("train.lr=0.03",)})}
    assert "finetune.sealed=true" in test_runs["finetune/mpp-seed0"].command
    assert "train.lr=0.03" in test_runs["finetune/mpp-seed0"].command


def test_a_tuning_seed_must_not_be_a_test_seed_and_regularised_arms_need_sets(tmp_path):
    with pytest.raises(ConfigError, match="tuning.seed=1 is among the test seeds"):
        tiny_config(tmp_path, **{**SEALED, "tuning": {**SEALED["tuning"], "seed": 1}}, seeds=[0, 1])
    with pytest.raises(ConfigError, match="chooses its regularisers among tuning.regularisers"):
        tiny_config(tmp_path, **{**SEALED, "tuning": {**SEALED["tuning"], "regularisers": []}}, seeds=[0, 1])
    with pytest.raises(ConfigError, match="names arms 'mpp' and 'nobody'"):
        tiny_config(tmp_path, sequence=[{"test": "t", "better": "mpp", "worse": "nobody"}])


@pytest.mark.slow
@pytest.mark.many_runs
@pytest.mark.usefixtures("experiment_runs_here")
def test_a_sealed_test_records_training_figures_alone_until_the_last_seed_then_reads_it_once(tmp_path):
    published = tmp_path / "published"
    preset = tmp_path / "confirm.yaml"
    settings = {**TINY, **SEALED, "output_dir": str(tmp_path / "confirm"), "publish_dir": str(published)}
    preset.write_text(yaml.safe_dump({**settings, "seeds": [0, 1]}))
    command = ["study.confirmatory", "--config", str(preset)]
    claim_experiment(build_config(ConfirmatoryConfig, preset))
    blocked = tmp_path / "confirm" / "pretrain" / "mpp-seed1"  # seed 1 cannot start: seed 0 alone is recorded
    blocked.parent.mkdir(parents=True)
    blocked.write_text("in the way")
    result = run_module_here(*command, check=False)
    assert result.returncode != 0 and "runs failed: pretrain/mpp-seed1" in result.stderr, result.stderr[-3000:]
    results = json.loads((published / "results.json").read_text())
    tuning = results["tuning"]
    assert set(tuning) == {"scratch", "mpp"} and {"smoothing-lr0.03", "smoothing-lr0.1"} <= set(
        tuning["mpp"]["holdout_balanced_accuracy"])  # and the rates a grid widened to, where an end was chosen
    chosen = {arm: record["lr"] for arm, record in tuning.items()}
    seed0 = results["per_seed"]["0"]
    assert {arm: seed0[arm]["lr"] for arm in chosen} == chosen  # trained at what the tuning chose
    # Blind: no test figure anywhere the seeds' records are published, nor in the runs' logs; the predictions sealed.
    assert not {"accuracy", "balanced_accuracy"} & set(seed0["mpp"]) and "predictions_sha256" in seed0["mpp"]
    assert "primary" not in results and "Balanced accuracy" not in (published / "results.md").read_text()
    log = (tmp_path / "confirm" / "finetune" / "mpp-seed0" / "log.txt").read_text()
    assert "test_accuracy" not in log and "predicted and sealed" in log
    sealed = json.loads((published / "sealed-predictions.json").read_text())
    assert list(sealed["predictions"]) == ["0"] and len(sealed["predictions"]["0"]["mpp"]) == len(
        sealed["split"]["labels"])

    blocked.unlink()  # continued: the tuning is not run again; seed 1, the pixels, then the one reading
    result = run_module_here(*command, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tuning/" not in result.stderr.split("runs, ")[0]  # the first execute is the seeds', not the tuning's
    results = json.loads((published / "results.json").read_text())
    assert results["primary"]["seeds"] == [0, 1] and results["tuning"] == tuning
    mpp = results["per_seed"]["1"]["mpp"]
    assert len(mpp["per_class_accuracy"]) == 10 and 0 <= mpp["balanced_accuracy"] <= 1
    assert set(results["pixels"]["1"]) == {"logistic_regression", "knn"}
    table = (published / "results.md").read_text()
    assert "raw pixels, logistic regression" in table and "Per category" in table and "Tuning on seed 50" in table

    # A sealed prediction changed after its seed was recorded is refused at the reading.
    text = (published / "sealed-predictions.json").read_text()
    changed = json.loads(text)
    changed["predictions"]["0"]["mpp"][0] = (changed["predictions"]["0"]["mpp"][0] + 1) % 10
    (published / "sealed-predictions.json").write_text(json.dumps(changed))
    result = run_module_here(*command, "tables_only=true", check=False)
    assert result.returncode != 0 and "SHA-256 differs" in result.stderr
    (published / "sealed-predictions.json").write_text(text)
    # A sealed test is read with the seeds it registered, never fewer.
    result = run_module_here(*command, "tables_only=true", "seeds=[0]", check=False)
    assert result.returncode != 0 and "this sealed test registered seeds [0, 1]" in result.stderr


def test_a_choice_at_an_end_of_the_grid_widens_it_by_a_rate_on_that_side_until_it_lies_inside(tmp_path):
    cfg = tiny_config(tmp_path, **SEALED, seeds=[0, 1])
    scratch = next(arm for arm in cfg.arms if arm.name == "scratch")
    tuning: dict = {}

    def finish(rate: str, score: float) -> None:
        run = next(run for run in plan_tuning(cfg, tuning) if run.name.endswith(f"-lr{rate}-seed50")
                   and run.name.startswith("tuning/scratch-"))
        run.directory(tmp_path).mkdir(parents=True)
        (run.directory(tmp_path) / "metrics.json").write_text(json.dumps({"holdout_balanced_accuracy": score}))
        record_tuning(cfg, tuning, run, tmp_path)

    finish("0.03", 0.30)
    assert "chosen" not in tuning["scratch"]  # 0.1 has not run
    finish("0.1", 0.40)  # the highest rate chosen: 0.3 is tried too
    assert tuning["scratch"]["rates"] == [0.03, 0.1, 0.3] and "chosen" not in tuning["scratch"]
    assert sorted(candidates(cfg, scratch, tuning)) == ["smoothing-lr0.03", "smoothing-lr0.1", "smoothing-lr0.3"]
    finish("0.3", 0.35)  # inside now: 0.1 chosen
    assert tuning["scratch"] | {"holdout_balanced_accuracy": None} == {
        "holdout_balanced_accuracy": None, "rates": [0.03, 0.1, 0.3], "chosen": "smoothing-lr0.1",
        "overrides": ["classifier.label_smoothing=0.1", "train.lr=0.1"], "lr": 0.1, "grid_edge": None}


@pytest.mark.slow
@pytest.mark.many_runs
@pytest.mark.usefixtures("experiment_runs_here")
def test_the_regularised_gpu_test_dry_run_tunes_then_runs_the_seeds_that_fit_sealed(tmp_path):
    # The GPU counterpart's preset itself, on the shapes data with a one-block encoder, every run cut to 2 steps, and
    # its tuning to the last set of regularisers, whose overrides hold every key of the others (a third of the runs).
    settings = yaml.safe_load((ROOT / "study" / "configs" / "confirm_openclipart_regularised_gpu.yaml").read_text())
    assert settings["tuning"]["seed"] not in settings["seeds"] and settings["sealed"]
    *others, last = [{override.split("=", 1)[0] for override in regularisers["overrides"]}
                     for regularisers in settings["tuning"]["regularisers"]]
    assert others and all(keys <= last for keys in others)
    settings["tuning"]["regularisers"] = settings["tuning"]["regularisers"][-1:]
    small = ["train.global_batch_size=16", "train.mixed_precision=no", "train.eval_batch_size=256"]
    settings |= {"output_dir": str(tmp_path / "runs" / "confirm"), "publish_dir": str(tmp_path / "published"),
                 "encoder": ["model.img_size=16", "model.patch_size=4", "model.embed_dim=16", "model.num_heads=2",
                             "model.depth=1"],
                 "data": ["data.source=shapes", "data.shots_per_class=4"], "pixels": ["data.shots_per_class=4"],
                 "mpp": [*settings["mpp"], "data.source=shapes", *small], "finetune": [*settings["finetune"], *small],
                 "max_steps": 2, "timing_steps": 2, "seeds": settings["seeds"][:2]}
    preset = tmp_path / "confirm.yaml"
    preset.write_text(yaml.safe_dump({**settings, "time_budget_minutes": 600}))
    result = run_module_here("study.confirmatory", "--config", str(preset), check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "runs of the tuning left fit in the" in result.stderr
    assert "2 of the 2 seeds not yet recorded fit" in result.stderr
    results = json.loads((tmp_path / "published" / "results.json").read_text())
    arms = [arm["name"] for arm in settings["arms"]]
    assert all("chosen" in results["tuning"][arm] for arm in arms) and results["primary"]["seeds"] == [101, 102]
    for arm in arms:  # every test seed trained each arm at what its tuning chose
        assert results["per_seed"]["101"][arm]["lr"] == results["tuning"][arm]["lr"]
    assert set(results["pixels"]["102"]) == {"logistic_regression", "knn"}


def test_a_lent_machine_runs_the_tuning_that_fits_each_piece_whole_and_no_seed_before_it_is_all_chosen(tmp_path):
    cfg = tiny_config(tmp_path, **SEALED, seeds=[0, 1])  # two arms, two candidates each: scratch and mpp
    minutes = {"pretrain/mpp": 4.0, "scratch": 3.0, "mpp": 1.0}  # a run's minutes; two at a time
    # The pre-training with mpp's two candidates is one piece, the candidates after it: 4 + (1 + 1) / 2 = 5 minutes;
    # a scratch run 1.5.
    assert tuning_that_fits(cfg, {}, minutes, 10.0) == ({"pretrained": True, "from_scratch": 2, "whole": True}, 8.0)
    assert tuning_that_fits(cfg, {}, minutes, 6.6) == ({"pretrained": True, "from_scratch": 1, "whole": False}, 6.5)
    assert tuning_that_fits(cfg, {}, minutes, 4.6) == ({"pretrained": False, "from_scratch": 2, "whole": False}, 3.0)
    runs = plan_tuning(cfg, {}, pretrained=False, from_scratch=1)
    assert [run.name for run in runs] == ["tuning/scratch-smoothing-lr0.03-seed50"]
    # What a machine recorded is not run again: mpp's candidates done, the piece left is scratch's second.
    done = {"mpp": {"holdout_balanced_accuracy": {"smoothing-lr0.03": 0.3, "smoothing-lr0.1": 0.4}},
            "scratch": {"holdout_balanced_accuracy": {"smoothing-lr0.03": 0.3}}}
    assert tuning_that_fits(cfg, done, minutes, 1.5) == ({"pretrained": True, "from_scratch": 1, "whole": True}, 1.5)
    assert [run.name for run in plan_tuning(cfg, done)] == ["tuning/scratch-smoothing-lr0.1-seed50"]


def test_tuning_runs_finished_in_a_folder_but_never_recorded_are_recorded_and_the_choice_made(tmp_path):
    cfg = tiny_config(tmp_path, **SEALED, seeds=[0, 1])
    for run in plan_tuning(cfg, {}):
        if run.name.startswith("tuning/"):
            run.directory(tmp_path).mkdir(parents=True)
            score = 0.5 if run.name.endswith("lr0.03-seed50") else 0.4
            (run.directory(tmp_path) / "metrics.json").write_text(json.dumps({"holdout_balanced_accuracy": score}))
    tuning = record_finished_tuning(cfg, {}, tmp_path)
    # 0.03 chosen by both, the lowest rate: each grid widened to 0.01, whose runs have not run
    assert {arm: record["rates"] for arm, record in tuning.items()} == {"scratch": [0.01, 0.03, 0.1],
                                                                       "mpp": [0.01, 0.03, 0.1]}
    assert [run.name for run in plan_tuning(cfg, tuning)] == [
        "pretrain/mpp-seed50", "tuning/mpp-smoothing-lr0.01-seed50", "tuning/scratch-smoothing-lr0.01-seed50"]
