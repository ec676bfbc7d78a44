"""The TPU code path, on XLA's CPU backend (``PJRT_DEVICE=CPU``): the same lowering and compilation a TPU runs.

Run by the XLA lane (``.ci/xla``) in its own environment (torch_xla 2.9 needs torch 2.9); skipped where torch_xla is
not installed. ``USE_TORCH_XLA=0`` makes the same environment run on the plain CPU, for comparison.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import pytest

os.environ.setdefault("PJRT_DEVICE", "CPU")
# XLA's CPU backend compiles each graph with LLVM's optimisations, which is most of the lane's time; these tests check
# the lowering, the graphs and their results, not the speed of CPU code (a TPU compiles its own way), so this process
# and the runs it starts skip them: a 6-step MPP run with its monitors, 76.5 s of CPU time -> 33.8 s, the same loss.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true")
torch_xla = pytest.importorskip("torch_xla", reason="the XLA lane (.ci/xla) runs these, with torch_xla installed")

import torch  # noqa: E402
import torch_xla.debug.metrics as xla_metrics  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from mpp.config.building import build_config  # noqa: E402
from mpp.config.runs import MPPRunConfig, SupervisedRunConfig  # noqa: E402
from mpp.config.training import TrainConfig  # noqa: E402
from mpp.data.loading import build_dataset  # noqa: E402
from mpp.models.classifier import ImageClassifier  # noqa: E402
from mpp.models.encoder import create_encoder  # noqa: E402
from mpp.models.masked_patch_prediction import MaskedPatchPredictor  # noqa: E402
from mpp.models.mixing import batch_mixing  # noqa: E402
from mpp.run import Session  # noqa: E402
from mpp.training.optimizer import NonFiniteGuard, create_optimizer  # noqa: E402
from mpp.training.trainer import Trainer  # noqa: E402
from tests.launching import ROOT, TINY, launch  # noqa: E402

ENCODER = TINY[:5]  # 16 px, 4 px patches, width 32, 2 blocks
SHORT = ["train.global_batch_size=8", "train.warmup_steps=2", "train.log_every=2", "train.checkpoint_every=3",
         "train.steps=6"]


def counter(name: str) -> int:
    """How often torch_xla has done ``name`` (a compilation, a transfer from the device) in this process."""
    data = xla_metrics.metric_data(name)
    return data[0] if data else 0


class Counters:
    """A report run after every step: the compilations and device-to-host transfers so far (host-side counters,
    read without touching the device)."""

    every = 1

    def __init__(self) -> None:
        self.compilations, self.transfers = {0: counter("CompileTime")}, {0: counter("TransferFromDeviceTime")}

    def __call__(self, step: int, images_seen: int) -> None:
        self.compilations[step] = counter("CompileTime")
        self.transfers[step] = counter("TransferFromDeviceTime")


# The mixed classifier: mixup or cutmix drawn afresh each pass (a new weight, a new box) must not make a new graph.
MIXING = ("augment.mixup_alpha=0.8", "augment.cutmix_alpha=1.0", "classifier.label_smoothing=0.1")


@pytest.mark.parametrize("objective", ["mpp", "classifier", "mixed classifier"])
def test_the_step_compiles_once_and_reads_nothing_from_the_device_between_log_steps(tmp_path, objective):
    config_class = MPPRunConfig if objective == "mpp" else SupervisedRunConfig
    cfg = build_config(config_class, overrides=[*ENCODER, "train.global_batch_size=8", "train.warmup_steps=2",
                                                "train.log_every=4", "train.checkpoint_every=100", "train.steps=12",
                                                f"output_dir={tmp_path / 'run'}",
                                                *(MIXING if objective == "mixed classifier" else ())])
    with Session(cfg, cfg.train, prefix=objective) as session:
        assert session.accelerator.device.type == "xla"
        encoder = create_encoder(cfg.model)
        dataset = build_dataset(cfg.data, "train", 16, 3, augment=True, seed=cfg.seed)
        model = (MaskedPatchPredictor(encoder, cfg.mpp, cfg.data.mean, cfg.data.std) if objective == "mpp" else
                 ImageClassifier(encoder, dataset.num_classes, cfg.classifier, cfg.data.mean, cfg.data.std,
                                 batch_mixing(cfg.augment, dataset.num_classes, cfg.classifier.label_smoothing)))
        trainer = Trainer(session, model, dataset, cfg)
        session.start()
        counters = Counters()
        metrics = trainer.fit([counters])
        session.finish(metrics)
    if objective != "mpp":
        assert (model.mixing is not None) == (objective == "mixed classifier")
    compilations, transfers = counters.compilations, counters.transfers
    print(f"{objective}: compilations after each step {compilations}; transfers {transfers}")
    # Warm-up: the first step (the optimizer's state is created), the first log step and the one after it. After
    # that every graph is one already compiled (step 12, the last, has a learning rate of exactly 0, a value XLA
    # compiles in as a constant: one more graph, after these).
    assert compilations[6] == compilations[11], f"compiled again after warm-up: {compilations}"
    for step in range(1, 12):
        if step % 4:
            assert transfers[step] == transfers[step - 1], f"step {step} read from the device: {transfers}"
        else:
            assert transfers[step] > transfers[step - 1], f"log step {step} read nothing: {transfers}"
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert math.isfinite(written["loss"]) and written["backend"] == {"distributed_type": "XLA", "device": "xla:0"}


def test_a_non_finite_step_leaves_weights_moments_and_step_count_untouched_on_the_device():
    device = torch_xla.device()
    layer = torch.nn.Linear(3, 2).to(device)
    optimizer = create_optimizer(layer, TrainConfig(lr=0.1), device)
    assert optimizer.defaults["capturable"] and not optimizer.defaults.get("fused")  # the step count on the device
    guard = NonFiniteGuard(optimizer, device, stop=False, scaler_skips=False)

    def step(scale: float) -> None:
        loss = layer(torch.ones(1, 3, device=device)).sum() * scale
        loss.backward()
        guard.observe_loss(loss)
        with guard.only_if_finite(torch.nn.utils.clip_grad_norm_(layer.parameters(), 1.0)):
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def state() -> list[torch.Tensor]:
        return [tensor.detach().cpu().clone() for tensor in [*layer.parameters(), *(
            value for parameter_state in optimizer.state.values() for value in parameter_state.values())]]

    initial = [parameter.detach().cpu().clone() for parameter in layer.parameters()]
    step(math.nan)  # the first step, skipped: the state a first step starts from
    assert all(torch.equal(parameter.cpu(), value)
               for parameter, value in zip(layer.parameters(), initial, strict=True))
    for parameter_state in optimizer.state.values():
        assert float(parameter_state["step"]) == 0 and not parameter_state["exp_avg"].cpu().any()
    step(1.0)
    after_good = state()
    step(math.inf)
    assert all(torch.equal(before, now) for before, now in zip(after_good, state(), strict=True))
    assert guard.check(3, window_steps=3) == 2


def test_a_resumed_run_ends_with_the_uninterrupted_weights(tmp_path, run_of):
    straight = run_of("mpp", "xla", "no")  # 6 steps, a checkpoint every 3, its reports every 3
    interrupted = tmp_path / "interrupted"
    shutil.copytree(straight, interrupted)  # as if stopped right after its step-3 checkpoint
    for later in ("checkpoints/step_00000006", "export"):
        shutil.rmtree(interrupted / later)
    (interrupted / "metrics.json").unlink()
    script, arguments = entry_point_arguments("mpp", "no")
    result = launch(f"output_dir={interrupted}", *arguments, "--resume", script=script)
    assert "at step 3" in result.stderr
    expected, resumed = (load_file(run / "checkpoints" / "step_00000006" / "model.safetensors")
                         for run in (straight, interrupted))
    assert expected.keys() == resumed.keys()
    assert all(torch.equal(expected[name], resumed[name]) for name in expected)  # bit for bit


RECIPES, EVAL = ROOT / "recipes", ROOT / "eval"
MONITORED = ["monitor.few_shot_every=3", "monitor.few_shot_shots=2", "monitor.few_shot_test_per_class=5"]
EVALUATION = ["data.shots_per_class=20", "eval.batch_size=128"]
# Under the TPU launcher each loader's worker processes take seconds to start (a fine-tuning run with its sweep, 82.3 s
# with the default worker, 26.6 s with none): MPP's runs load through a worker, as a TPU VM's would; the classifiers'
# load in the training process.
IN_PROCESS_LOADING = "data.num_workers=0"
ENTRY_POINTS = {  # the script, its arguments, and the pre-training run its init names (if any)
    "mpp": (RECIPES / "mpp.py", [*SHORT, *MONITORED, "monitor.mosaic_every=3"], None),
    "supervised": (RECIPES / "supervised.py", [*SHORT, *MONITORED, IN_PROCESS_LOADING], None),
    "finetune": (RECIPES / "finetune.py", [*SHORT, "model.img_size=24", "finetune.sweep_lrs=[0.01,0.1]",
                                           "finetune.ema_decay=0.5", "data.shots_per_class=20", IN_PROCESS_LOADING],
                 "mpp"),
    "few_shot": (EVAL / "few_shot.py", [*EVALUATION, "few_shot.shots=[1,5]", "few_shot.holdout_per_class=5"], "mpp"),
    "linear_probe": (EVAL / "linear_probe.py", [*EVALUATION, "linear_probe.max_iterations=20"], "mpp"),
    "knn": (EVAL / "knn.py", EVALUATION, "supervised"),
    "inspect_encoder": (EVAL / "inspect_encoder.py", ["inspect.attention_images=8", "inspect.rollout_images=4"],
                        "supervised"),
}
BACKENDS = {"xla": {}, "cpu": {"USE_TORCH_XLA": "0"}}  # the environment each runs in
# A training run's final loss on XLA against the CPU's fp32 run: the same data, draws and initial weights, so only the
# arithmetic differs. Measured: at most 2e-7 relative in fp32 and 1e-4 in bf16 (6 steps); the bounds leave 50x and 20x.
LOSS_TOLERANCE = {"no": 1e-5, "bf16": 2e-3}


def files_of(run: Path) -> set[str]:
    """A run directory's files; TensorBoard's (named by time and host) and cached features (named by the encoder's
    weights, which differ: XLA draws other random numbers) by their kind."""
    names = {str(path.relative_to(run)) for path in run.rglob("*") if path.is_file()}
    return {re.sub(r"events\.out\.tfevents\..*", "events.out.tfevents.*", re.sub(r"-[0-9a-f]{16}\.safetensors$",
                                                                                  "-*.safetensors", name))
            for name in names}


def entry_point_arguments(name: str, precision: str, settings: Sequence[str] = ()) -> tuple[Path, list[str]]:
    """An entry point's script and its arguments at ``precision``, with ``settings`` besides (its init aside)."""
    script, arguments, _ = ENTRY_POINTS[name]
    section = "eval" if script.parent == EVAL else "train"
    return script, [*ENCODER, *arguments, *settings, f"{section}.mixed_precision={precision}"]


def tpu_launch(script: Path, arguments: list[str]) -> None:
    """What a TPU VM runs, one process here: ``accelerate launch --tpu`` imports the recipe as a module (recipes.mpp,
    not mpp.py, whose name is the package's) and calls its ``cli`` in each process ``xmp.spawn`` starts."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--tpu", "--num_processes", "1", "--module",
               "--main_training_function", "cli", f"recipes.{script.stem}", *arguments]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def run_of(tmp_path_factory):
    """``run_of(name, backend, precision)``: the directory of that entry point's run, launched the first time it is
    asked for (with the pre-training run it starts from); on XLA, a recipe through the TPU launcher (tpu_launch), an
    evaluation through ``accelerate launch``, at ``precision``; on the CPU, the script itself, the reference for the
    XLA run at ``precision``: in fp32, with that run's settings."""
    root = tmp_path_factory.mktemp("entry-points")

    def run(name: str, backend: str, precision: str) -> Path:
        settings = BF16_SETTINGS.get(name, []) if precision == "bf16" else []
        directory = root / (f"xla-{precision}" if backend == "xla" else f"cpu-{'bf16' if settings else 'no'}") / name
        if not (directory / "metrics.json").is_file():
            script, arguments = entry_point_arguments(name, precision if backend == "xla" else "no", settings)
            init = ENTRY_POINTS[name][2]
            if init:
                arguments.append(f"init={run(init, backend, precision)}")
            with pytest.MonkeyPatch.context() as patch:
                for key, value in BACKENDS[backend].items():
                    patch.setenv(key, value)
                if backend == "cpu":  # the reference: the script alone, one process start rather than two
                    result = subprocess.run([sys.executable, str(script), f"output_dir={directory}", *arguments],
                                            capture_output=True, text=True, timeout=600)
                    assert result.returncode == 0, result.stderr[-3000:]
                elif script.parent == RECIPES:
                    tpu_launch(script, [f"output_dir={directory}", *arguments])
                else:
                    launch(f"output_dir={directory}", *arguments, script=script)
        return directory

    return run


# Every entry point in fp32; in bf16 too (the step a TPU trains in) each objective's step: MPP's, and the classifier's
# in fine-tuning (supervised pre-training trains the same classifier step; the evaluations only extract features,
# through the same autocast). An XLA run in bf16 compiles every graph again: 154-180 s a test in the fresh-clone CI
# of 29c23d6.
BF16 = ("mpp", "finetune")
# Fine-tuning in bf16 without its learning-rate sweep: the classifier's step in bf16 is what it adds, and the sweep on
# XLA is the fp32 run's (in bf16 its candidates compiled every graph again: 175-253 s of the lane in CI).
BF16_SETTINGS = {"finetune": ["finetune.sweep_lrs=[]"]}
RUNS = [(name, precision) for name in ENTRY_POINTS for precision in (["no", "bf16"] if name in BF16 else ["no"])]


@pytest.mark.parametrize(("name", "precision"), RUNS, ids=[f"{name}-{precision}" for name, precision in RUNS])
def test_every_entry_point_runs_on_xla_and_writes_what_it_writes_on_a_cpu(run_of, name, precision):
    # The CPU's run in fp32 whatever the XLA run's precision: the files a run writes do not depend on it
    directories = {"xla": run_of(name, "xla", precision), "cpu": run_of(name, "cpu", precision)}
    metrics = {backend: json.loads((run / "metrics.json").read_text()) for backend, run in directories.items()}
    assert metrics["xla"]["backend"] == {"distributed_type": "XLA", "device": "xla:0"}
    assert metrics["cpu"]["backend"] == {"distributed_type": "NO", "device": "cpu"}
    assert metrics["xla"].keys() == metrics["cpu"].keys()
    assert files_of(directories["xla"]) == files_of(directories["cpu"])
    if "loss" in metrics["cpu"]:  # a training run: the same steps on the same images from the same initial weights
        tolerance = LOSS_TOLERANCE[precision]
        assert metrics["xla"]["loss"] == pytest.approx(metrics["cpu"]["loss"], rel=tolerance), (name, precision)
