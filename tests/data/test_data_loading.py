"""Loading: broken files skipped and counted across loader workers, and distinct shards per process."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mpp.config.data import DataConfig
from mpp.data.loading import (
    build_dataset,
    build_loader,
    check_batch_fits,
    check_classes_to_learn,
    warn_if_tested_on_training_images,
)
from mpp.errors import DataError
from tests.launching import NO_MPP_MONITORS, ROOT, TINY, launch, run_here

SCRIPTS = Path(__file__).parents[1] / "scripts"


def folder_with_broken_files(root: Path, good: int, broken: int) -> Path:
    for i in range(good + broken):
        folder = root / f"class_{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        if i < good:
            Image.new("RGB", (6, 5), (i, 0, 0)).save(folder / f"{i:03d}.png")
        elif i % 2:  # its header readable, its pixels cut short: fails when the view decodes it
            photo = np.random.default_rng(i).integers(0, 256, (48, 64, 3), dtype=np.uint8)
            Image.fromarray(photo).save(folder / f"{i:03d}.jpg", quality=90)
            data = (folder / f"{i:03d}.jpg").read_bytes()
            (folder / f"{i:03d}.jpg").write_bytes(data[:len(data) * 2 // 3])
        else:  # not even a header
            (folder / f"{i:03d}.jpg").write_bytes(b"\xff\xd8\xff\xe0 cut short")
    return root


STOP_SIGNAL_TO_THE_GROUP = """
import os, signal, sys, torch
from torch.utils.data import Dataset
from mpp.config.data import DataConfig
from mpp.data.loading import build_loader

class Numbers(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        return torch.tensor(index)

received = []
signal.signal(signal.SIGTERM, lambda number, frame: received.append(number))
batches = iter(build_loader(Numbers(), 4, DataConfig(num_workers=2, prefetch_factor=1), train=True))
next(batches), next(batches)  # one from each worker: both have started (and left the group)
os.killpg(os.getpgrp(), signal.SIGTERM)  # as a scheduler sends it: the whole process group
print(len(received), 2 + len(list(batches)), flush=True)
stopped = iter(build_loader(Numbers(), 4, DataConfig(num_workers=2, prefetch_factor=1), train=True))
next(stopped)  # workers still running at the exit, as after a checkpoint on preemption: the exit must end them
"""


def test_a_stop_signal_to_the_whole_process_group_leaves_the_loader_workers_loading(tmp_path):
    # The training process must still get its next batches (to save its checkpoint), not fail on a worker killed by
    # the signal, and exit (its workers ended) when it is done.
    result = subprocess.run([sys.executable, "-c", STOP_SIGNAL_TO_THE_GROUP], capture_output=True, text=True,
                            timeout=60, start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["1", "16"]  # the signal received once, and every batch of the epoch


def test_undecodable_files_are_skipped_and_counted_across_workers(tmp_path):
    cfg = DataConfig(source=f"folder:{folder_with_broken_files(tmp_path, good=18, broken=2)}", num_workers=2,
                     max_bad_fraction=0.2)
    dataset = build_dataset(cfg, "train", 4, channels=3, augment=True)
    batches = list(build_loader(dataset, batch_size=5, cfg=cfg, train=True))
    assert len(batches) == 4 and all(images.shape == (5, 3, 4, 4) for images, _, _ in batches)
    assert dataset.skipped_count() == 2  # recorded by the worker processes, read here
    assert sorted(Path(name).name for name in dataset.undecodable_files()) == ["018.jpg", "019.jpg"]


def test_more_broken_files_than_allowed_stop_with_a_clear_message(tmp_path):
    cfg = DataConfig(source=f"folder:{folder_with_broken_files(tmp_path, good=6, broken=4)}", num_workers=1,
                     max_bad_fraction=0.2)
    loader = build_loader(build_dataset(cfg, "train", 4, channels=3, augment=False), batch_size=10, cfg=cfg,
                          train=True)
    with pytest.raises(DataError, match=r"3 of 10 images .* could not be decoded .*data.max_bad_fraction=0.2"):
        list(loader)


@pytest.mark.slow
def test_a_folder_too_small_for_a_batch_says_first_what_is_wrong_with_its_files(tmp_path):
    # Every file broken: no batch size would help, so the error says so and names some.
    cfg = DataConfig(source=f"folder:{folder_with_broken_files(tmp_path / 'bad', good=0, broken=20)}")
    dataset = build_dataset(cfg, "train", 4, channels=3, augment=True)
    with pytest.raises(DataError, match=r"none of the 20 images of image folder .* can be decoded \(e.g. .*000.jpg: .*"
                                        r"; check that data.source points at image files") as refused:
        check_batch_fits(dataset, 64)
    assert "micro_batch_size" not in str(refused.value)
    # Some readable: the batch size is the fix, and the broken files are still counted.
    cfg = DataConfig(source=f"folder:{folder_with_broken_files(tmp_path / 'some', good=12, broken=8)}")
    with pytest.raises(DataError, match=r"the training set has 20 images \(8 of them cannot be decoded, e.g. .*\), "
                                        r"fewer than one global batch of 64, so no step can be made of them; "
                                        r"set train.global_batch_size to 20 or less"):
        check_batch_fits(build_dataset(cfg, "train", 4, channels=3, augment=True), 64)


def read_epochs(records_of_epochs: list[list[dict]]) -> list[set[int]]:
    """Each epoch's images over all processes, checking that no image came twice in one epoch."""
    epochs = []
    for records in records_of_epochs:
        seen = [label for record in records for label in record["seen"]]
        assert len(seen) == len(set(seen)), "an image came twice in one epoch"
        epochs.append(set(seen))
    return epochs


def test_train_epochs_reads_exactly_that_many_epochs_on_one_process(tmp_path, fashion_mnist_dir):
    """train.epochs=2 of 42 images at a batch of 4: 10 steps an epoch, each reading 40 distinct images (the 2 left
    over wait for the next epoch's shuffle), and 20 steps in all: 80 images, exactly 2 epochs."""
    folder = fashion_mnist_dir(np.zeros((42, 8, 8)), np.zeros((4, 8, 8)))  # label = index
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run([sys.executable, str(SCRIPTS / "epoch_indices.py"), f"fashion-mnist:{folder}", str(out)],
                   check=True, cwd=ROOT)
    epochs = read_epochs([[json.loads((out / f"process_0_epoch_{epoch}.json").read_text())] for epoch in range(2)])
    assert [len(images) for images in epochs] == [40, 40] and epochs[0] != epochs[1]
    assert json.loads((out / "process_0_epoch_1.json").read_text())["images_read"] == 80


@pytest.mark.slow
def test_two_processes_read_distinct_shards_of_exactly_every_epoch(tmp_path, fashion_mnist_dir):
    """train.epochs=2 of 42 images on two processes at 4 each: 5 steps of 8 an epoch, 40 distinct images split
    between the processes (2 left over), 10 steps in all."""
    folder = fashion_mnist_dir(np.zeros((42, 8, 8)), np.zeros((4, 8, 8)))  # label = index
    out = tmp_path / "out"
    out.mkdir()
    launch(f"fashion-mnist:{folder}", str(out), script=SCRIPTS / "epoch_indices.py", processes=2)
    records = [[json.loads((out / f"process_{rank}_epoch_{epoch}.json").read_text()) for rank in (0, 1)]
               for epoch in range(2)]
    assert all(r["num_processes"] == 2 and r["distributed_type"] == "DistributedType.MULTI_CPU"
               for epoch in records for r in epoch)
    assert all(len(r["seen"]) == 20 for epoch in records for r in epoch)
    assert all(not set(first["seen"]) & set(second["seen"]) for first, second in records)  # distinct shards
    epochs = read_epochs(records)
    assert [len(images) for images in epochs] == [40, 40] and records[0][0]["seen"] != records[1][0]["seen"]
    assert records[1][0]["images_read"] == 80


@pytest.mark.slow
def test_the_recipe_reports_skipped_files_at_the_end_and_stops_when_too_many_fail(tmp_path):
    folder = folder_with_broken_files(tmp_path / "images", good=15, broken=1)
    tiny = [f"data.source=folder:{folder}", "data.crop_scale=[0.5,1.0]", *TINY, *NO_MPP_MONITORS]
    run_here(f"output_dir={tmp_path / 'run'}", "data.max_bad_fraction=0.1", *tiny)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["skipped_images"] == 1
    log = (tmp_path / "run" / "log.txt").read_text()
    assert "training images: 1 image(s) skipped: 1 truncated or corrupt (e.g. " in log
    assert "015.jpg): replace it with a whole copy" in log

    failed = run_here(f"output_dir={tmp_path / 'strict'}", "data.max_bad_fraction=0", *tiny, check=False)
    assert failed.returncode == 1
    assert "error: 1 of 16 images of image folder" in failed.stderr and "data.max_bad_fraction=0.0" in failed.stderr


@pytest.mark.parametrize("eval_folder", ["same path", "linked path"])
def test_testing_on_the_training_images_is_warned_about(tmp_path, caplog, eval_folder):
    root = folder_with_broken_files(tmp_path / "images", good=10, broken=0)
    (tmp_path / "link").symlink_to(root)
    evaluated = root if eval_folder == "same path" else tmp_path / "link"
    cfg = DataConfig(source=f"folder:{root}", eval_folder=str(evaluated))
    train, test = (build_dataset(cfg, split, 4, channels=3, augment=False) for split in ("train", "test"))
    with caplog.at_level(logging.WARNING, logger="mpp.data.loading"):
        warn_if_tested_on_training_images(train, test)
    (warning,) = [record.getMessage() for record in caplog.records]
    assert warning.startswith("10 of the 10 test images are training images") and "data.eval_folder" in warning


def test_separate_splits_and_a_hold_out_slice_are_not_warned_about(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="mpp.data.loading"):
        shapes = DataConfig(source="shapes", holdout_fraction=0.1)
        train = build_dataset(shapes, "train", 8, channels=3, augment=False)
        for split in ("test", "holdout"):
            warn_if_tested_on_training_images(train, build_dataset(shapes, split, 8, channels=3, augment=False))
        folders = DataConfig(source=f"folder:{folder_with_broken_files(tmp_path / 'a', good=4, broken=0)}",
                             eval_folder=str(folder_with_broken_files(tmp_path / 'b', good=4, broken=0)))
        warn_if_tested_on_training_images(*(build_dataset(folders, split, 4, channels=3, augment=False)
                                            for split in ("train", "test")))
    assert not caplog.records


def test_a_single_class_to_learn_is_refused_and_two_are_not(tmp_path):
    two = folder_with_broken_files(tmp_path / "two", good=4, broken=0)  # class_0 and class_1
    check_classes_to_learn(build_dataset(DataConfig(source=f"folder:{two}"), "train", 4, channels=3, augment=False))
    folder_with_broken_files(tmp_path / "one", good=1, broken=0)  # class_0 alone
    one = build_dataset(DataConfig(source=f"folder:{tmp_path / 'one'}"), "train", 4, channels=3, augment=False)
    with pytest.raises(DataError, match=r"image folder .*one \(1 images, 1 classes\).* has a single class, and a "
                                        r"classifier needs two or more to tell apart; give data.source a folder"):
        check_classes_to_learn(one)


def test_a_flat_folder_of_images_is_one_class_named_after_it(tmp_path):
    flat = tmp_path / "my-drawings"
    flat.mkdir()
    for i in range(3):
        Image.new("RGB", (6, 5), (i, 0, 0)).save(flat / f"{i}.png")
    dataset = build_dataset(DataConfig(source=f"folder:{flat}"), "train", 4, channels=3, augment=False)
    assert len(dataset) == 3 and dataset.class_names == ("my-drawings",) and dataset.labels.tolist() == [0, 0, 0]


def test_images_beside_class_sub_folders_are_said_to_be_left_out(tmp_path, caplog):
    root = tmp_path / "mixed"
    (root / "cats").mkdir(parents=True)
    for i in range(2):
        Image.new("RGB", (6, 5), (i, 0, 0)).save(root / "cats" / f"{i}.png")
    Image.new("RGB", (6, 5), (9, 0, 0)).save(root / "loose.png")
    (root / "notes.txt").write_text("not an image")
    with caplog.at_level(logging.WARNING, logger="mpp.data.image_folder"):
        dataset = build_dataset(DataConfig(source=f"folder:{root}"), "train", 4, channels=3, augment=False)
    assert len(dataset) == 2
    assert [record.getMessage() for record in caplog.records] == [
        f"image folder {root} holds 1 image file(s) beside its class sub-folders (e.g. loose.png), left out: move "
        "them into a sub-folder (pre-training reads every sub-folder, whatever its name)"]
