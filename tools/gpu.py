"""``python -m tools.gpu --out <dir>``: everything a GPU must show, in one command (docs/performance.md, "The
GPU acceptance run").

Stages, each a subprocess with its own time limit (together at most 34 minutes, so a command of ten runs a few of
them), its output in ``<dir>/<stage>.log``:

- ``tests``: the test suite with ``MPP_TEST_DEVICE=cuda`` (tests/devices.py): which pass, which are CPU-only by
  design, which fail;
- ``step``: ``python -m mpp.benchmark`` on ViT-B/16 at 224 px in bf16, eager and compiled, at the largest batch up
  to 256 that fits: images/s, peak memory and model FLOPs utilisation of supervised, MPP and (when installed)
  vit-pytorch's MPP, interleaved;
- ``run``: ``python -m mpp.benchmark.training_run`` with the ViT-B/16 preset (bf16, compiled, the package's loader
  workers) on prepared images of 8-step epochs (2,048 at batch 256) and of 50-step epochs, against its step alone:
  the run's images/s as a share of the step's (the goal: 0.90 or more), and its share of time waiting for data;
- ``pretrain``: ImageNet-like JPEGs written on the spot, ``python -m mpp.data.prepare``, then the ViT-B/16 MPP preset
  on them (bf16, compiled) for a few minutes, stopped by SIGTERM, resumed with ``--resume``, its export loaded by timm
  and transformers;
- ``loader``: ``python -m mpp.benchmark.loader_speed`` on the machine's cores beside the step's images/s: how many
  loader cores one GPU needs;
- ``fsdp``: accelerate's FSDP, one process on the GPU: a short run, its checkpoint, ``--resume``, the export;
- ``profile``: where the step's time goes, supervised and MPP, by ``python -m mpp.benchmark.step_profile``;
- ``reproduce``: the Fashion-MNIST reproductions at a GPU's scale (``python -m study.reproduce``: the pre-registered
  family's all-label comparison first, then 100 labels per class), read from ``--fashion-mnist``, each plan's cost
  (``python -m study.cost``) recorded before they run; stopped at its time limit, the stage run again
  continues them.

It writes ``<dir>/gpu_acceptance.json`` and ``<dir>/gpu_acceptance.md``; ``--stages`` runs some of them, adding to
what ``<dir>`` holds, so that the plan splits over several commands where each may run only so long. Without CUDA it
refuses in one line; ``--dry-run`` runs the same plan at toy sizes on the CPU (tested in CI), so that a GPU's time
goes on measuring. A GPU machine without network access may lack ``datasets`` (for ``mpp.data.prepare`` and ``hf:``
data) and vit-pytorch: carry their wheels (docs/performance.md, "The GPU acceptance run").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import torch

from mpp.data.fashion_mnist import DEFAULT_DIR as FASHION_MNIST_DIR
from mpp.data.fashion_mnist import FILES as FASHION_MNIST_FILES
from mpp.data.fashion_mnist import find_file
from mpp.errors import DataError
from mpp.experiments.publishing import measured_cell, percent
from mpp.training.checkpoint import list_checkpoints, read_step
from study.reproduction_tables import claim_comparisons, headline, measures_read

CHECKOUT = Path(__file__).resolve().parents[1]  # the repository this tool is part of: its tests and recipes run
RESULTS_JSON, RESULTS_MARKDOWN = "gpu_acceptance.json", "gpu_acceptance.md"
GRACE_S = 15  # from the interrupt at a stage's time limit to the kill
RUN_GOAL = 0.90  # a whole run's images/s against its step's, on a GPU with its loader workers
NO_MONITORS = ["monitor.few_shot_every=0", "monitor.mosaic_every=0", "monitor.final_few_shot_draws=0"]


# The pre-registered family's all-label comparison first: the primary protocol, and the cheaper of the two.
REPRODUCTIONS = ("study/configs/reproduce_fashion_mnist_all_labels_gpu.yaml",
                 "study/configs/reproduce_fashion_mnist_gpu.yaml")
PLAN_COSTS = "plan_costs"  # the reproduce stage's key for each reproduction's cost, beside its figures
TOY_REPRODUCTION = (  # the first reproduction's grid at toy size: every stage of it runs a few steps of a tiny ViT
    # The rate chosen on the first seed only: the toy checks the pipeline, not the rate each seed would choose.
    "seeds=[0,1]", "parallel_runs=2", "tune_once=true", "encoder=[model.embed_dim=16,model.num_heads=2,model.depth=1]",
    "pretraining=[train.steps=4,train.global_batch_size=8,train.warmup_steps=1,train.log_every=2,"
    "train.checkpoint_every=4,train.mixed_precision=bf16,monitor.few_shot_every=2]",
    # 100 labels a class (the fewest whose validation slice, 20%, holds the 200 images a rate is chosen on), not
    # every label: each frozen fit would read all 60,000 training images' features, most of the toy's time.
    "finetune=[data.shots_per_class=100,finetune.sweep_holdout_fraction=0.2,'finetune.sweep_lrs=[0.03,0.1]',"
    "train.steps=4,train.global_batch_size=8,train.eval_batch_size=256,"
    "train.warmup_steps=1,train.log_every=2,train.checkpoint_every=4,train.mixed_precision=bf16]",
    "scratch_finetune=[train.steps=6,train.warmup_steps=1,train.log_every=3,train.checkpoint_every=6]",
    "linear_probe=[linear_probe.max_iterations=5]",
    "chance_margin=0")  # a few steps need not leave chance behind; the GPU's rows are held to the preset's margin


@dataclass(frozen=True)
class Plan:
    """What each stage runs: the GPU's sizes, or toy sizes on the CPU (``--dry-run``)."""

    dry_run: bool
    preset: str
    precision: str
    batches: tuple[int, ...]  # tried largest first, until one fits
    step_modes: tuple[str, ...]  # eager, compiled
    step_args: tuple[str, ...]
    profile_args: tuple[str, ...]
    jpegs: int
    short_side: int
    pretrain: tuple[str, ...]  # overrides of the preset for the short runs
    stop_after_s: float  # SIGTERM to the pre-training run once it has trained this long
    loader_args: tuple[str, ...]
    run_args: tuple[str, ...]
    tests: tuple[str, ...]
    reproductions: tuple[str, ...]  # reproduce presets, run in turn
    reproduce_args: tuple[str, ...]  # overrides of every reproduction
    limits_s: dict[str, int] = field(default_factory=dict)
    fashion_mnist: Path = FASHION_MNIST_DIR  # --fashion-mnist: the four IDX files the reproductions read
    batch: int | None = None  # --batch: the stages' batch, where the step stage is not to choose it
    checkout: Path = CHECKOUT  # the repository's root: every stage runs there


def gpu_plan() -> Plan:
    cores = len(os.sched_getaffinity(0))
    workers = sorted({0, 1, 2, 4, 8, cores})
    return Plan(dry_run=False, preset="recipes/configs/mpp_vit_b16_paper.yaml", precision="bf16",
                batches=(256, 192, 128, 96, 64, 32), step_modes=("eager", "compiled"),
                step_args=("--steps", "10", "--repeats", "5", "--warmup", "3"),
                profile_args=("--steps", "5", "--warmup", "3"), jpegs=2048, short_side=256,
                pretrain=("train.compile=true", "train.log_every=20", "train.warmup_steps=100"),
                stop_after_s=30, loader_args=("--workers", *map(str, workers), "--imagenet-images", "512",
                                          "--seconds", "2", "--rounds", "2", "--paths", "prepared", "gpu-decode"),
                run_args=("--compile", "--epoch-steps", "8", "50", "--steps", "150", "--repeats", "1"),
                # The fast lane (the whole suite is CPU-bound recipe launches) over 8 of the cores: in one process it
                # ran 572 tests in 150 s on an H200's machine.
                tests=("-n", "8", "--dist", "loadgroup", "-m", "not slow", "tests"),
                reproductions=REPRODUCTIONS, reproduce_args=(),
                limits_s={"tests": 180, "step": 300, "run": 360, "pretrain": 240, "loader": 120, "fsdp": 120,
                          "profile": 150, "reproduce": 540})


def dry_run_plan() -> Plan:
    tiny = ("model.img_size=32", "model.patch_size=8", "model.embed_dim=32", "model.depth=2", "model.num_heads=2",
            "data.mean=[0.5,0.5,0.5]", "data.std=[0.25,0.25,0.25]", "train.log_every=2", "train.warmup_steps=2",
            "data.num_workers=1",  # as on a GPU: the SIGTERM to the process group reaches a loader worker too
            *NO_MONITORS)
    return Plan(dry_run=True, preset="recipes/configs/mpp_tiny_cpu.yaml", precision="fp32", batches=(8,),
                step_modes=("eager",),  # compiling for the CPU costs minutes; tests/recipes/test_recipe_mpp.py compiles
                step_args=("--steps", "1", "--repeats", "1", "--warmup", "1"),
                profile_args=("--steps", "1", "--warmup", "1"), jpegs=16, short_side=40,
                pretrain=tiny, stop_after_s=3,
                loader_args=("--workers", "0", "--seconds", "0.2", "--imagenet-images", "8", "--rounds", "1"),
                run_args=("--epoch-steps", "2", "4", "--steps", "6", "--repeats", "1"),
                # A few fast tests over two workers, as the GPU's lane runs: a launching test would run again what
                # CI's slow lane runs.
                tests=("-n", "2", "--dist", "loadgroup", "tests/training/test_schedule.py",
                       "tests/training/test_checkpoint.py", "-k", "schedule or keep_the_newest"),
                reproductions=REPRODUCTIONS[:1], reproduce_args=TOY_REPRODUCTION,
                # The toy reproduction's 34 runs are each a process's start, mostly: 558 s on two busy cores.
                limits_s={"tests": 300, "step": 300, "run": 300, "pretrain": 300, "loader": 300, "fsdp": 60,
                          "profile": 120, "reproduce": 900})


@dataclass
class Outcome:
    returncode: int | None  # None: stopped at the time limit
    output: str


def in_checkout(plan: Plan, command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """``command`` started in the checkout, on its own code (which an installed package may predate), the caller's
    ``PYTHONPATH`` after it: packages carried to a machine without an index sit there (``pip install --target``)."""
    python_path = os.pathsep.join(filter(None, [str(plan.checkout), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen(command, cwd=plan.checkout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": python_path, **(env or {})}, start_new_session=True,
                            preexec_fn=interruptible)


def interruptible() -> None:
    """In the stage's process before it starts: SIGINT back to its default, so that the interrupt at the time limit
    reaches it. A command started in the background (``nohup ... &``) ignores SIGINT, and its children inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run(plan: Plan, command: list[str], log: Path, limit_s: float, env: dict[str, str] | None = None) -> Outcome:
    """``command`` in the checkout, its output appended to ``log``; interrupted (its whole process group) at
    ``limit_s``, and killed if it has not ended ``GRACE_S`` later. The interrupt first: pytest then still writes
    the report of the tests it ran."""
    process = in_checkout(plan, command, env)
    try:
        output, _ = process.communicate(timeout=limit_s)
        returncode: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)
        try:
            output, _ = process.communicate(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        returncode = None
    append(log, f"$ {' '.join(command)}\n{output}\n[exit {returncode}]\n")
    return Outcome(returncode, output)


def append(log: Path, text: str) -> None:
    with log.open("a") as file:
        file.write(text)


def accelerate(plan: Plan, *args: str, fsdp: bool = False) -> list[str]:
    command = [sys.executable, "-m", "accelerate.commands.launch", "-q", "--num_processes", "1", "--num_machines",
               "1", "--mixed_precision", "no" if plan.dry_run else "bf16", "--dynamo_backend", "no"]
    if fsdp:
        command += ["--use_fsdp", "--fsdp_version", "2"]
    return [*command, "recipes/mpp.py", "--config", plan.preset, *args]


def failed(why: str, **figures: Any) -> dict[str, Any]:
    return {"status": "failed", "why": why, **figures}


# --- the stages: each returns its figures and "status" (passed, failed or skipped) -------------------------------

def tests_stage(plan: Plan, out: Path, work: Path) -> dict[str, Any]:
    report = out / "tests.xml"
    outcome = run(plan, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                   *plan.tests], out / "tests.log", plan.limits_s["tests"],
                  env={"MPP_TEST_DEVICE": "cpu" if plan.dry_run else "cuda"})
    if not report.is_file():
        return failed(f"pytest wrote no report (exit {outcome.returncode}); see tests.log")
    results = junit_outcomes(report)
    return {"status": "passed" if outcome.returncode == 0 else "failed",
            "counts": {kind: len(names) for kind, names in results.items()}, "failed_tests": results["failed"],
            "cpu_only_tests": results["cpu_only"], "skipped_tests": results["skipped"],
            **({"why": "timed out"} if outcome.returncode is None else {})}


def junit_outcomes(report: Path) -> dict[str, list[str]]:
    """pytest's JUnit XML report -> the tests that passed, were skipped as CPU-only by design (with the reason),
    were skipped otherwise (with the reason), and failed."""
    results: dict[str, list[str]] = {"passed": [], "cpu_only": [], "skipped": [], "failed": []}
    for case in ElementTree.parse(report).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            results["failed"].append(name)
        elif skipped is not None:
            reason = skipped.get("message") or ""
            results["cpu_only" if "CPU-only by design" in reason else "skipped"].append(f"{name}: {reason}")
        else:
            results["passed"].append(name)
    return results


def step_stage(plan: Plan, out: Path, work: Path) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    deadline = time.monotonic() + plan.limits_s["step"]
    for mode in plan.step_modes:
        for batch in plan.batches:
            table = work / f"step-{mode}-{batch}.json"
            outcome = run(plan, [sys.executable, "-m", "mpp.benchmark", "--config", plan.preset, "--precision",
                           plan.precision, "--batch", str(batch), *plan.step_args, "--json", str(table),
                           *(["--compile"] if mode == "compiled" else [])],
                          out / "step.log", max(1.0, deadline - time.monotonic()))
            if outcome.returncode == 0:
                figures[mode] = json.loads(table.read_text())
                break
            if "out of memory" not in outcome.output.lower():
                return failed(f"{mode} step at batch {batch}: exit {outcome.returncode}; see step.log", **figures)
        else:
            return failed(f"{mode}: no batch of {plan.batches} fits", **figures)
    return {"status": "passed", **figures}


def run_stage(plan: Plan, out: Path, work: Path) -> dict[str, Any]:
    """The pre-training recipe against its step alone (``python -m mpp.benchmark.training_run``), as a user runs it:
    the package's loader workers, the step stage's batch."""
    table = work / "run.json"
    outcome = run(plan, [sys.executable, "-m", "mpp.benchmark.training_run", "--config", plan.preset, "--precision",
                   plan.precision, "--batch", str(fitting_batch(out, plan)), *plan.run_args, "--work",
                   str(work / "run"), "--json", str(table)], out / "run.log", plan.limits_s["run"])
    if outcome.returncode != 0:
        return failed(f"exit {outcome.returncode}; see run.log")
    measured = json.loads(table.read_text())
    step = measured["step_images_per_second"]
    runs = {f"{steps}-step epochs": {"images": figures["images"],
                                     "images_per_second": round(figures["images_per_second"], 1),
                                     "of_step": round(figures["images_per_second"] / step, 3),
                                     "data_wait_share": round(figures["data_wait_share"], 4)}
            for steps, figures in measured["runs"].items()}
    return {"status": "passed", "batch_size": measured["batch_size"], "step_images_per_second": round(step, 1),
            **runs, "goal_met": all(figures["of_step"] >= RUN_GOAL for figures in runs.values())}


def pretrain_stage(plan: Plan, out: Path, work: Path) -> dict[str, Any]:
    deadline = time.monotonic() + plan.limits_s["pretrain"]
    log = out / "pretrain.log"

    def left() -> float:
        return max(1.0, deadline - time.monotonic())

    started = time.monotonic()
    prepared = prepared_data(plan, work, log, left())
    if prepared is None:
        return failed("python -m mpp.data.prepare failed; see pretrain.log")
    figures: dict[str, Any] = {"jpegs": plan.jpegs, "prepare_seconds": round(time.monotonic() - started, 1)}
    batch = fitting_batch(out, plan)
    run_dir = work / "pretrain-run"
    args = [f"data.source=hf:{prepared}", f"data.hf_cache_dir={work / 'hf-cache'}", f"output_dir={run_dir}",
            f"train.global_batch_size={batch}", f"train.micro_batch_size={batch}", "train.checkpoint_every=1000000",
            *plan.pretrain]
    # SIGTERM to the job's process group once it has trained stop_after_s, as a scheduler sends it: the training
    # process saves a checkpoint at the next step and exits (the launcher itself ends on the signal).
    process = in_checkout(plan, accelerate(plan, *args, "train.steps=1000000"))
    if wait_for_step(run_dir / "log.txt", process, left()) is None:
        os.killpg(process.pid, signal.SIGKILL)
        append(log, process.communicate()[0])
        return failed("the pre-training run logged no step; see pretrain.log", **figures)
    time.sleep(min(plan.stop_after_s, max(0.0, deadline - time.monotonic() - 60)))
    os.killpg(process.pid, signal.SIGTERM)
    append(log, process.communicate()[0])
    checkpoints = list_checkpoints(run_dir)
    if not checkpoints:
        return failed(f"SIGTERM left no checkpoint (exit {process.returncode}); see pretrain.log", **figures)
    step = read_step(checkpoints[-1])
    figures |= {"batch_size": batch, "stopped_at_step": step, "images_per_second": last_rate(run_dir)}
    outcome = run(plan, accelerate(plan, *args, f"train.steps={step + 2 * int(log_every(plan))}", "--resume"), log,
                  left())
    metrics_file = run_dir / "metrics.json"
    if outcome.returncode != 0 or not metrics_file.is_file():
        return failed(f"--resume did not finish the run (exit {outcome.returncode})", **figures)
    resumed = json.loads(metrics_file.read_text())
    figures |= {"resumed_to_step": resumed["step"], "resumed_images_per_second": resumed["images_per_second"],
                "resumed_data_wait_share": resumed.get("data_wait_share"), **export_loads(run_dir / "export")}
    return {"status": "passed" if figures["export_max_difference"] < 1e-3 else "failed", **figures}


def prepared_data(plan: Plan, work: Path, log: Path, limit_s: float) -> Path | None:
    """``plan.jpegs`` ImageNet-like JPEGs, prepared (``python -m mpp.data.prepare``) under ``work`` once for the stages
    that train on them; None where preparing failed."""
    from mpp.benchmark.loader_speed import imagenet_like_jpeg, synthetic_jpegs, write_labelled_jpegs

    prepared = work / "prepared"
    if (prepared / "prepared.json").is_file():
        return prepared
    write_labelled_jpegs(work / "jpegs", synthetic_jpegs(plan.jpegs, imagenet_like_jpeg), classes=2)
    outcome = run(plan, [sys.executable, "-m", "mpp.data.prepare", f"folder:{work / 'jpegs'}", str(prepared),
                   "--splits", "train", "--short-side", str(plan.short_side),
                   "--shard-size", "128"], log, limit_s)  # a shard per worker: 1,000 a shard kept 2 of 16 cores busy
    return prepared if outcome.returncode == 0 else None


def fitting_batch(out: Path, plan: Plan) -> int:
    """The batch given (``--batch``), else the step stage's last mode's where it ran, else the plan's smallest."""
    results = read_results(out).get("step", {})
    return plan.batch or results.get(plan.step_modes[-1], {}).get("batch_size") or plan.batches[-1]


def log_every(plan: Plan) -> str:
    return next((arg.split("=")[1] for arg in plan.pretrain if arg.startswith("train.log_every=")), "100")


def wait_for_step(log: Path, process: subprocess.Popen, limit_s: float) -> int | None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and process.poll() is None:
        found = re.findall(r"step (\d+)/\d+", log.read_text()) if log.is_file() else []
        if found:
            return int(found[-1])
        time.sleep(0.5)
    return None


def last_rate(run_dir: Path) -> float | None:
    rates = re.findall(r"([\d.,]+) images/s", (run_dir / "log.txt").read_text())
    return float(rates[-1].replace(",", "")) if rates else None


def export_loads(export: Path) -> dict[str, Any]:
    """The export read by timm and by transformers: the same features for the same image."""
    import timm
    from transformers import AutoModel

    by_timm = timm.create_model(f"local-dir:{export}", pretrained=True).eval()
    by_transformers = AutoModel.from_pretrained(str(export)).eval()
    size = by_timm.patch_embed.img_size
    image = torch.rand(1, 3, *size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        timm_features = by_timm.forward_features(image)
        transformers_features = by_transformers(pixel_values=image).last_hidden_state
    return {"export_max_difference": (timm_features - transformers_features).abs().max().item()}


def loader_stage(plan: Plan, out: Path, work: Path) -> dict[str, Any]:
    table = work / "loader.json"
    outcome = run(plan, [sys.executable, "-m", "mpp.benchmark.loader_speed", "--only-imagenet", *plan.loader_args,
                         "--json", str(table)], out / "loader.log", plan.limits_s["loader"])
    if outcome.returncode != 0:
        return failed(f"exit {outcome.returncode}; see loader.log")
    rows = json.loads(table.read_text())["rows"]
    figures: dict[str, Any] = {"rows": rows}
    step = read_results(out).get("step", {}).get(plan.step_modes[-1], {}).get("rows", {}).get("mpp", {})
    if step:
        figures |= {"step_images_per_second": step["images_per_second"],
                    "loader_cores_per_gpu": loader_cores_for(step["images_per_second"], rows)}
    return {"status": "passed", **figures}


def loader_cores_for(images_per_second: float, rows: list[dict[str, Any]]) -> int | None:
    """The fewest cores (loader workers; the main process alone is one) whose measured loading of prepared data keeps
    up with ``images_per_second``, or None where none measured does: measured, not divided out, since a worker loads
    less the more of them share the machine."""
    return min((max(1, row["workers"]) for row in rows
                if row["path"] == "prepared" and row["images_per_second"] >= images_per_second), default=None)


def fsdp_stage(plan: Plan, out: Path, work: Path) -> dict[str, Any]:
    if plan.dry_run:  # accelerate shards with FSDP only across GPUs; the CPU refusal is tested (test_multi_process)
        return {"status": "skipped", "why": "FSDP needs a GPU; the commands are those of the GPU plan"}
    deadline = time.monotonic() + plan.limits_s["fsdp"]
    run_dir = work / "fsdp-run"
    prepared = prepared_data(plan, work, out / "fsdp.log", plan.limits_s["fsdp"])  # the pretrain stage's, if it ran
    if prepared is None:
        return failed("python -m mpp.data.prepare failed; see fsdp.log")
    args = [f"data.source=hf:{prepared}", f"data.hf_cache_dir={work / 'hf-cache'}",
            f"output_dir={run_dir}", f"train.global_batch_size={plan.batches[-1]}",
            f"train.micro_batch_size={plan.batches[-1]}", "train.checkpoint_every=10", *plan.pretrain,
            "train.compile=false"]  # FSDP's checkpoint and resume, without a second compile's minute
    first = run(plan, accelerate(plan, *args, "train.steps=10", fsdp=True), out / "fsdp.log",
                max(1.0, deadline - time.monotonic()))
    if first.returncode != 0:
        return failed(f"the FSDP run failed (exit {first.returncode}); see fsdp.log")
    resumed = run(plan, accelerate(plan, *args, "train.steps=20", "--resume", fsdp=True), out / "fsdp.log",
                  max(1.0, deadline - time.monotonic()))
    if resumed.returncode != 0:
        return failed(f"--resume of the FSDP run failed (exit {resumed.returncode}); see fsdp.log")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return {"status": "passed", "step": metrics["step"], "loss": metrics["loss"],
            **export_loads(run_dir / "export")}


def profile_stage(plan: Plan, out: Path, work: Path) -> dict[str, Any]:
    """Where the step's time goes (``python -m mpp.benchmark.step_profile``), supervised and MPP, as the step
    stage's last mode ran them."""
    deadline = time.monotonic() + plan.limits_s["profile"]
    figures: dict[str, Any] = {}
    for row in ("supervised", "mpp"):
        table = work / f"profile-{row}.json"
        outcome = run(plan, [sys.executable, "-m", "mpp.benchmark.step_profile", "--config", plan.preset, "--row", row,
                       "--batch", str(fitting_batch(out, plan)), "--precision", plan.precision, *plan.profile_args,
                       "--json", str(table), *(["--compile"] if plan.step_modes[-1] == "compiled" else [])],
                      out / "profile.log", max(1.0, deadline - time.monotonic()))
        if outcome.returncode != 0:
            return failed(f"the {row} profile: exit {outcome.returncode}; see profile.log", **figures)
        figures[row] = json.loads(table.read_text())
    return {"status": "passed", **figures}


def reproduce_stage(plan: Plan, out: Path, work: Path) -> dict[str, Any]:
    """Each reproduction's plan cost, then each reproduction in turn (``python -m study.reproduce``) on
    ``plan.fashion_mnist``: its results.md beside the results, and each row's fine-tuned accuracy and each claim's
    paired difference with its 95% interval. At the time limit the experiment under way stops (its runs save a
    checkpoint); the stage run again continues it."""
    deadline = time.monotonic() + plan.limits_s["reproduce"]
    figures: dict[str, Any] = {PLAN_COSTS: {}}
    for preset in plan.reproductions:
        name = Path(preset).stem
        table = work / f"cost-{name}.json"
        outcome = run(plan, [sys.executable, "-m", "study.cost", "--config", preset,
                             *reproduction_overrides(plan, work / name), "--json", str(table)],
                      out / "reproduce.log", max(1.0, deadline - time.monotonic()))
        if outcome.returncode != 0:
            return failed(f"{name}'s plan cost: exit {outcome.returncode}; see reproduce.log", **figures)
        figures[PLAN_COSTS][name] = json.loads(table.read_text())
    for preset in plan.reproductions:
        name = Path(preset).stem
        output_dir = work / name
        outcome = run(plan, [sys.executable, "-m", "study.reproduce", "--config", preset,
                             *reproduction_overrides(plan, output_dir)],
                      out / "reproduce.log", max(1.0, deadline - time.monotonic()))
        if outcome.returncode is None:
            return {"status": "stopped", "why": f"{name} reached the time limit: run the stage again to continue",
                    **figures, name: runs_finished(outcome.output)}
        if outcome.returncode != 0:
            return failed(f"{name}: exit {outcome.returncode}; see reproduce.log", **figures)
        (out / f"{name}.md").write_text((output_dir / "results.md").read_text())
        figures[name] = reproduction_figures(json.loads((output_dir / "results.json").read_text()), output_dir.name)
    return {"status": "passed", **figures}


def reproduction_overrides(plan: Plan, output_dir: Path) -> list[str]:
    """What every reproduction of the stage is given, after its preset: where it runs, its data, the plan's own."""
    return [f"output_dir={output_dir}", f"data=['data.source=fashion-mnist:{plan.fashion_mnist}']",
            *plan.reproduce_args]


def runs_finished(output: str) -> dict[str, int]:
    """How far an experiment got, from its runner's log: its runs, and those finished before and during this call."""
    found = re.search(r"(\d+) runs, (\d+) already finished", output)
    runs, before = map(int, found.groups()) if found else (0, 0)
    return {"runs": runs, "finished": before + len(re.findall(r" INFO mpp\.experiments\.runner: done ", output))}


def reproduction_figures(results: dict[str, Any], experiment: str) -> dict[str, Any]:
    """A reproduction's results.json -> each row's fine-tuned figure (mean ± SD over the seeds, in %) and each
    claim's fine-tuned paired difference with its 95% interval, as its results.md gives them (``experiment``: its
    output folder's name, which says whether it runs a protocol of the primary family)."""
    preferred = measures_read(results)[0]
    return {"seeds": len(results["seeds"]), "wall_minutes": round(results["wall_seconds"] / 60, 1),
            "measure": preferred,
            "fine_tuned": {row["label"]: percent(row[headline(results)]) for row in results["rows"].values()},
            "claims": {comparison.finding: measured_cell(comparison, preferred)
                       for comparison in claim_comparisons(results, experiment) if comparison.column == "Fine-tuned"}}


STAGES: dict[str, Callable[[Plan, Path, Path], dict[str, Any]]] = {
    "tests": tests_stage, "step": step_stage, "run": run_stage, "pretrain": pretrain_stage, "loader": loader_stage,
    "fsdp": fsdp_stage, "profile": profile_stage, "reproduce": reproduce_stage,
}


# --- results --------------------------------------------------------------------------------------------------------

def read_results(out: Path) -> dict[str, Any]:
    path = out / RESULTS_JSON
    return json.loads(path.read_text()) if path.is_file() else {}


def markdown(results: dict[str, Any]) -> str:
    lines = [f"# GPU acceptance: {results.get('device', '?')}", "",
             f"`python -m tools.gpu` ({'dry run on the CPU' if results.get('dry_run') else 'on the GPU'})",
             "", "| stage | status | figures |", "|---|---|---|"]
    for name in STAGES:
        stage = results.get(name)
        if stage is None:
            continue
        lines.append(f"| {name} | {stage['status']} | {summary(name, stage)} |")
    return "\n".join(lines) + "\n"


def summary(name: str, stage: dict[str, Any]) -> str:
    parts = [stage["why"]] if "why" in stage else []
    if name == "tests" and "counts" in stage:
        parts.append(", ".join(f"{count} {kind.replace('_', '-')}" for kind, count in stage["counts"].items()))
        parts += [f"failed: {test}" for test in stage["failed_tests"]]
    if name == "step":
        for mode in ("eager", "compiled"):
            if mode in stage:
                table = stage[mode]
                rows = "; ".join(f"{row} {result['images_per_second']:,.0f} images/s, "
                                 f"{result['peak_memory_bytes'] / 2**30:.1f} GiB"
                                 + (f", MFU {result['model_flops_utilisation']:.1%}"
                                    if result.get("model_flops_utilisation") else "")
                                 for row, result in table["rows"].items())
                parts.append(f"{mode}, batch {table['batch_size']}: {rows}; MPP / supervised "
                             f"{table['mpp_over_supervised']:.3f}")
    if name == "profile":
        for row in ("supervised", "mpp"):
            if row in stage:
                shares = ", ".join(f"{kind} {share:.0%}" for kind, share in stage[row]["share_by_kind"].items())
                busy = stage[row]["device_busy"]
                parts.append(f"{row}: {1e3 * stage[row]['wall_seconds_per_step']:.1f} ms per step"
                             + (f", device busy {busy:.0%}" if busy else "") + f"; {shares}")
    if name == "run" and "step_images_per_second" in stage:
        parts.append(f"batch {stage['batch_size']}: the step {stage['step_images_per_second']:,.0f} images/s")
        parts += [f"{size} ({figures['images']:,} images): {figures['images_per_second']:,.0f} images/s, "
                  f"{figures['of_step']:.2f} of the step, {figures['data_wait_share']:.1%} waiting for data"
                  for size, figures in stage.items() if size.endswith("-step epochs")]
        parts.append(f"{RUN_GOAL:.2f} of the step or more: {'met' if stage['goal_met'] else 'not met'}")
    if name == "reproduce":
        parts += [f"{experiment}'s plan: {cost['images']:,} training images over {cost['seeds']} seeds, one H100: "
                  f"{cost['h100_time']}" for experiment, cost in stage.get(PLAN_COSTS, {}).items()]
        for experiment, figures in stage.items():
            if experiment == PLAN_COSTS:
                continue
            if isinstance(figures, dict) and "fine_tuned" not in figures:
                parts.append(f"{experiment}: {figures['finished']} of {figures['runs']} runs finished")
            elif isinstance(figures, dict):
                parts.append(f"{experiment} ({figures['seeds']} seeds, {figures['wall_minutes']} min), fine-tuned "
                             f"{figures['measure']}: " + "; ".join(f"{label} {value}%" for label, value in
                                                                 figures["fine_tuned"].items())
                             + "".join(f"; {claim}: {cell}" for claim, cell in figures["claims"].items()))
    if name in ("pretrain", "fsdp", "loader"):
        parts += [f"{key} {value}" for key, value in stage.items() if key not in ("status", "why", "rows")]
    return "<br>".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="where the results and logs go")
    parser.add_argument("--stages", nargs="+", choices=list(STAGES), default=list(STAGES),
                        help="run only these (default: all, in order)")
    parser.add_argument("--dry-run", action="store_true", help="the same plan at toy sizes on the CPU")
    parser.add_argument("--batch", type=int, help="the batch of the stages after the step stage (default: the "
                        "largest the step stage fitted, where it ran into --out, else the plan's smallest)")
    parser.add_argument("--fashion-mnist", type=Path, default=FASHION_MNIST_DIR, metavar="DIR",
                        help=f"the four Fashion-MNIST IDX files the reproduce stage reads (default: {FASHION_MNIST_DIR}"
                        ", where the Debian package puts them)")
    parser.add_argument("--limit", nargs="+", default=[], metavar="STAGE=SECONDS",
                        help="another time limit for these stages (a command's time budget shared out)")
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("error: python -m tools.gpu measures a GPU, and torch sees no CUDA device here; run it on a "
              "machine with one, or add --dry-run to try the plan at toy sizes on the CPU", file=sys.stderr)
        return 2
    plan = dry_run_plan() if args.dry_run else gpu_plan()
    limits = dict(limit.partition("=")[::2] for limit in args.limit)
    if not (set(limits) <= set(STAGES) and all(seconds.isdigit() for seconds in limits.values())):
        parser.error(f"--limit takes STAGE=SECONDS, a stage of {', '.join(STAGES)} and whole seconds: got "
                     f"{' '.join(args.limit)}")
    if "reproduce" in args.stages:
        try:
            for stems in FASHION_MNIST_FILES.values():
                for stem in stems:
                    find_file(args.fashion_mnist, stem)
        except DataError as missing:
            parser.error(f"the reproduce stage reads Fashion-MNIST from --fashion-mnist {args.fashion_mnist}: "
                         f"{missing}")
    plan = replace(plan, limits_s=plan.limits_s | {stage: int(seconds) for stage, seconds in limits.items()},
                   batch=args.batch, fashion_mnist=args.fashion_mnist.resolve())
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "work"
    work.mkdir(exist_ok=True)
    results = read_results(args.out)
    results |= {"dry_run": plan.dry_run,
                "device": torch.cuda.get_device_name() if torch.cuda.is_available() and not plan.dry_run else "cpu",
                "torch": torch.__version__}
    for name in args.stages:
        started = time.monotonic()
        print(f"{name}: running (at most {plan.limits_s[name]} s)", flush=True)
        results[name] = STAGES[name](plan, args.out, work) | {"seconds": round(time.monotonic() - started, 1)}
        print(f"{name}: {results[name]['status']} in {results[name]['seconds']} s", flush=True)
        (args.out / RESULTS_JSON).write_text(json.dumps(results, indent=2) + "\n")  # after each: a cut-off keeps it
        (args.out / RESULTS_MARKDOWN).write_text(markdown(results))
    print(markdown(results))
    return 0 if all(results[name]["status"] != "failed" for name in args.stages) else 1


if __name__ == "__main__":
    sys.exit(main())
