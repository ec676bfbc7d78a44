from __future__ import annotations

import gzip
import os
import struct
import subprocess
import types
from pathlib import Path

# The suite runs many processes at once (CI's lanes over the cores, the XLA lane beside them, tests that launch runs),
# each with torch's OpenMP threads, set here before torch loads OpenMP. Threads that spin while they wait take the
# cores from the other processes' work; waiting passively, they sleep (two runs of 2 threads each on 2 cores,
# measured: 163 s spinning, 39 s passive).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import pytest
import torch

from devices import TEST_DEVICE
from mpp.config.model import ModelConfig


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cpu_only(reason): runs on the CPU by design; skipped with MPP_TEST_DEVICE=cuda")
    config.addinivalue_line("markers", "slow: launches a recipe or trains for more than a few seconds; the fast lane, "
                                       "pytest -m 'not slow', leaves it out")
    config.addinivalue_line("markers", "many_runs: runs a grid of recipe runs (an experiment, a tool's whole plan), "
                                       "minutes; collected first, so that over several workers the other tests fill "
                                       "the time around it instead of waiting behind it")
    if TEST_DEVICE not in ("cpu", "cuda"):
        raise pytest.UsageError(f"MPP_TEST_DEVICE={TEST_DEVICE}: use cpu (the default) or cuda")
    if TEST_DEVICE == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("MPP_TEST_DEVICE=cuda, but torch sees no CUDA device here")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("many_runs") is None)  # stable: otherwise in file order
    if TEST_DEVICE == "cpu":
        return
    for item in items:
        marker = item.get_closest_marker("cpu_only")
        if marker is not None:
            item.add_marker(pytest.mark.skip(reason=f"CPU-only by design: {marker.args[0]}"))


@pytest.fixture
def tiny_model_config() -> ModelConfig:
    """A ViT small enough for unit tests: 16x16 images, 4x4 patches (16 of them), width 32, 2 blocks."""
    return ModelConfig(name="vit_tiny_patch16_224", img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2)


@pytest.fixture(autouse=True)
def seeded() -> None:
    torch.manual_seed(0)


def write_idx(path: Path, array: np.ndarray) -> None:
    """A gzipped IDX file of unsigned bytes, as Fashion-MNIST is distributed."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape)
    path.write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))


@pytest.fixture
def fashion_mnist_dir(tmp_path):
    """Writes Fashion-MNIST's four IDX files into a folder: (train images, test images) -> the folder; labels are
    the image indices modulo 256."""

    def write(train: np.ndarray, test: np.ndarray) -> Path:
        folder = tmp_path / "fashion-mnist"
        folder.mkdir()
        for split, images in (("train", train), ("t10k", test)):
            write_idx(folder / f"{split}-images-idx3-ubyte.gz", images)
            write_idx(folder / f"{split}-labels-idx1-ubyte.gz", np.arange(len(images)) % 256)
        return folder

    return write


@pytest.fixture
def experiment_runs_here(monkeypatch):
    """An experiment's runs (``mpp.experiments.runner``) each in the test's process, one at a time (``RunHere``),
    instead of a process of their own: for the tests of what an experiment plans, records and tables, where a toy run
    is mostly its process start (about 4 s of imports). The runner's own processes, stops and continuations are
    tested apart (tests/study/test_reproduction.py)."""
    from launching import RunHere
    from mpp.experiments import runner

    monkeypatch.setattr(runner, "subprocess", types.SimpleNamespace(Popen=RunHere, STDOUT=subprocess.STDOUT))
