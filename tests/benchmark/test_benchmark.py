"""The performance benchmark: its FLOP count is the analytic one, and it measures every row it can and writes the
table (timings themselves are printed, never asserted); and MPP accuracy by region of the shapes data."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from mpp.benchmark import step_profile
from mpp.benchmark.training_step import (PEER_DOES_NOT_COMPILE, build_model, forward_flops, main, measure_interleaved,
                                         peer_available, rows_to_measure)
from mpp.config.runs import MPPRunConfig
from mpp.config.building import build_config
from mpp.data.shapes import ShapesSource
from mpp.models.masked_patch_prediction import select_patches
from mpp.models.encoder import create_encoder
from mpp.models.masked_patch_prediction import MaskedPatchPredictor
from tools import shapes_regions

TINY_MODEL = {"name": "vit_tiny_patch16_224", "img_size": 16, "patch_size": 4, "embed_dim": 32, "depth": 2,
              "num_heads": 2}


def test_the_flop_count_is_every_matmul_attention_included():
    run = build_config(MPPRunConfig, overrides=[f"model.{key}={value}" for key, value in TINY_MODEL.items()])
    model = build_model("supervised", run)
    batch, d, tokens, patches, depth = 3, 32, 17, 16, 2
    linear = depth * (3 * d * d + d * d + 2 * 4 * d * d) * tokens + patches * (3 * 4 * 4) * d + d * d + d * 1000
    attention = depth * 2 * tokens * tokens * d  # q k^T and attention x v
    images, labels = torch.rand(batch, 3, 16, 16), torch.randint(0, 1000, (batch,))
    assert forward_flops(model, images, labels) == 2 * batch * (linear + attention)  # 2 FLOPs per multiply-add


@pytest.mark.slow
def test_the_benchmark_measures_each_row_and_writes_the_table(tmp_path, capsys):
    preset = tmp_path / "tiny.yaml"
    preset.write_text(yaml.safe_dump({"model": TINY_MODEL}))
    results = main(["--config", str(preset), "--batch", "4", "--steps", "1", "--repeats", "3", "--warmup", "1",
                    "--grad-checkpointing", "--json", str(tmp_path / "table.json")])
    expected = {"supervised", "mpp", "supervised + grad checkpointing", "mpp + grad checkpointing"}
    expected |= {"vit-pytorch"} if peer_available() else set()
    assert set(results["rows"]) == expected
    for row in results["rows"].values():
        assert row["peak_memory_bytes"] > 0 and row["training_flops_per_image"] > 0
        assert len(row["seconds_per_step"]) == 3  # one timing per round of the interleaved repeats
        assert row["images_per_second"] == 4 / statistics.median(row["seconds_per_step"])
    assert results["mpp_over_supervised"] == results["rows"]["mpp"]["images_per_second"] / results["rows"][
        "supervised"]["images_per_second"]
    assert json.loads((tmp_path / "table.json").read_text()) == results
    assert "| mpp |" in capsys.readouterr().out



def test_the_step_profile_shares_the_steps_operator_time_among_kinds_of_work(tmp_path, capsys):
    preset = tmp_path / "tiny.yaml"
    preset.write_text(yaml.safe_dump({"model": TINY_MODEL}))
    results = step_profile.main(["--config", str(preset), "--batch", "4", "--warmup", "1", "--steps", "2", "--json",
                                 str(tmp_path / "profile.json")])
    assert results["steps"] == 2 and results["wall_seconds_per_step"] > 0
    assert sum(results["share_by_kind"].values()) == pytest.approx(1.0)
    assert results["share_by_kind"]["matrix products"] > 0 and results["share_by_kind"]["optimizer"] > 0
    assert [operator["share"] for operator in results["top_operators"]] == sorted(
        (operator["share"] for operator in results["top_operators"]), reverse=True)
    assert json.loads((tmp_path / "profile.json").read_text()) == results
    assert "matrix products" in capsys.readouterr().out


def test_an_operator_is_sorted_into_its_kind_of_work_by_its_name():
    assert step_profile.kind_of("sm90_xmma_gemm_bf16bf16_bf16f32") == "matrix products"
    assert step_profile.kind_of("aten::_scaled_dot_product_flash_attention_backward") == "attention"
    assert step_profile.kind_of("aten::native_layer_norm") == "normalisation"
    assert step_profile.kind_of("multi_tensor_apply_kernel<FusedAdamMathFunctor>") == "optimizer"
    assert step_profile.kind_of("triton_poi_fused_add_gelu_0") == "element-wise"


def test_a_gpu_profile_counts_each_kernel_once_and_only_device_work():
    """As a GPU's profile lists them (measured on an H200): the host operator that launched a kernel reports the
    kernel's time as its own device time, and CUPTI records the host waiting on a full launch queue."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    def event(key, device_type, device_us, cpu_us=0.0):
        return SimpleNamespace(key=key, device_type=device_type, self_device_time_total=device_us,
                               self_cpu_time_total=cpu_us)

    events = [event("aten::mm", DeviceType.CPU, 12_000, cpu_us=40),
              event("nvjet_sm90_tst_192x192_64x4_1x2_h_bz_coopB_bias_TNN", DeviceType.CUDA, 12_000),
              event("triton_poi_fused_gelu_view_9", DeviceType.CPU, 5_000, cpu_us=10),
              event("triton_poi_fused_gelu_view_9", DeviceType.CUDA, 5_000),
              event("Command Buffer Full", DeviceType.CUDA, 1_800)]
    assert step_profile.self_seconds(events, on_gpu=True) == {
        "nvjet_sm90_tst_192x192_64x4_1x2_h_bz_coopB_bias_TNN": 0.012, "triton_poi_fused_gelu_view_9": 0.005}
    assert step_profile.self_seconds(events, on_gpu=False) == {"aten::mm": 4e-05, "triton_poi_fused_gelu_view_9": 1e-05}

def test_thousands_of_synthetic_jpegs_are_made_over_the_cores_each_from_its_own_seed(tmp_path):
    """The i-th file is the encoder's from the seed ``seed + i``, made in other processes (one thread each) as in
    this one, and written as a labelled folder."""
    import functools
    import io

    from PIL import Image

    from mpp.benchmark.loader_speed import seeded_jpeg, synthetic_jpegs, write_labelled_jpegs
    from mpp.benchmark.training_run import noise_jpeg

    encode = functools.partial(noise_jpeg, size=8)
    files = synthetic_jpegs(2048, encode, seed=7)  # 2 processes where there are 2 cores
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert files[:3] + files[-3:] == [seeded_jpeg(encode, 7 + index) for index in (0, 1, 2, 2045, 2046, 2047)]
    finally:
        torch.set_num_threads(threads)
    assert files[0] != files[1] and Image.open(io.BytesIO(files[-1])).size == (8, 8)
    write_labelled_jpegs(tmp_path, files[:5], classes=2)
    assert sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*.jpg")) == [
        "class_0/000000.jpg", "class_0/000002.jpg", "class_0/000004.jpg", "class_1/000001.jpg", "class_1/000003.jpg"]
    assert (tmp_path / "class_1" / "000003.jpg").read_bytes() == files[3]


@pytest.mark.slow
def test_the_loader_benchmark_measures_every_path_on_imagenet_like_files(tmp_path):
    from mpp.benchmark import loader_speed

    results = loader_speed.main(["--only-imagenet", "--workers", "0", "--rounds", "1", "--seconds", "0.2",
                            "--imagenet-images", "8", "--json", str(tmp_path / "rows.json")])
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert rows == results["rows"]
    assert [(row["source"], row["path"], row["workers"]) for row in rows] == [
        ("imagenet-like", path, 0) for path in ["baseline", "library", "prepared"]
        + (["gpu-decode"] if torch.cuda.is_available() else [])]
    assert all(row["images_per_second"] > 0 for row in rows)
    assert len(results["stage_milliseconds"]) == 7 and all(ms > 0 for ms in results["stage_milliseconds"].values())
    only = loader_speed.main(["--only-imagenet", "--workers", "0", "--rounds", "1", "--seconds", "0.2",
                         "--imagenet-images", "8", "--paths", "prepared", "gpu-decode"])
    assert [row["path"] for row in only["rows"]] == ["prepared"] + (["gpu-decode"] if torch.cuda.is_available() else [])


@pytest.mark.slow
def test_mpp_accuracy_by_region_counts_each_corrupted_patch_in_the_region_it_lies_in(tmp_path, capsys):
    """The command on a tiny shapes run; then the model's prediction replaced by the target wherever a corrupted patch
    holds no shape pixel: accuracy is then 1 outside the shapes and stays low inside them and on outlines."""
    run = tmp_path / "run"
    overrides = [f"model.{key}={value}" for key, value in TINY_MODEL.items()] + [
        "model.img_size=32", "train.steps=2", "train.global_batch_size=8", "train.log_every=1",
        "train.checkpoint_every=2",
        "monitor.few_shot_every=0", "monitor.mosaic_every=0", "monitor.final_few_shot_draws=0", f"output_dir={run}"]
    recipe = subprocess.run([sys.executable, "recipes/mpp.py", *overrides], capture_output=True, text=True)
    assert recipe.returncode == 0, recipe.stderr[-2000:]
    regions = shapes_regions.main(["--run", str(run), "--images", "40"])
    assert abs(sum(figures["share"] for figures in regions.values()) - 1) < 1e-6
    assert all(figures["share"] > 0 for figures in regions.values()) and "outline" in capsys.readouterr().out

    cfg = build_config(MPPRunConfig, run / "config.yaml")
    model = MaskedPatchPredictor(create_encoder(cfg.model), cfg.mpp, cfg.data.mean, cfg.data.std)
    source, index = ShapesSource("test", cfg.model.img_size), torch.arange(40)
    cover = shapes_regions.shape_cover(source, index, cfg.model.patch_size)  # (b n)
    predict = model.forward

    def right_outside_shapes(images, corruption):
        out = predict(images, corruption=corruption)
        outside = (select_patches(cover, out.corruption.positions) == 0)[..., None, None]  # (b k 1 1)
        perfect = F.one_hot(out.target, out.prediction.shape[-1]).float()
        return dataclasses.replace(out, prediction=torch.where(outside, perfect, out.prediction))

    model.forward = right_outside_shapes
    forced = shapes_regions.region_accuracy(model, source, 40, batch_size=40)
    assert forced["outside"]["mpp_accuracy"] == 1.0
    assert forced["inside"]["mpp_accuracy"] < 0.5 and forced["outline"]["mpp_accuracy"] < 0.5


@pytest.mark.slow
def test_a_row_whose_process_dies_before_it_is_ready_ends_the_benchmark_naming_it(tmp_path):
    """Not a wait forever on a process that is gone (the row's process fails to read its preset here)."""
    with pytest.raises(RuntimeError, match="the 'mpp' row's process ended before it was ready"):
        measure_interleaved(["mpp"], (str(tmp_path / "missing.yaml"), 2, "fp32", 0, False), batch=2, steps=1,
                            repeats=1)


@pytest.mark.slow
def test_an_experiments_row_gives_balanced_accuracy_where_its_results_record_it(tmp_path):
    from tools.presets import experiment_row

    preset = Path("study/configs/reproduce_openclipart_all_labels_cpu.yaml")
    assert experiment_row(preset, tmp_path).endswith("| not run | - |")
    results = tmp_path / "reproduce-openclipart-all-labels-cpu" / "results.json"
    results.parent.mkdir(parents=True)
    row = {"label": "from scratch", "finetune_accuracy": [0.58, 0.60]}
    results.write_text(json.dumps({"seeds": [0, 1], "wall_seconds": 600, "rows": {"scratch": row}}))
    assert "| 2 | 10 min | fine-tuned test accuracy, mean ± SD over the seeds: from scratch: 59.0 ± 1.4%" in \
        experiment_row(preset, tmp_path)
    results.write_text(json.dumps({"seeds": [0, 1], "wall_seconds": 600, "rows": {
        "scratch": row | {"finetune_balanced_accuracy": [0.33, 0.35]}}}))
    assert "fine-tuned test balanced accuracy, mean ± SD over the seeds: from scratch: 34.0 ± 1.4%" in \
        experiment_row(preset, tmp_path)


def test_the_presets_table_times_a_preset_and_lists_every_one(tmp_path):
    from tools import presets

    page = tmp_path / "presets.md"
    presets.main(["--only", "mpp_tiny_cpu", "--out", str(page), "--repeats", "1"])
    text = page.read_text()
    shipped = sorted(path.name for path in Path("recipes/configs").glob("*.yaml"))
    assert all(f"| `{name}` |" in text for name in shipped)  # every preset has its row
    (row,) = [line for line in text.splitlines() if line.startswith("| `mpp_tiny_cpu.yaml` |")]
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert cells[1:7] == ["MPP pre-training", "vit_tiny_patch16_224: width 64, 4 blocks, 2 heads", "0.21M",
                          "32 px, 4x4 patches", "2,000 x 64", "`shapes`"]
    # timed whole (64 images of 64 patches: no estimate, no passes), in whatever unit the machine's speed gives
    assert re.fullmatch(r"[\d.]+ (ms|s)", cells[7]) and re.fullmatch(r"[\d.]+ GiB", cells[8])
    assert cells[9].startswith("MPP accuracy 33.6% at step 2,000")  # the preset's own '# Reaches:' line
    paper = [line for line in text.splitlines() if line.startswith("| `mpp_vit_b16_paper.yaml` |")][0]
    assert "yours (`data.source`, required)" in paper and "| - | - |" in paper  # not timed with --only


@pytest.mark.slow
def test_a_row_that_fails_ends_the_rows_still_waiting_so_that_the_benchmark_exits(tmp_path):
    """On an H200 a compiled row's failure left the other rows waiting for orders, and the benchmark hung at exit
    until its time limit."""
    preset = tmp_path / "tiny.yaml"
    preset.write_text(yaml.safe_dump({"model": TINY_MODEL}))
    with pytest.raises(RuntimeError, match="the 'no such row' row's process ended before it was ready"):
        measure_interleaved(["supervised", "no such row"], (str(preset), 2, "fp32", 0, False), batch=2, steps=1,
                            repeats=1)
    assert multiprocessing.active_children() == []


def test_compiled_the_peer_is_left_out_saying_why_and_eager_it_is_measured_when_installed():
    assert rows_to_measure(True, False) == (["supervised", "mpp"], PEER_DOES_NOT_COMPILE)
    rows, absent = rows_to_measure(False, True)
    assert rows[-2:] == ["supervised + grad checkpointing", "mpp + grad checkpointing"]
    assert ("vit-pytorch" in rows) == peer_available() == (absent is None)


@pytest.mark.slow
def test_a_whole_run_that_fails_ends_the_run_benchmark_saying_why(tmp_path):
    # On a GPU whose minutes are few, the run's own error comes back, not only its exit status.
    result = subprocess.run([sys.executable, "-m", "mpp.benchmark.training_run", "--epoch-steps", "2", "--steps", "4",
                             "--repeats", "1", "--batch", "8", "--workers", "-1", "--work", str(tmp_path)],
                            capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 1
    assert "\nthe run failed (exit 1): " in result.stderr  # after the preparing's progress
    assert "data.num_workers=-1 must be at least 0" in result.stderr


def test_the_loader_benchmark_refuses_images_that_fill_no_batch_instead_of_timing_nothing_forever():
    from mpp.benchmark.loader_speed import loader_throughput
    from mpp.config.data import DataConfig
    from mpp.data.loading import build_dataset
    from mpp.errors import DataError

    dataset = build_dataset(DataConfig(), "train", 16, channels=3, augment=True).subset(torch.arange(3))
    with pytest.raises(DataError, match="has 3 images, fewer than one global batch of 8"):
        loader_throughput(dataset, DataConfig(), batch_size=8, workers=0, seconds=0.1)
