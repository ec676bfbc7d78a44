"""The GPU acceptance command (tools/gpu.py): its whole plan at toy sizes on the CPU (--dry-run), so that a
GPU's time goes on measuring; without CUDA and without --dry-run it refuses in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from launching import ROOT
from study.cost import main as cost_main
from tools.gpu import (GRACE_S, PLAN_COSTS, REPRODUCTIONS, RESULTS_JSON, RESULTS_MARKDOWN, STAGES, dry_run_plan,
                       fitting_batch, gpu_plan, junit_outcomes, loader_cores_for, main, reproduction_figures,
                       reproduction_overrides, run, summary)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_without_cuda_it_refuses_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "tools.gpu", "--out", str(tmp_path / "out")], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and result.stderr.startswith("error: ")
    assert "--dry-run" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.many_runs
def test_the_dry_run_goes_through_every_stage_and_writes_json_and_markdown(tmp_path):
    """Every stage but the reproduction, which tests/study/test_reproduction.py runs through this command's
    reproduce stage (stopped at its time limit, continued, finished: the toy reproduction runs once in the suite);
    the dry run's own reproduction, the registered preset at toy sizes, is costed below."""
    out = tmp_path / "out"
    stages = [name for name in STAGES if name != "reproduce"]
    # Each stage ends by its own time limit, so the test waits for them all: a shorter wait of its own would fail a
    # dry run slowed by the tests running beside it.
    limits_s = sum(dry_run_plan().limits_s[name] for name in stages) + GRACE_S * len(stages)
    result = subprocess.run([sys.executable, "-m", "tools.gpu", "--dry-run", "--out", str(out), "--stages", *stages],
                            cwd=ROOT, capture_output=True, text=True, timeout=limits_s + 60)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads((out / RESULTS_JSON).read_text())
    assert results["dry_run"] and results["device"] == "cpu"
    assert {name: results[name]["status"] for name in stages} == {
        "tests": "passed", "step": "passed", "run": "passed", "pretrain": "passed", "loader": "passed",
        "fsdp": "skipped", "profile": "passed"}
    assert results["tests"]["counts"]["passed"] >= 3 and results["tests"]["counts"]["failed"] == 0
    assert {"supervised", "mpp"} <= set(results["step"]["eager"]["rows"])
    run_figures = results["run"]  # against the step the run stage measures itself, at the step stage's batch
    assert run_figures["batch_size"] == results["step"]["eager"]["batch_size"]
    assert run_figures["step_images_per_second"] > 0
    sizes = {"2-step epochs": 16, "4-step epochs": 32}
    for size, images in sizes.items():
        epochs = run_figures[size]
        assert epochs["images"] == images and epochs["images_per_second"] > 0 and 0 <= epochs["data_wait_share"] < 1
        # Both speeds are written to 0.1 image/s and the share to 0.001, so the share read back from the written
        # speeds can differ from the written share by up to this much.
        ratio = epochs["images_per_second"] / run_figures["step_images_per_second"]
        rounding = ratio * (0.05 / epochs["images_per_second"] + 0.05 / run_figures["step_images_per_second"])
        assert epochs["of_step"] == pytest.approx(ratio, abs=rounding + 5e-4 + 1e-9)
    assert run_figures["goal_met"] == all(run_figures[size]["of_step"] >= 0.9 for size in sizes)
    pretrain = results["pretrain"]
    assert 0 < pretrain["stopped_at_step"] < pretrain["resumed_to_step"] and pretrain["export_max_difference"] < 1e-4
    assert pretrain["resumed_images_per_second"] > 0 and 0 <= pretrain["resumed_data_wait_share"] < 1
    loader = results["loader"]
    assert loader["rows"] and loader["step_images_per_second"] == results["step"]["eager"]["rows"]["mpp"][
        "images_per_second"] and "loader_cores_per_gpu" in loader
    assert {row: results["profile"][row]["batch_size"] for row in ("supervised", "mpp")} == {"supervised": 8, "mpp": 8}
    table = (out / RESULTS_MARKDOWN).read_text()
    assert all(f"| {name} |" in table for name in stages) and "| reproduce |" not in table


def test_the_dry_runs_reproduction_is_the_registered_comparison_at_toy_sizes(tmp_path, capsys):
    """The plan the dry run's reproduce stage costs first: the pre-registered all-label comparison with the dry run's
    toy overrides, counted by hand. 2 seeds; MPP 4 steps of 8; each seed's fine-tuning sweeps 2 rates, then trains at
    the chosen one, MPP's encoder 4 steps of 8, the ViT from scratch 6."""
    plan, table = dry_run_plan(), tmp_path / "cost.json"
    plan = replace(plan, fashion_mnist=tmp_path)
    cost_main(["--config", str(ROOT / plan.reproductions[0]), "--json", str(table),
               *reproduction_overrides(plan, tmp_path / "reproduction")])
    cost = json.loads(table.read_text())
    assert {stage["stage"]: (stage["trainings"], stage["images"]) for stage in cost["stages"]} == {
        # tune_once: the first seed sweeps two rates and trains at the better, the second trains at it
        "pre-training (MPP)": (2, 2 * 4 * 8), "fine-tuning": (3 + 1, (3 + 1) * 4 * 8),
        "from scratch": (3 + 1, (3 + 1) * 6 * 8)}
    assert cost["seeds"] == 2 and cost["images"] == 64 + 128 + 192 and cost["h100_time"] == "no measured step"
    assert "| from scratch | 4 | 6 x 8 | 192 | no measured step |" in capsys.readouterr().out
    stage = {"status": "stopped", "why": "stopped", PLAN_COSTS: {"reproduce_fashion_mnist_all_labels_gpu": cost}}
    assert "reproduce_fashion_mnist_all_labels_gpu's plan: 384 training images over 2 seeds" in summary(
        "reproduce", stage)


def test_the_reproduce_stage_runs_the_preregistered_all_label_comparison_first_on_the_gpu_and_in_the_dry_run():
    assert gpu_plan().reproductions == REPRODUCTIONS and dry_run_plan().reproductions == REPRODUCTIONS[:1]
    first = (ROOT / REPRODUCTIONS[0]).read_text()
    assert "data.shots_per_class=0" in first  # every label
    assert first.startswith("# The pre-registered primary family's all-label comparison (results/preregistration.md)")


def test_a_reproductions_figures_give_each_rows_fine_tuned_accuracy_and_each_claims_difference():
    published = json.loads((ROOT / "results" / "reproduce-fashion-mnist-all-labels-cpu" / "results.json").read_text())
    figures = reproduction_figures(published, "reproduce_fashion_mnist_all_labels_gpu")  # as the stage names it
    assert figures["seeds"] == 3 and figures["measure"] == "balanced accuracy"
    assert figures["fine_tuned"] == {"from scratch": "80.8 ± 1.2", "MPP, 3-bit mean colour, 50%": "81.2 ± 0.7"}
    (claim, cell), = figures["claims"].items()
    assert claim == "MPP pre-training beats training from scratch" and cell.startswith("+0.4 [")


def test_the_reproduce_stages_summary_gives_each_plans_cost_beside_the_experiments():
    stage = {"status": "stopped", "why": "time limit",
             PLAN_COSTS: {"first": {"images": 544, "seeds": 2, "h100_time": "no measured step"},
                          "second": {"images": 1_234_567, "seeds": 46, "h100_time": "2.5 h"}},
             "first": {"runs": 30, "finished": 12}}
    assert summary("reproduce", stage).split("<br>") == [
        "time limit", "first's plan: 544 training images over 2 seeds, one H100: no measured step",
        "second's plan: 1,234,567 training images over 46 seeds, one H100: 2.5 h", "first: 12 of 30 runs finished"]


def test_test_outcomes_tell_cpu_only_tests_from_other_skips_and_failures(tmp_path):
    report = tmp_path / "report.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.a" name="ok"/>'
        '<testcase classname="tests.a" name="gloo">'
        '<skipped message="CPU-only by design: two gloo processes"/></testcase>'
        '<testcase classname="tests.a" name="cuda">'
        '<skipped message="the refusal is for machines without CUDA"/></testcase>'
        '<testcase classname="tests.a" name="bad"><failure message="assert 1 == 2"/></testcase>'
        '<testcase classname="tests.a" name="broken"><error message="fixture"/></testcase>'
        "</testsuite></testsuites>")
    outcomes = junit_outcomes(report)
    assert outcomes["passed"] == ["tests.a::ok"]
    assert outcomes["cpu_only"] == ["tests.a::gloo: CPU-only by design: two gloo processes"]
    assert outcomes["skipped"] == ["tests.a::cuda: the refusal is for machines without CUDA"]
    assert outcomes["failed"] == ["tests.a::bad", "tests.a::broken"]


def test_a_stage_finds_the_packages_carried_on_the_callers_python_path_after_the_checkout(tmp_path, monkeypatch):
    # A GPU machine without a package index gets datasets as wheels installed with --target, on PYTHONPATH.
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    plan = dry_run_plan()
    outcome = run(plan, [sys.executable, "-c", "import os; print(os.environ['PYTHONPATH'])"], tmp_path / "log", 60)
    assert outcome.returncode == 0
    assert outcome.output.strip().split(os.pathsep) == [str(ROOT), str(tmp_path / "site")]


@pytest.mark.slow
def test_at_its_time_limit_a_stage_is_interrupted_first_so_that_pytest_still_writes_its_report(tmp_path):
    tests = tmp_path / "test_waits.py"
    tests.write_text("import time\n\ndef test_quick():\n    pass\n\ndef test_waits():\n    time.sleep(60)\n")
    report = tmp_path / "report.xml"
    plan = dry_run_plan()
    # As under `nohup ... &` (CI, a GPU's batch command): SIGINT ignored, and the stage would inherit that.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        outcome = run(plan, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                             f"--junitxml={report}", str(tests)], tmp_path / "log", 15)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert outcome.returncode is None  # stopped at the limit
    assert any(name.endswith("test_quick") for name in junit_outcomes(report)["passed"])


def test_a_stage_takes_the_time_limit_given_and_a_wrong_limit_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "out"
    for wrong in ("loader=ten", "nowhere=5", "loader"):
        with pytest.raises(SystemExit) as refused:
            main(["--dry-run", "--out", str(out), "--limit", wrong])
        assert refused.value.code == 2 and "--limit takes STAGE=SECONDS" in capsys.readouterr().err
    assert not out.exists()
    assert main(["--dry-run", "--out", str(out), "--stages", "loader", "--limit",
                 "loader=1"]) == 1  # the loader benchmark needs longer than a second
    loader = json.loads((out / RESULTS_JSON).read_text())["loader"]
    assert loader["status"] == "failed" and loader["seconds"] < 1 + 15 + 5  # the limit, the grace, the start


def test_the_loader_cores_a_gpu_needs_are_the_fewest_measured_to_keep_up_with_its_step():
    # As measured on an H200 (16 cores): per core, 8 workers load less than 1 does.
    rows = [{"path": "prepared", "workers": workers, "images_per_second": rate}
            for workers, rate in ((0, 913), (1, 801), (2, 1590), (4, 2802), (8, 4381), (16, 6915))]
    rows.append({"path": "gpu-decode", "workers": 0, "images_per_second": 4193})  # not the CPU loader
    assert loader_cores_for(3425, rows) == 8
    assert loader_cores_for(900, rows) == 1
    assert loader_cores_for(8000, rows) is None


def test_the_stages_batch_is_the_one_given_else_the_step_stages_else_the_plans_smallest(tmp_path):
    plan = replace(dry_run_plan(), batches=(64, 32))
    assert fitting_batch(tmp_path, plan) == 32
    (tmp_path / RESULTS_JSON).write_text(json.dumps({"step": {plan.step_modes[-1]: {"batch_size": 64}}}))
    assert fitting_batch(tmp_path, plan) == 64
    assert fitting_batch(tmp_path, replace(plan, batch=16)) == 16


@pytest.mark.slow
def test_a_batch_given_reaches_the_stages_without_the_step_stage(tmp_path):
    # On a GPU whose step stage ran in an earlier session: the profile at the batch it fitted, not the plan's smallest.
    out = tmp_path / "out"
    assert main(["--dry-run", "--out", str(out), "--stages", "profile", "--batch", "4"]) == 0
    profile = json.loads((out / RESULTS_JSON).read_text())["profile"]
    assert {row: profile[row]["batch_size"] for row in ("supervised", "mpp")} == {"supervised": 4, "mpp": 4}


def test_without_fashion_mnist_the_reproduce_stage_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as refused:
        main(["--dry-run", "--out", str(out), "--stages", "reproduce", "--fashion-mnist", str(tmp_path / "nowhere")])
    error = capsys.readouterr().err
    assert refused.value.code == 2 and f"--fashion-mnist {tmp_path / 'nowhere'}" in error
    assert "train-images-idx3-ubyte" in error and "apt-get install dataset-fashion-mnist" in error
    assert not out.exists()
