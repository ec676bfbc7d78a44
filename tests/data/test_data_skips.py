"""Every skipped image says why: a decompression bomb, a file PIL cannot identify, a truncated one, an unreadable
one; one summary line for training, preparation and evaluation alike."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mpp.data.image_dataset import ImageDataset, ImageView
from mpp.data.image_folder import ImageFolderSource
from mpp.data.image_source import UndecodableImage, decode, open_image, read_file, skip_summary


def png(height: int, width: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((height, width, 3), 200, dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def truncated_jpeg() -> bytes:
    buffer = io.BytesIO()
    photo = np.random.default_rng(0).integers(0, 256, (24, 32, 3), dtype=np.uint8)
    Image.fromarray(photo).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()[: len(buffer.getvalue()) * 2 // 3]


def why(file: bytes | Path) -> UndecodableImage:
    with pytest.raises(UndecodableImage) as refused:
        decode(open_image(read_file(file) if isinstance(file, Path) else file), "RGB")
    return refused.value


def test_each_kind_of_undecodable_file_says_why_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # PIL refuses above twice this: 2,000 pixels
    bomb = why(png(50, 60))
    assert bomb.kind == "too-large"
    assert str(bomb).startswith("larger than PIL's decompression-bomb limit of 2,000 pixels (2 x "
                                "Image.MAX_IMAGE_PIXELS) (Image size (3000 pixels) exceeds limit of 2000 pixels); "
                                "shrink it first")
    monkeypatch.undo()
    not_an_image = why(b"<svg>a drawing, not pixels</svg>")
    assert not_an_image.kind == "not-an-image" and str(not_an_image).startswith("not an image PIL can read")
    truncated = why(truncated_jpeg())
    assert truncated.kind == "truncated" and "image file is truncated" in str(truncated)
    with pytest.raises(UndecodableImage) as unreadable:
        read_file(tmp_path / "gone.png")
    assert unreadable.value.kind == "unreadable" and str(unreadable.value).startswith("unreadable")


def test_a_dataset_records_why_each_file_was_skipped_and_the_summary_groups_them(tmp_path, monkeypatch):
    folder = tmp_path / "images" / "a"
    folder.mkdir(parents=True)
    (folder / "0_good.png").write_bytes(png(20, 20))
    (folder / "1_bomb.png").write_bytes(png(50, 60))
    (folder / "2_text.png").write_bytes(b"not an image")
    (folder / "3_cut.jpg").write_bytes(truncated_jpeg())
    (folder / "4_bomb.png").write_bytes(png(60, 50))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    dataset = ImageDataset(ImageFolderSource(tmp_path / "images"), ImageView(8, augment=False), 3, max_bad_fraction=1)
    dataset.__getitems__(list(range(5)))
    assert [(Path(name).name, kind) for name, kind in dataset.skipped()] == [
        ("1_bomb.png", "too-large"), ("2_text.png", "not-an-image"), ("3_cut.jpg", "truncated"),
        ("4_bomb.png", "too-large")]
    summary = skip_summary(dataset.skipped(), total=6)
    assert summary.startswith("6 image(s) skipped: 2 larger than PIL's decompression-bomb limit of 2,000 pixels")
    assert "1_bomb.png, " in summary and "4_bomb.png): shrink it first" in summary
    assert "; 1 not an image PIL can read (e.g. " in summary and "; 1 truncated or corrupt (e.g. " in summary
    assert summary.endswith("; 2 on other processes")


def test_evaluation_logs_and_records_its_skips_from_the_cache_too(tmp_path, caplog, tiny_model_config):
    from types import SimpleNamespace

    from accelerate import Accelerator
    from devices import USE_CPU

    from mpp.config.data import DataConfig
    from mpp.config.runs import EvaluationRunConfig
    from mpp.evaluation.frozen_encoder import EvaluationRun
    from mpp.models.encoder import ImageEncoder, InputNormalisation, create_encoder

    folder = tmp_path / "images" / "a"
    folder.mkdir(parents=True)
    for i in range(5):
        (folder / f"{i}.png").write_bytes(png(20, 20 + i))
    (folder / "5.png").write_bytes(b"not an image")
    config = EvaluationRunConfig(data=DataConfig(source=f"folder:{tmp_path / 'images'}", max_bad_fraction=0.5))
    extractor = ImageEncoder(create_encoder(tiny_model_config), InputNormalisation((0.5,) * 3, (0.5,) * 3, 3))
    session = SimpleNamespace(accelerator=Accelerator(cpu=USE_CPU), run_dir=tmp_path / "run")
    caplog.set_level(logging.INFO, logger="mpp")
    for attempt in ("extracted", "read from the cache"):
        dataset = ImageDataset(ImageFolderSource(tmp_path / "images"), ImageView(16, augment=False), 3,
                               max_bad_fraction=0.5)
        # on the run's device, as the evaluation recipes prepare it
        run = EvaluationRun(session, session.accelerator.prepare_model(extractor.eval(), evaluation_mode=True),
                            dataset, dataset, config)
        features, _ = run.features(dataset, "train")
        assert len(features) == 6 and run.skipped_images == {"train": 1}, attempt
    logged = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert "train images: 1 image(s) skipped: 1 not an image PIL can read (e.g. " in logged[0]
    assert logged[1].startswith("train: 1 image(s) were skipped as undecodable when these features were extracted")
