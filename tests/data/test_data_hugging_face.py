"""hf: on local datasets made here (save_to_disk, parquet, imagefolder), map-style and streamed; no hub."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from PIL import Image

from mpp.config.data import DataConfig
from mpp.data.image_source import decode, open_image
from mpp.data.loading import DataError, build_dataset, build_loader, open_source
from tests.launching import NO_MPP_MONITORS, TINY, run_here

rng = np.random.default_rng(0)


def png(height: int, width: int) -> Image.Image:
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def labelled(n: int, image_column: str = "img", label_column: str = "label") -> "datasets.Dataset":
    features = datasets.Features({image_column: datasets.Image(),
                                  label_column: datasets.ClassLabel(names=["a", "b", "c"])})
    return datasets.Dataset.from_dict(
        {image_column: [png(12 + i % 3, 10) for i in range(n)], label_column: [i % 3 for i in range(n)]}, features
    )


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    datasets.DatasetDict(train=labelled(12), test=labelled(6)).save_to_disk(str(root / "saved"))
    labelled(9).save_to_disk(str(root / "single"))
    (root / "parquet").mkdir()
    labelled(8).to_parquet(str(root / "parquet" / "train.parquet"))
    for split, count in (("train", 4), ("test", 2)):
        for name in ("cat", "dog"):
            (root / "images" / split / name).mkdir(parents=True)
            for i in range(count):
                png(9, 11).save(root / "images" / split / name / f"{i}.png")
    return {"root": root, **{name: root / name for name in ("saved", "single", "parquet", "images")}}


def cfg_for(path: Path, tmp_path: Path, **options) -> DataConfig:
    return DataConfig(source=f"hf:{path}", hf_cache_dir=str(tmp_path / "cache"), **options)


def test_saved_dataset_dict_finds_image_and_label_columns_by_type(hf_dirs, tmp_path):
    cfg = cfg_for(hf_dirs["saved"], tmp_path)
    train, test = open_source(cfg, "train", 8), open_source(cfg, "test", 8)
    assert len(train) == 12 and len(test) == 6 and train.class_names == ("a", "b", "c")
    assert train.labels.tolist() == [i % 3 for i in range(12)]
    assert open_image(train.encoded(1)).size == (10, 13)
    images, labels, _ = build_dataset(cfg, "train", 8, channels=3, augment=True).__getitems__([0, 4])
    assert images.shape == (2, 3, 8, 8) and labels.tolist() == [0, 1]


def test_parquet_files_and_an_imagefolder_load_through_load_dataset(hf_dirs, tmp_path):
    parquet = open_source(cfg_for(hf_dirs["parquet"], tmp_path), "train", 8)
    assert len(parquet) == 8 and parquet.class_names == ("a", "b", "c")
    assert decode(open_image(parquet.encoded(0)), parquet.mode).mode == "RGB"
    images = open_source(cfg_for(hf_dirs["images"], tmp_path), "test", 8)
    assert len(images) == 4 and images.class_names == ("cat", "dog") and images.labels.tolist() == [0, 0, 1, 1]
    by_builder = open_source(cfg_for("imagefolder", tmp_path, hf_data_dir=str(hf_dirs["images"])), "train", 8)
    assert len(by_builder) == 8


def test_column_and_split_errors_list_what_exists(hf_dirs, tmp_path):
    with pytest.raises(DataError, match=r"no label column 'fine_label'.*img \(Image\), label \(ClassLabel\)"):
        open_source(cfg_for(hf_dirs["saved"], tmp_path, label_column="fine_label"), "train", 8)
    with pytest.raises(DataError, match=r"no image column 'image'.*img \(Image\)"):
        open_source(cfg_for(hf_dirs["saved"], tmp_path, image_column="image"), "train", 8)
    with pytest.raises(DataError, match=r"not an Image"):
        open_source(cfg_for(hf_dirs["saved"], tmp_path, image_column="label"), "train", 8)
    with pytest.raises(DataError, match=r"no split 'validation'; its splits: train, test"):
        open_source(cfg_for(hf_dirs["saved"], tmp_path, eval_split="validation"), "test", 8)
    with pytest.raises(DataError, match=r"single Dataset.*data.holdout_fraction"):
        open_source(cfg_for(hf_dirs["single"], tmp_path), "test", 8)
    with pytest.raises(DataError, match="does not exist"):
        open_source(cfg_for(hf_dirs["root"] / "missing", tmp_path), "train", 8)


def test_an_empty_split_is_refused(hf_dirs, tmp_path):
    (tmp_path / "empty").mkdir()
    labelled(3).select([]).to_parquet(str(tmp_path / "empty" / "train.parquet"))
    with pytest.raises(DataError, match="is empty"):
        open_source(cfg_for(tmp_path / "empty", tmp_path), "train", 8)


def test_undecodable_rows_are_skipped_and_counted(tmp_path):
    good = io.BytesIO()
    png(8, 8).save(good, format="PNG")
    rows = [{"bytes": good.getvalue(), "path": None}] * 19 + [{"bytes": b"broken", "path": "broken.png"}]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    datasets.Dataset.from_dict({"image": rows, "label": list(range(20))}, features).save_to_disk(str(tmp_path / "d"))
    dataset = build_dataset(cfg_for(tmp_path / "d", tmp_path, max_bad_fraction=0.1), "train", 8, 3, augment=False)
    images, labels, _ = dataset.__getitems__([19, 3])
    assert labels.tolist() == [0, 3]  # the broken last row is replaced by the next one, wrapping round
    assert dataset.skipped_count() == 1 and dataset.undecodable_files() == ["broken.png"]
    assert open_source(cfg_for(tmp_path / "d", tmp_path), "train", 8).class_names == tuple(map(str, range(20)))


def test_streaming_reads_every_example_once_per_epoch_and_splits_between_processes(hf_dirs, tmp_path):
    cfg = cfg_for(hf_dirs["saved"], tmp_path, streaming=True, shuffle_buffer=4)
    stream = build_dataset(cfg, "train", 8, channels=1, augment=True, seed=1)
    batches = list(build_loader(stream, batch_size=4, cfg=cfg, train=True))
    labels = torch.cat([labels for _, labels, _ in batches])
    assert batches[0][0].shape == (4, 1, 8, 8) and sorted(labels.tolist()) == sorted(i % 3 for i in range(12))
    halves = [build_dataset(cfg, "train", 8, 1, augment=False, process_index=rank, num_processes=2) for rank in (0, 1)]
    counts = [sum(1 for _ in half) for half in halves]
    assert counts[0] + counts[1] == 12 and min(counts) > 0
    with pytest.raises(DataError, match="need data.streaming=false"):
        build_dataset(cfg_for(hf_dirs["saved"], tmp_path, streaming=True, shots_per_class=1), "train", 8, 3, True)


@pytest.mark.slow
def test_the_recipe_trains_on_a_stream_and_resumes_it(tmp_path):
    # Saved to disk: a streamed parquet folder would cost 5 s per pass (datasets waits for arrow's threads).
    labelled(20, image_column="image").save_to_disk(str(tmp_path / "saved"))
    run = tmp_path / "run"
    stream = [f"data.source=hf:{tmp_path / 'saved'}", "data.streaming=true", "data.shuffle_buffer=8",
              *TINY, *NO_MPP_MONITORS]  # 20 images, batches of 8: 2 steps per epoch
    run_here(f"output_dir={run}", *stream, "train.steps=3")
    run_here(f"output_dir={run}", *stream, "train.steps=6", "--resume")
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["step"] == 6 and metrics["steps_this_session"] == 3 and metrics["loss"] > 0
    assert "resumed from" in (run / "log.txt").read_text()


@pytest.mark.slow
def test_an_unreachable_hub_says_how_to_bring_the_data(tmp_path):
    script = ("from mpp.config.data import DataConfig; from mpp.data.loading import open_source; "
              "open_source(DataConfig(source='hf:someone/not-here'), 'train', 16)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)}  # offline: no retries against no network
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 1
    assert "DataError: hf:someone/not-here: cannot reach the Hugging Face hub" in result.stderr
    assert "save_to_disk" in result.stderr
