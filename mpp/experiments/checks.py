"""What an experiment on a user's images checks before any of its runs starts, so that a mistake costs seconds, not
the pre-training runs before it: every run's config builds (a mistyped key inside ``mpp=[...]`` is refused naming
the run and its list), both image sets open with what the protocols need (a train and a test split, two classes,
enough images of each class for the labelled draw), and what would make the figures mean less is said: a class of a
single image, and test images that are also among the unlabelled ones (by content, at any size).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from typing import Any

import torch
import torch.nn.functional as F

from mpp.commands import COMMANDS
from mpp.config.building import build_config
from mpp.config.runs import FinetuneRunConfig, MPPRunConfig
from mpp.data.image_dataset import ImageDataset
from mpp.data.loading import build_dataset, check_classes_to_learn, class_label
from mpp.errors import ConfigError, DataError
from mpp.experiments.runner import Run

logger = logging.getLogger(__name__)

FINGERPRINT_SIDE = 16  # an image's content fingerprint: its grey 16x16 thumbnail, each pixel above or below its mean
FEATURELESS = 0.02  # thumbnails whose pixels spread less than this (blank, one colour) are never matched


def run_config(run: Run) -> Any:
    """The config ``run``'s command (``python -m mpp <command> --config <preset> ...``) builds: its preset and the
    overrides after it."""
    at = run.command.index("--config")
    return build_config(COMMANDS[run.command[at - 1]].config_class(), run.command[at + 1], run.command[at + 2:])


def check_run_configs(runs: list[Run], lists: dict[str, str]) -> dict[str, Any]:
    """Every run's config, by run name: a run whose settings do not build is refused, naming it and the experiment's
    lists that set them (``lists``: stage -> their names)."""
    configs = {}
    for run in runs:
        try:
            configs[run.name] = run_config(run)
        except ConfigError as error:
            raise ConfigError(f"{run.name} cannot start: {error}\n(its settings come from the experiment's "
                              f"{lists[run.stage]}; nothing has run: fix them and run the same command)") from None
    return configs


def class_counts(dataset: ImageDataset) -> dict[str, int]:
    counts = Counter(dataset.labels.tolist())
    return {class_label(label, dataset.class_names): counts.get(label, 0) for label in range(dataset.num_classes)}


def check_labelled_images(finetuning: FinetuneRunConfig, per_class: int, what: str) -> ImageDataset:
    """The labelled images' test split, once their training split is found fit to learn from: two classes or more,
    and ``per_class`` images of each to draw from (``what`` names that setting). Warns of a class with a single
    training image."""
    every = dataclasses.replace(finetuning.data, shots_per_class=0)
    size, channels = finetuning.model.img_size or 32, finetuning.model.in_chans
    train = build_dataset(every, "train", size, channels, augment=False)
    check_classes_to_learn(train)
    test = build_dataset(finetuning.data, "test", size, channels, augment=False)
    counts = class_counts(train)
    short = {name: count for name, count in counts.items() if count < per_class}
    if short:
        raise DataError(f"{what}={per_class}, but of the {len(train)} labelled training images "
                        + ", ".join(f"{name} has {count}" for name, count in short.items())
                        + f": lower {what} to at most {min(counts.values())}, or add images to those classes")
    single = [name for name, count in counts.items() if count < 2]
    if single:
        logger.warning("the labelled training images of %s number %s: one image cannot stand for a class, and every "
                       "figure of it is a guess", ", ".join(single), "one" if len(single) == 1 else "one each")
    logger.info("labelled images: %d to train on (%s), %d to test on", len(train),
                ", ".join(f"{name} {count}" for name, count in counts.items()), len(test))
    return test


def fingerprints(dataset: ImageDataset, batch: int = 256) -> list[bytes]:
    """Each image's content as (FINGERPRINT_SIDE²) bits: its grey thumbnail above or below its own mean, the same
    for the image at another size; b"" for an image with no features to match."""
    found = []
    for start in range(0, len(dataset), batch):
        images = dataset.__getitems__(list(range(start, min(start + batch, len(dataset)))))[0]
        grey = F.interpolate(images.float().mean(dim=1, keepdim=True), size=FINGERPRINT_SIDE, mode="area")
        grey = grey.flatten(1) / (255.0 if images.dtype == torch.uint8 else 1.0)
        bits = grey > grey.mean(dim=1, keepdim=True)
        for image, spread in zip(bits, grey.std(dim=1).tolist(), strict=True):
            found.append(bytes(image.tolist()) if spread >= FEATURELESS else b"")
    return found


def warn_if_test_images_are_unlabelled_ones(test: ImageDataset, pretraining: MPPRunConfig) -> int:
    """Warns, with how many, where test images are also among the images MPP pre-trains on (compared by content,
    so the same drawing prepared at another size counts); returns that count."""
    unlabelled = build_dataset(pretraining.data, "train", 4 * FINGERPRINT_SIDE, 3, augment=False)
    seen = set(fingerprints(unlabelled)) - {b""}
    shared = sum(fingerprint in seen for fingerprint in fingerprints(test))
    if shared:
        verb, pronoun = ("is", "it") if shared == 1 else ("are", "them")
        logger.warning("%d of the %d test images %s also among the %d unlabelled images (by content, at any size): "
                       "MPP pre-trains on %s, so its figures measure memory as much as what it learnt; take %s out "
                       "of one of the two", shared, len(test), verb, len(unlabelled), pronoun, pronoun)
    return shared
