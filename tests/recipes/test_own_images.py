"""docs/own-images.md walked end to end at toy size, its commands run as the page gives them (in its order, on
folders of images made here; each in this process, where the launcher is not under test): the CPU walk at its
presets' own encoder with a shorter schedule, the one-GPU walk with overrides that shrink the model and the
schedule; and the one-GPU presets it names taking a step at their own size."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from mpp.data.prepare import main as prepare
from tests.launching import ROOT, run_here

PAGE = ROOT / "docs" / "own-images.md"
ENCODER = ["model.img_size=32", "model.patch_size=8", "model.embed_dim=32", "model.depth=2", "model.num_heads=2"]
SCHEDULE = ["train.epochs=2", "train.warmup_epochs=0.5", "train.global_batch_size=16", "train.compile=false",
            "train.mixed_precision=no", "train.log_every=2", "data.num_workers=1"]
TOY = {  # what each script's commands with a one-GPU preset get on top of the page's arguments
    "recipes/mpp.py": [*ENCODER, *SCHEDULE, "train.micro_batch_size=8", "train.checkpoint_every=4",
                       "monitor.mosaic_every=0"],
    "recipes/finetune.py": [*SCHEDULE, "train.micro_batch_size=16", "finetune.sweep_lrs=[0.01,0.03]",
                            "finetune.sweep_holdout_fraction=0.25"],
    "eval/linear_probe.py": ENCODER,  # the architecture init's folder has
    "eval/knn.py": [*ENCODER, "knn.k=5"],
    "eval/few_shot.py": [*ENCODER, "few_shot.shots=[2]", "few_shot.holdout_per_class=2"],
}
# The CPU presets keep their own encoder (a few seconds a step at toy size); only the schedule is shortened
CPU_SCHEDULE = ["train.epochs=2", "train.warmup_epochs=0.5", "train.global_batch_size=16", "train.log_every=2"]
CPU_TOY = {"recipes/mpp.py": [*CPU_SCHEDULE, "train.checkpoint_every=4"], "recipes/finetune.py": CPU_SCHEDULE,
           "eval/linear_probe.py": [], "eval/knn.py": []}
CPU_PRESETS = ("mpp_own_images_cpu.yaml", "finetune_own_images_cpu.yaml", "eval_own_images_cpu.yaml")


def write_images(folder: Path, count: int, colour_of_class: dict[str, tuple[int, int, int]]) -> None:
    """``count`` images per class, each a class's colour with a seeded square of another, 40x36 px."""
    generator = torch.Generator().manual_seed(count)
    for name, colour in colour_of_class.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        for index in range(count):
            image = Image.new("RGB", (40, 36), colour)
            x, y = torch.randint(0, 24, (2,), generator=generator).tolist()
            image.paste(tuple(torch.randint(0, 256, (3,), generator=generator).tolist()), (x, y, x + 12, y + 12))
            image.save(folder / name / f"{index:03d}.png")


def page_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", PAGE.read_text(), re.S | re.M)


def in_folder(text: str, tmp_path: Path) -> str:
    """The page's example paths moved into the test's folder."""
    return text.replace("/data/", f"{tmp_path}/data/").replace("runs/", f"{tmp_path}/runs/")


def run_python(block: str, check: str, tmp_path: Path) -> str:
    """The last line a page's Python block prints with ``check`` run after it."""
    return subprocess.run([sys.executable, "-c", in_folder(block, tmp_path) + check], check=True, cwd=ROOT,
                          capture_output=True, text=True).stdout.split("\n")[-2]


@pytest.mark.slow
@pytest.mark.many_runs
def test_the_own_images_page_runs_end_to_end(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the page's paths are the checkout's
    write_images(tmp_path / "data" / "my-images", 48, {"all": (200, 60, 40)})
    for split, count in (("train", 24), ("val", 8)):
        write_images(tmp_path / "data" / "labelled" / split, count, {"circles": (30, 90, 200), "leaves": (40, 160, 60)})
    commands = [line for block in page_blocks("bash") for line in block.splitlines() if line.strip()]
    assert len(commands) == 17
    ran = []
    for command in commands:
        words = shlex.split(in_folder(command, tmp_path))
        if words[:4] == ["python", "-m", "mpp", "compare"]:  # run whole at toy size in tests/experiments/
            printed = subprocess.run([sys.executable, *words[1:], "--print-config"], check=True, cwd=ROOT,
                                     capture_output=True, text=True).stdout
            assert f"unlabelled: hf:{tmp_path}/data/my-images-64px" in printed
            ran.append("mpp compare")
            continue
        if words[:3] == ["python", "-m", "mpp.data.prepare"]:
            prepare(words[3:])
            ran.append(words[2])
            continue
        assert words[:2] == ["accelerate", "launch"], command
        script, arguments = words[2], words[3:]
        preset = Path(arguments[arguments.index("--config") + 1]).name
        resuming = "--resume" in arguments
        longer = ["train.epochs=4"] if resuming else []  # the finished run, continued for two more epochs
        toy = CPU_TOY[script] if preset in CPU_PRESETS else TOY[script]
        run_here(*arguments, *toy, *longer, script=ROOT / script)  # the launcher is tested in tests/recipes/
        ran.append(script + " --resume" * resuming + " (CPU)" * (preset in CPU_PRESETS))
    cpu_walk = ["mpp.data.prepare", "mpp.data.prepare", "recipes/mpp.py (CPU)", *["recipes/finetune.py (CPU)"] * 2,
                *["eval/linear_probe.py (CPU)"] * 2, *["eval/knn.py (CPU)"] * 2, "mpp compare"]
    assert ran == [*cpu_walk, "mpp.data.prepare", "recipes/mpp.py", "recipes/mpp.py --resume", "recipes/finetune.py",
                   "eval/linear_probe.py", "eval/knn.py", "eval/few_shot.py"]

    runs = tmp_path / "runs"
    # The CPU walk: its presets' own encoder, the labelled images prepared with their evaluation folder as the test
    # split, and every baseline the trained encoder's architecture with fresh weights
    log = (runs / "my-mpp-cpu" / "log.txt").read_text()
    assert "train.epochs=2 at 3 steps an epoch (48 images at a global batch of 16): 6 steps" in log
    assert "vit_tiny_patch16_224, 0.21M parameters, 64 patches per image" in log
    prepared = json.loads((tmp_path / "data" / "labelled-64px" / "prepared.json").read_text())["splits"]
    assert (prepared["train"]["images"], prepared["test"]["images"]) == (48, 16)
    for trained, baseline in (("my-finetune-cpu", "my-finetune-cpu-random"), ("my-probe-cpu", "my-probe-cpu-random"),
                              ("my-knn-cpu", "my-knn-cpu-random")):
        assert json.loads((runs / trained / "metrics.json").read_text())["init"] == str(runs / "my-mpp-cpu")
        assert json.loads((runs / baseline / "metrics.json").read_text())["init"] == f"random:{runs / 'my-mpp-cpu'}"
    finetuning = json.loads((runs / "my-finetune-cpu" / "metrics.json").read_text())
    assert finetuning["step"] == 6 and 0 <= finetuning["test_balanced_accuracy"] <= 1

    # The one-GPU walk
    log = (runs / "my-mpp" / "log.txt").read_text()
    # 48 images at a global batch of 16: 3 steps an epoch; the plan line says how it got there
    assert "train.epochs=2 at 3 steps an epoch (48 images at a global batch of 16): 6 steps" in log
    assert re.search(r"peak lr 9.3\de-06 = train.lr 0.00015 x 16 / 256 \(train.lr_scaling=linear\)", log)
    assert re.search(r"resumed from .*step_00000006 at step 6", log)
    pretraining = json.loads((runs / "my-mpp" / "metrics.json").read_text())
    assert pretraining["step"] == 12 and 0 <= pretraining["data_wait_share"] < 1
    finetuning = json.loads((runs / "my-finetune" / "metrics.json").read_text())
    assert finetuning["chosen_lr"] in (0.01, 0.03) and 0 <= finetuning["test_balanced_accuracy"] <= 1
    for run in ("my-probe", "my-knn", "my-few-shot"):
        assert json.loads((runs / run / "metrics.json").read_text())["init"] == str(runs / "my-mpp")

    cpu_loading, loading = [block for block in page_blocks("python") if "local-dir:" in block]
    assert "my-mpp-cpu" in cpu_loading
    shown = run_python(cpu_loading, "\nimport torch\nprint(tuple(encoder(torch.rand(2, 3, 32, 32)).shape))", tmp_path)
    assert shown == "(2, 64)"  # the CPU preset's encoder, width 64
    check = ("\nimport torch\nimages = torch.rand(2, 3, 32, 32)\n"
             "print(tuple(encoder(images).shape), tuple(classifier(images).shape), type(same_encoder).__name__)")
    assert run_python(loading, check, tmp_path) == "(2, 32) (2, 10) TimmWrapperModel"


@pytest.mark.parametrize("preset", CPU_PRESETS)
def test_the_cpu_presets_the_page_names_are_valid(preset):
    """Each CPU preset is named on the page and builds its recipe's config with a data source given."""
    from mpp.config.building import build_config
    from mpp.config.runs import FewShotRunConfig, FinetuneRunConfig, KnnRunConfig, LinearProbeRunConfig, MPPRunConfig

    assert f"recipes/configs/{preset}" in PAGE.read_text()
    kinds = {"mpp": [MPPRunConfig], "finetune": [FinetuneRunConfig],
             "eval": [LinearProbeRunConfig, KnnRunConfig, FewShotRunConfig]}[preset.split("_")[0]]
    for kind in kinds:
        config = build_config(kind, ROOT / "recipes" / "configs" / preset, ["data.source=hf:prepared"])
        assert (config.model.img_size, config.model.patch_size, config.model.embed_dim) == (32, 4, 64)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["mpp", "finetune"])
def test_the_one_gpu_presets_take_a_step_at_their_own_size(tmp_path, recipe):
    """ViT-B/16 at 224 px as the preset gives it, bf16 included; only compiling (minutes on a CPU) and the batch
    are changed, and the length: one step."""
    write_images(tmp_path / "images", 4, {"circles": (30, 90, 200), "leaves": (40, 160, 60)})
    preset = ROOT / "recipes" / "configs" / f"{recipe}_vit_b16_one_gpu.yaml"
    small = ["train.compile=false", "train.global_batch_size=2", "train.micro_batch_size=2", "train.epochs=0.25",
             "train.checkpoint_every=1", "monitor.mosaic_every=0" if recipe == "mpp" else "finetune.sweep_lrs=[]",
             f"data.source=folder:{tmp_path / 'images'}", f"output_dir={tmp_path / 'run'}"]
    if recipe == "finetune":
        small.append(f"data.eval_folder={tmp_path / 'images'}")
    run_here("--config", str(preset), *small, script=ROOT / "recipes" / f"{recipe}.py")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["step"] == 1 and metrics["loss"] > 0
    log = (tmp_path / "run" / "log.txt").read_text()
    assert "vit_base_patch16_224" in log
    assert "train.epochs=0.25 at 4 steps an epoch (8 images at a global batch of 2): 1 steps" in log
