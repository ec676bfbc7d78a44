"""data.decode_cache: a folder's large images decoded once, at the size the views need, and read back as decoded."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from mpp.config.data import DataConfig
from mpp.data.image_dataset import ImageDataset, ImageView
from mpp.data.image_folder import ImageFolderSource
from mpp.data.loading import build_dataset
from mpp.errors import DataError


@pytest.fixture
def cache_in(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "mpp" / "decoded"


def drawing(height: int, width: int, shift: int = 0) -> np.ndarray:
    """Stripes and a ramp: detail at every scale, so that a wrong box or a wrong file shows."""
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([(x // 7 + shift) % 256, (y // 5) % 256, (x + y) // 9 % 256], -1).astype(np.uint8)


@pytest.fixture
def folder(tmp_path) -> Path:
    (tmp_path / "images" / "a").mkdir(parents=True)
    Image.fromarray(drawing(450, 600)).save(tmp_path / "images" / "a" / "large.png")  # larger than the views need
    Image.fromarray(drawing(12, 14)).save(tmp_path / "images" / "a" / "small.png")  # smaller: read as it is
    return tmp_path / "images"


def views(source, view, cached: bool) -> torch.Tensor:
    return ImageDataset(source, view, 3, seed=3, decode_cache=cached).__getitems__([(2, 0), (2, 1)])[0]


@pytest.mark.parametrize("augment", [True, False], ids=["pre-training view", "evaluation view"])
def test_a_cached_run_reads_the_pixels_an_uncached_one_does(folder, cache_in, augment):
    source, view = ImageFolderSource(folder), ImageView(16, augment)
    plain = views(source, view, cached=False)
    first = views(source, view, cached=True)  # decoded now, and kept
    assert len(list(cache_in.iterdir())) == 1  # the large file only
    again = views(source, view, cached=True)  # read back: no decode
    assert torch.equal(first, again)
    # The same boxes (drawn from the file's own size), resampled from the kept pixels: within a few levels
    assert (first.int() - plain.int()).abs().max() <= 3
    large, small = source.files.index(folder / "a" / "large.png"), source.files.index(folder / "a" / "small.png")
    assert torch.equal(first[small], plain[small])  # no larger than the views need: read as it is, its very pixels
    assert first[large].float().std() > 10  # a real view, not a blank


def test_the_cache_keeps_the_shorter_side_the_views_need(folder, cache_in):
    source = ImageFolderSource(folder)
    view = ImageView(16, augment=True)
    views(source, view, cached=True)
    (entry,) = cache_in.iterdir()
    with np.load(entry) as kept:
        assert kept["pixels"].shape == (view.detail_short_side(), 88, 3) and kept["size"].tolist() == [600, 450]
    assert view.detail_short_side() == 66  # 16 / (sqrt(0.08) x sqrt(3/4)): the smallest crop keeps 16 px each way


def test_a_changed_file_is_decoded_again(folder, cache_in):
    source, view = ImageFolderSource(folder), ImageView(16, augment=False)
    before = views(source, view, cached=True)
    path = folder / "a" / "large.png"
    Image.fromarray(drawing(450, 600, shift=100)).save(path)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # a later time, whatever the clock
    after = views(source, view, cached=True)
    assert len(list(cache_in.iterdir())) == 2  # a new entry for the new file
    large = source.files.index(path)
    assert (after.int() - views(source, view, cached=False).int()).abs().max() <= 3  # the new drawing's views
    assert (after[large].int() - before[large].int()).abs().max() > 50


def test_the_cache_is_for_folders_decoded_on_the_cpu(folder, cache_in):
    with pytest.raises(DataError, match="data.decode_cache keeps the decoded images of a folder: source, and shapes"):
        build_dataset(DataConfig(decode_cache=True), "train", 16, channels=3, augment=True)
    dataset = build_dataset(DataConfig(source=f"folder:{folder}", decode_cache=True), "train", 16, channels=3,
                            augment=False)
    assert dataset.decode_cache is not None and dataset.subset(torch.tensor([0])).decode_cache is not None
