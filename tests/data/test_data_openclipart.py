from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch
from PIL import Image

from mpp.data.openclipart import DEFAULT_ROOT, EXCLUDED, MIN_IMAGES, TEST_FRACTION, openclipart_source, split_files
from mpp.errors import DataError


def draw(path: Path, colour: tuple[int, int, int]) -> None:
    """A small transparent drawing: a coloured square in the middle of a clear canvas."""
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.new("RGBA", (12, 8), (0, 0, 0, 0))
    image.paste(Image.new("RGBA", (4, 4), (*colour, 255)), (4, 2))
    image.save(path)


@pytest.fixture(autouse=True)
def cache_in(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "mpp"


@pytest.fixture
def clip_art(tmp_path) -> Path:
    """animals (with a sub-folder) and food with enough images each, a small category, an excluded one, and links
    as the package has them: to a drawing of the same category, and to one of another."""
    root = tmp_path / "png"
    for i in range(MIN_IMAGES + 10):
        draw(root / "animals" / ("birds" if i % 2 else "") / f"a{i:03d}.png", (200, 30, 30))
        draw(root / "food" / f"f{i:03d}.png", (30, 200, 30))
        draw(root / "shapes" / f"s{i:03d}.png", (30, 30, 200))
    for i in range(5):
        draw(root / "logos" / f"l{i}.png", (9, 9, 9))
    (root / "animals" / "again.png").symlink_to(root / "animals" / "a000.png")
    (root / "food" / "elsewhere.png").symlink_to(root / "animals" / "a002.png")
    return root


def test_categories_with_enough_images_less_the_excluded_split_by_file_the_same_every_time(clip_art):
    assert "shapes" in EXCLUDED
    train, test = openclipart_source(str(clip_art), "train", 8), openclipart_source(str(clip_art), "test", 8)
    assert train.class_names == test.class_names == ("animals", "food")
    assert torch.bincount(test.labels).tolist() == [round(TEST_FRACTION * (MIN_IMAGES + 10))] * 2
    assert len(train) + len(test) == 2 * (MIN_IMAGES + 10)
    # Each category's drawings are one colour here, so the pixels say which class each row holds.
    red = train.array[:, 0, 4, 4] > train.array[:, 1, 4, 4]
    assert torch.equal(red, train.labels == 0)


def test_another_split_seed_draws_another_test_split_of_the_same_size_and_the_pool_leaves_it_out(clip_art):
    from mpp.data.openclipart import pool_files

    (_, test0, _), (_, test1, labels1), (_, train1, _) = (split_files(clip_art, split, seed) for split, seed in
                                                          (("test", 0), ("test", 1), ("train", 1)))
    assert len(test0) == len(test1) and set(test0) != set(test1)
    assert not set(test1) & set(train1) and len(test1) + len(train1) == 2 * (MIN_IMAGES + 10)
    assert torch.bincount(torch.tensor(labels1)).tolist() == [round(TEST_FRACTION * (MIN_IMAGES + 10))] * 2
    pool = {os.path.realpath(path) for path in pool_files(clip_art, 1)}
    assert not pool & {os.path.realpath(path) for path in test1}
    assert {os.path.realpath(path) for path in train1} <= pool
    said = openclipart_source(str(clip_art), "test", 8, split_seed=1).description
    assert ", split seed 1," in said and "split seed" not in openclipart_source(str(clip_art), "test", 8).description


def test_each_drawing_is_whole_on_white_and_cached(clip_art, cache_in):
    test = openclipart_source(str(clip_art), "test", 12)
    image = test.array[0]  # (3 12 12): the 12x8 drawing centred on a white square
    assert test.labels[0] == 0 and image.shape == (3, 12, 12)
    assert image[:, 0, 0].tolist() == [255, 255, 255]  # above the drawing: white canvas
    assert image[:, 3, 0].tolist() == [255, 255, 255]  # the drawing's clear corner: white, not black
    assert image[:, 6, 6].tolist() == pytest.approx([200, 30, 30], abs=3)  # the animal's red square
    assert len(list(cache_in.glob("openclipart-test-12px-*.pt"))) == 1
    assert torch.equal(openclipart_source(str(clip_art), "test", 12).array, test.array)  # read back from the cache


def test_a_damaged_cache_is_decoded_again_with_one_warning_and_written_whole(clip_art, cache_in, caplog):
    decoded = openclipart_source(str(clip_art), "test", 12)
    (cache,) = cache_in.glob("openclipart-test-12px-*.pt")
    cache.write_bytes(cache.read_bytes()[: cache.stat().st_size // 2])  # truncated, as by a full disk or a kill
    with caplog.at_level(logging.WARNING):
        again = openclipart_source(str(clip_art), "test", 12)
    assert torch.equal(again.array, decoded.array)
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(f"the cache {cache} cannot be read (")
    assert warnings[0].endswith("); making it again")
    caplog.clear()
    assert torch.equal(openclipart_source(str(clip_art), "test", 12).array, decoded.array)  # whole again
    assert not caplog.records or all(record.levelno < logging.WARNING for record in caplog.records)


def test_a_changed_file_is_decoded_again_and_one_that_fails_is_left_out(clip_art, cache_in):
    total = sum(len(openclipart_source(str(clip_art), split, 8)) for split in ("train", "test"))
    (clip_art / "food" / "f000.png").write_bytes(b"not a png any more")
    assert sum(len(openclipart_source(str(clip_art), split, 8)) for split in ("train", "test")) == total - 1
    assert len(list(cache_in.glob("openclipart-*-8px-*.pt"))) == 3  # the changed split's cache is a new one


def test_two_runs_decoding_a_split_at_once_both_get_it_and_leave_one_whole_cache(clip_art, cache_in, monkeypatch):
    """As a reproduction's first two runs do: a second decode of the same split writes its cache while the first is
    still writing its own; neither takes the other's file from under it."""
    save = torch.save

    def save_while_another_run_saves(value, path):
        save(value, path)
        monkeypatch.setattr(torch, "save", save)
        second.append(openclipart_source(str(clip_art), "test", 8))  # the other run, finishing first

    second = []
    monkeypatch.setattr(torch, "save", save_while_another_run_saves)
    first = openclipart_source(str(clip_art), "test", 8)
    assert torch.equal(first.array, second[0].array)
    assert [path.suffix for path in cache_in.iterdir()] == [".pt"]  # one cache, no partial left
    assert torch.equal(openclipart_source(str(clip_art), "test", 8).array, first.array)


def test_a_missing_clip_art_folder_says_how_to_install_it(tmp_path):
    with pytest.raises(DataError, match="apt-get install -y openclipart-png"):
        openclipart_source(str(tmp_path / "absent"), "train", 8)


@pytest.mark.skipif(not Path(DEFAULT_ROOT).is_dir(), reason="the openclipart-png package is not installed")
def test_the_debian_package_gives_ten_categories_each_drawing_once():
    (names, train, _), (_, test, _) = (split_files(Path(DEFAULT_ROOT), split) for split in ("train", "test"))
    assert len(names) == 10 and not set(EXCLUDED) & set(names)
    drawings = [os.path.realpath(path) for path in train + test]
    assert len(set(drawings)) == len(drawings) == 4_779  # 1,221 of the package's files are links to others
    assert abs(len(test) / len(drawings) - TEST_FRACTION) < 0.01
