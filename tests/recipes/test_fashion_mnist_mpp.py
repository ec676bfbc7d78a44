"""Integration: MPP pre-training on real data (a Fashion-MNIST subset, from the Debian package), its command line
run in the test's process, learns more than the colour statistics: its accuracy on corrupted patches beats always
predicting the most frequent colour class of the same images."""

from __future__ import annotations

import json

import pytest

from mpp.config.data import DataConfig
from mpp.config.model import ModelConfig, MPPConfig
from mpp.config.building import config_to_dict
from mpp.data.loading import build_dataset, sample_images
from mpp.models.encoder import create_encoder
from mpp.models.masked_patch_prediction import MaskedPatchPredictor, mpp_majority_class_accuracy
from tests.launching import run_here

pytestmark = pytest.mark.slow  # every test here launches a recipe or trains (pytest -m "not slow" leaves them out)

MODEL = ModelConfig(name="vit_tiny_patch16_224", img_size=28, patch_size=4, embed_dim=48, depth=2, num_heads=3,
                    in_chans=1)
DATA = DataConfig(source="fashion-mnist", shots_per_class=100, mean=(0.286,), std=(0.353,), crop_scale=(0.35, 1.0))


def overrides(section: str, config: object) -> list[str]:
    """The command-line overrides that make the recipe's ``section`` equal ``config``."""
    default = config_to_dict(type(config)())
    return [f"{section}.{key}={value}" for key, value in config_to_dict(config).items() if value != default[key]]


def test_mpp_on_fashion_mnist_beats_the_most_frequent_colour(tmp_path):
    run_dir = tmp_path / "run"
    run_here(
        f"output_dir={run_dir}", *overrides("model", MODEL), *overrides("data", DATA), "train.steps=300",
        "train.global_batch_size=32", "train.lr=2e-3", "train.warmup_steps=20", "train.log_every=50",
        "train.checkpoint_every=300",
    )
    metrics = json.loads((run_dir / "metrics.json").read_text())

    # The baseline over every image of the 1,000-image subset, as the first epoch's augmented views show them.
    dataset = build_dataset(DATA, "train", 28, channels=1, augment=True, seed=0)
    model = MaskedPatchPredictor(create_encoder(MODEL), MPPConfig(), DATA.mean, DATA.std)
    baseline = mpp_majority_class_accuracy(model, sample_images(dataset, len(dataset), seed=0))
    assert len(dataset) == 1000 and 0.2 < baseline < 0.6
    assert metrics["mpp_accuracy"] > baseline + 0.05, (metrics["mpp_accuracy"], baseline)
    assert abs(metrics["mpp_majority_class_accuracy"] - baseline) < 0.02  # the recipe's own estimate agrees
