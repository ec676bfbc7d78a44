"""The prepare step: any source written once as pre-resized parquet shards that data.source=hf:<dir> reads back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mpp.config.data import DataConfig
from mpp.data.image_source import decode, open_image
from mpp.data.loading import open_source
from mpp.data.prepare import RECORD, Settings, prepare
from mpp.errors import DataError
from tests.data.test_data_views import photo_like_jpeg


def photo_folder(root: Path) -> Path:
    for i in range(10):
        path = root / ("cat", "dog")[i % 2] / f"{i:02d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(photo_like_jpeg(120 + 8 * i, 90, seed=i))
    (root / "cat" / "99.jpg").write_bytes(b"\xff\xd8\xff\xe0 cut short")
    return root


@pytest.mark.slow
def test_a_folder_prepared_once_reads_back_resized_with_its_labels_and_class_names(tmp_path):
    source = f"folder:{photo_folder(tmp_path / 'photos')}"
    settings = Settings(source, (), short_side=48, quality=90, shard_size=4)
    record = prepare(settings, tmp_path / "prepared", ["train", "test"], workers=1)
    assert record["complete"] and list(record["splits"]) == ["train"]  # a folder without eval_folder: no test split
    assert [skipped for shard in record["splits"]["train"]["shards"].values() for skipped in shard["skipped"]] == [
        [str(tmp_path / "photos" / "cat" / "99.jpg"), "truncated"]]  # its name, and why
    original = open_source(DataConfig(source=source), "train", 48)
    prepared = open_source(DataConfig(source=f"hf:{tmp_path / 'prepared'}", hf_cache_dir=str(tmp_path / "cache")),
                           "train", 48)
    kept = [i for i in range(len(original)) if not original.files[i].name.startswith("99")]
    assert prepared.class_names == original.class_names == ("cat", "dog")
    assert prepared.labels.tolist() == original.labels[kept].tolist()
    for position, index in enumerate(kept):
        width, height = open_image(original.encoded(index)).size
        # the shorter side, brought down
        assert open_image(prepared.encoded(position)).size == (round(width * 48 / height), 48)
    # the same content, resized: compare both at the prepared size
    first = decode(open_image(prepared.encoded(0)), "RGB")
    again = decode(open_image(original.encoded(kept[0])), "RGB").resize(first.size)
    difference = np.asarray(first, dtype=float) - np.asarray(again, dtype=float)
    assert np.abs(difference).mean() < 4  # of 255: JPEG re-encoding and resampling differences only


@pytest.mark.slow
def test_an_interrupted_preparation_continues_and_a_finished_one_is_never_overwritten(tmp_path):
    settings = Settings(f"folder:{photo_folder(tmp_path / 'photos')}", (), short_side=32, quality=90, shard_size=4)
    out = tmp_path / "prepared"
    prepare(settings, out, ["train"], workers=1)
    with pytest.raises(DataError, match="holds a finished prepared dataset"):
        prepare(settings, out, ["train"], workers=1)
    # interrupted after shards 0 and 2: shard 1 never renamed from .partial, the record not complete
    record = json.loads((out / RECORD).read_text())
    del record["splits"]["train"]["shards"]["1"]
    record["complete"] = False
    (out / RECORD).write_text(json.dumps(record))
    shard_1 = next((out / "data").glob("train-00001-*"))
    shard_1.rename(shard_1.with_name(shard_1.name + ".partial"))
    kept = {path: path.stat().st_mtime_ns for path in (out / "data").glob("*.parquet")}
    with pytest.raises(DataError, match="other settings"):
        prepare(Settings(settings.source, (), 64, 90, 4), out, ["train"], workers=1)
    finished = prepare(settings, out, ["train"], workers=1)
    assert finished["complete"] and shard_1.is_file()
    assert all(path.stat().st_mtime_ns == mtime for path, mtime in kept.items())  # done shards not rewritten
    assert sum(shard["rows"] for shard in finished["splits"]["train"]["shards"].values()) == 10
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("mine")
    with pytest.raises(DataError, match="not a prepared dataset"):
        prepare(settings, tmp_path / "notes", ["train"], workers=1)


@pytest.mark.slow
def test_a_folder_linked_into_itself_is_prepared_once_per_file(tmp_path):
    photos = photo_folder(tmp_path / "photos")
    (photos / "cat" / "up").symlink_to("..")  # without care, the scan goes round cat -> photos -> cat ... 40 times
    record = prepare(Settings(f"folder:{photos}", (), short_side=32, quality=90, shard_size=4), tmp_path / "out",
                     ["train"], workers=1)
    assert sum(shard["rows"] for shard in record["splits"]["train"]["shards"].values()) == 10  # 11 files, 1 broken


def test_splits_and_overrides_parse_in_any_order_with_or_without_data_before_a_key(monkeypatch, capsys):
    import mpp.data.prepare as preparing

    asked = []
    monkeypatch.setattr(preparing, "prepare", lambda settings, out, splits, workers: asked.append(
        (settings.overrides, splits)) or {"splits": {}})
    preparing.main(["folder:/images", "/out", "--splits", "train", "test", "eval_folder=/held-out"])
    preparing.main(["folder:/images", "/out", "eval_folder=/held-out", "--splits", "test"])
    preparing.main(["folder:/images", "/out", "data.eval_folder=/held-out"])  # as a missing test split's message says
    assert asked == [(("eval_folder=/held-out",), ["train", "test"]), (("eval_folder=/held-out",), ["test"]),
                     (("eval_folder=/held-out",), ["train", "test"])]
    with pytest.raises(SystemExit):
        preparing.main(["folder:/images", "/out", "--splits", "validation"])
    assert "--splits takes train, test or both, not validation" in capsys.readouterr().err


@pytest.mark.slow
def test_no_more_processes_start_than_there_are_shards_to_write(tmp_path, monkeypatch):
    import mpp.data.prepare as preparing

    started = []
    spawn = preparing.multiprocessing.get_context("spawn")

    class CountedContext:
        def Pool(self, processes):  # noqa: N802 (multiprocessing's name)
            started.append(processes)
            return spawn.Pool(processes)

    monkeypatch.setattr(preparing.multiprocessing, "get_context", lambda method: CountedContext())
    source = f"folder:{photo_folder(tmp_path / 'photos')}"  # 11 files
    for shard_size in (8, 16):  # 2 shards, then 1
        prepare(Settings(source, (), short_side=32, quality=90, shard_size=shard_size),
                tmp_path / f"prepared-{shard_size}", ["train"], workers=8)
    assert started == [2, 1]
