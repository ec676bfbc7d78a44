"""Every source reads its real on-disk format (written here, small), and bad input gets an error naming the fix."""

from __future__ import annotations

import gzip
import logging
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from mpp.config.data import DataConfig
from mpp.data.image_folder import ImageFolderSource
from mpp.data.image_source import UndecodableImage, decode, open_image
from mpp.data.loading import DataError, build_dataset, open_source

rng = np.random.default_rng(0)


@pytest.fixture
def idx_dir(fashion_mnist_dir) -> Path:
    return fashion_mnist_dir(rng.integers(0, 256, (30, 28, 28)), rng.integers(0, 256, (10, 28, 28)))


def test_fashion_mnist_reads_idx_files(idx_dir):
    source = open_source(DataConfig(source=f"fashion-mnist:{idx_dir}"), "train", 28)
    raw = np.frombuffer(gzip.decompress((idx_dir / "train-images-idx3-ubyte.gz").read_bytes())[16:], np.uint8)
    assert len(source) == 30 and source.channels == 1 and source.class_names[9] == "Ankle boot"
    assert torch.equal(source.images(torch.tensor([2]))[0, 0], torch.from_numpy(raw.reshape(30, 28, 28)[2].copy()))
    assert source.labels.tolist() == list(range(30))
    assert len(open_source(DataConfig(source=f"fashion-mnist:{idx_dir}"), "test", 28)) == 10


def test_fashion_mnist_missing_files_say_how_to_install(tmp_path):
    with pytest.raises(DataError, match=r"apt-get install dataset-fashion-mnist") as error:
        open_source(DataConfig(source=f"fashion-mnist:{tmp_path}"), "train", 28)
    assert "train-images-idx3-ubyte" in str(error.value)


def test_fashion_mnist_rejects_a_file_that_is_not_idx(idx_dir):
    (idx_dir / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"<html>not found</html>"))
    with pytest.raises(DataError, match="not an IDX file"):
        open_source(DataConfig(source=f"fashion-mnist:{idx_dir}"), "train", 28)


def write_cifar(root: Path, kind: str) -> np.ndarray:
    """The python-pickle layout as distributed; returns the training images (n 3 32 32)."""
    if kind == "cifar10":
        folder, files, meta = root / "cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], "batches.meta"
        label_key, names = b"labels", {b"label_names": [f"c{i}".encode() for i in range(10)]}
    else:
        folder, files, meta = root / "cifar-100-python", ["train"], "meta"
        label_key, names = b"fine_labels", {b"fine_label_names": [f"f{i}".encode() for i in range(100)]}
    folder.mkdir(parents=True)
    train = rng.integers(0, 256, (4 * len(files), 3072), dtype=np.uint8)
    for i, name in enumerate(files + ["test_batch" if kind == "cifar10" else "test"]):
        data = train[4 * i:4 * i + 4] if i < len(files) else train[:2]
        batch = {b"data": data, label_key: list(range(len(data)))}
        (folder / name).write_bytes(pickle.dumps(batch))
    (folder / meta).write_bytes(pickle.dumps(names))
    return train.reshape(-1, 3, 32, 32)


@pytest.mark.parametrize("kind", ["cifar10", "cifar100"])
def test_cifar_reads_the_python_pickles(tmp_path, kind):
    train = write_cifar(tmp_path, kind)
    source = open_source(DataConfig(source=f"{kind}:{tmp_path}"), "train", 32)
    assert len(source) == len(train) and source.num_classes == (10 if kind == "cifar10" else 100)
    assert torch.equal(source.images(torch.arange(len(train))), torch.from_numpy(train))
    assert len(open_source(DataConfig(source=f"{kind}:{tmp_path}"), "test", 32)) == 2


def test_cifar_missing_folder_says_where_to_get_it(tmp_path):
    with pytest.raises(DataError, match=r"cifar-10-batches-py/batches\.meta.*cifar-10-python\.tar\.gz"):
        open_source(DataConfig(source=f"cifar10:{tmp_path}"), "train", 32)


def write_folder(root: Path, classes: dict[str, int], size=(20, 14)) -> None:
    for name, count in classes.items():
        (root / name).mkdir(parents=True)
        for i in range(count):
            pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.{'png' if i % 2 else 'jpg'}")


def test_folder_reads_classes_from_sub_folders_with_a_separate_validation_folder(tmp_path):
    write_folder(tmp_path / "train", {"cat": 3, "dog": 2})
    write_folder(tmp_path / "val", {"dog": 2})  # a validation folder may lack a class; indices stay the training's
    (tmp_path / "train" / "cat" / "notes.txt").write_text("not an image")
    cfg = DataConfig(source=f"folder:{tmp_path / 'train'}", eval_folder=str(tmp_path / "val"))
    train, val = open_source(cfg, "train", 16), open_source(cfg, "test", 16)
    assert train.class_names == ("cat", "dog") and train.labels.tolist() == [0, 0, 0, 1, 1]
    assert val.labels.tolist() == [1, 1]
    opened = open_image(train.encoded(1))
    assert opened.size == (14, 20) and decode(opened, train.mode).mode == "RGB"
    images, labels, _ = build_dataset(cfg, "test", 8, channels=3, augment=False).__getitems__([0, 1])
    assert images.shape == (2, 3, 8, 8) and labels.tolist() == [1, 1]


def test_folder_errors_name_the_path_and_the_layout(tmp_path):
    with pytest.raises(DataError, match=r"does not exist.*class name"):
        open_source(DataConfig(source=f"folder:{tmp_path / 'nowhere'}"), "train", 16)
    (tmp_path / "flat").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / "flat" / "a.png")
    assert len(open_source(DataConfig(source=f"folder:{tmp_path / 'flat'}"), "train", 16).files) == 1  # one class
    (tmp_path / "nothing").mkdir()
    with pytest.raises(DataError, match="holds no image files"):
        open_source(DataConfig(source=f"folder:{tmp_path / 'nothing'}"), "train", 16)
    (tmp_path / "empty" / "cat").mkdir(parents=True)
    with pytest.raises(DataError, match="holds no image files"):
        open_source(DataConfig(source=f"folder:{tmp_path / 'empty'}"), "train", 16)
    with pytest.raises(DataError, match="data.eval_folder"):
        open_source(DataConfig(source=f"folder:{tmp_path / 'flat'}"), "test", 16)


def test_unknown_sources_list_the_valid_ones():
    with pytest.raises(DataError, match=r"(?s)unknown source 'imagenet'.*fashion-mnist.*folder:<dir>"):
        DataConfig(source="imagenet:/data")
    with pytest.raises(DataError, match="needs a location"):
        DataConfig(source="folder")


def test_decode_converts_grey_and_composites_transparency_on_white_and_rejects_broken_bytes(tmp_path):
    Image.new("LA", (5, 3), (200, 255)).save(tmp_path / "grey.png")
    Image.new("LA", (5, 3), (0, 51)).save(tmp_path / "faint.png")  # black at a fifth opacity
    Image.new("RGBA", (5, 3), (1, 2, 3, 0)).save(tmp_path / "clear.png")
    palette = Image.new("P", (5, 3), 1)
    palette.putpalette([0, 0, 0, 255, 0, 0])
    palette.save(tmp_path / "palette.png", transparency=1)  # colour 1, red, marked transparent
    assert np.asarray(decode(open_image(tmp_path / "grey.png"), "RGB")).tolist() == [[[200] * 3] * 5] * 3
    assert np.asarray(decode(open_image(tmp_path / "faint.png"), "RGB")).tolist() == [[[204] * 3] * 5] * 3
    for transparent in ("clear.png", "palette.png"):
        assert np.asarray(decode(open_image(tmp_path / transparent), "RGB")).tolist() == [[[255] * 3] * 5] * 3
    assert decode(open_image((tmp_path / "clear.png").read_bytes()), "L").mode == "L"
    with pytest.raises(UndecodableImage):
        open_image(b"\xff\xd8\xff\xe0 truncated jpeg")


def test_every_source_kind_the_config_accepts_has_a_reader():
    from mpp.config.data import SOURCE_KINDS
    from mpp.data.loading import READERS

    assert READERS.keys() == SOURCE_KINDS.keys()


def test_a_folder_scan_follows_links_but_reads_each_file_once_and_never_loops(tmp_path, caplog):
    root, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    for i in range(80):
        path = root / "ab"[i % 2] / f"{i:02d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (4, 4), (i, 0, 0)).save(path)
    (elsewhere / "birds").mkdir(parents=True)
    Image.new("RGB", (4, 4)).save(elsewhere / "birds" / "linked-in.png")
    (root / "a" / "up").symlink_to("..")  # a loop: a -> data -> a -> ...
    (root / "a" / "birds").symlink_to(elsewhere / "birds")  # a dataset linked in: followed
    (root / "b" / "again.png").symlink_to(root / "a" / "00.png")  # one file, reached twice
    with caplog.at_level(logging.WARNING, logger="mpp.data.image_folder"):
        source = ImageFolderSource(root)
    assert len(source) == 81 and torch.bincount(source.labels).tolist() == [41, 40]
    assert len({os.path.realpath(path) for path in source.files}) == 81
    assert any(path.name == "linked-in.png" for path in source.files)
    (warning,) = [record.getMessage() for record in caplog.records]  # said once, for the whole folder
    assert "1 files reached a second time through symbolic links, read once" in warning  # b/again.png
    assert "1 linked folders already read, or parents (loops), not entered" in warning  # a/up
