"""An encoder under evaluation (eval/): loaded from ``init`` or drawn at random, frozen, read out as one feature
vector per image, and its features cached so that each encoder's images pass through it once.

The evaluation scripts share everything here; each adds only its protocol (few-shot, linear probe, kNN, pictures).
Images that cannot be decoded are skipped as in training (each replaced by the next): how many, and why, is logged
and recorded in metrics.json (``skipped_images``, per feature set), from the feature cache too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
from accelerate import Accelerator
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from mpp.config.model import EvaluationFeatures, FrozenFeatures
from mpp.config.runs import EvaluationRunConfig
from mpp.data.image_dataset import ImageDataset
from mpp.data.loading import (
    build_dataset,
    build_loader,
    check_classes_to_learn,
    prepare_loader,
    report_skipped,
    warn_if_tested_on_training_images,
)
from mpp.errors import ConfigError
from mpp.models.encoder import ImageEncoder, InputNormalisation, count_parameters
from mpp.models.pretrained import (
    PretrainedEncoder,
    fine_tuning_encoder,
    fine_tuning_model_config,
    input_normalisation,
    read_pretrained,
)
from mpp.run import FEATURES_DIR, Session, local_processes, read_cache, write_whole

logger = logging.getLogger(__name__)


FEATURE_DESCRIPTIONS = {"token": "[class] token", "avg": "mean of the patch tokens",
                        "pixels": "the normalised pixels (no encoder: the raw-pixel baseline)"}


@dataclass
class EvaluationRun:
    """An evaluation's session (``with`` it), its frozen encoder and both splits."""

    session: Session
    extractor: ImageEncoder  # prepared, in eval mode
    train_set: ImageDataset  # both splits resized (and centre-cropped), never augmented
    test_set: ImageDataset
    config: EvaluationRunConfig
    skipped_images: dict[str, int] = field(default_factory=dict)  # per feature set (name): undecodable, skipped

    def __enter__(self) -> EvaluationRun:
        return self

    def __exit__(self, *error: Any) -> None:
        self.session.__exit__(*error)

    @property
    def accelerator(self) -> Accelerator:
        return self.session.accelerator

    @property
    def run_dir(self) -> Path:
        return self.session.run_dir

    def features(self, dataset: ImageDataset, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(n d) features and (n) labels of ``dataset``'s images in order, on the device; read from the cache
        when this encoder has already seen exactly these images. The images skipped as undecodable are counted in
        ``skipped_images[name]`` (and said in the log), whether extracted now or when the cache was written."""
        cfg = self.config
        cache = Path(cfg.eval.feature_cache) if cfg.eval.feature_cache else self.run_dir / FEATURES_DIR
        path = cache / f"{name}-{feature_fingerprint(self.extractor, dataset)}.safetensors"

        def read(cached: Path) -> tuple[torch.Tensor, torch.Tensor, int]:
            stored = load_file(cached, device=str(self.accelerator.device))
            with safe_open(cached, "pt") as opened:
                skipped = int(opened.metadata()["skipped_images"])  # none: another version's cache, made again
            return stored["features"], stored["labels"], skipped

        stored = read_cache(path, read)
        if stored is not None:
            features, labels, skipped = stored
            logger.info("%s: %d features read from %s", name, len(labels), path)
            if skipped:
                logger.warning("%s: %d image(s) were skipped as undecodable when these features were extracted, "
                               "each replaced by the next image (delete %s to see which, and why)", name, skipped,
                               path)
        else:
            features, labels = extract_features(self.accelerator, self.extractor, dataset, cfg)
            skipped = report_skipped(self.accelerator, dataset, f"{name} images")
            if self.accelerator.is_main_process:
                cache.mkdir(parents=True, exist_ok=True)
                tensors = {"features": features.cpu().contiguous(), "labels": labels.cpu().contiguous()}
                write_whole(path, lambda partial: save_file(tensors, partial, {"skipped_images": str(skipped)}),
                            shared=True)  # eval.feature_cache
            logger.info("%s: %d features of dimension %d extracted, cached as %s", name, len(labels),
                        features.shape[1], path)
        self.skipped_images[name] = self.skipped_images.get(name, 0) + skipped
        return features, labels

    def finish(self, metrics: dict[str, Any], scalars: dict[str, float]) -> None:
        """``scalars`` to TensorBoard, ``metrics`` (with the encoder's description and the images skipped per feature
        set) to metrics.json, and close."""
        self.accelerator.log(scalars, step=0)
        self.session.finish({"init": self.config.init or None, "features": self.config.eval.features,
                             "skipped_images": self.skipped_images, **metrics})


def readout(features: EvaluationFeatures, pretrained: Optional[PretrainedEncoder]) -> FrozenFeatures:
    """``eval.features`` resolved: ``auto`` reads an encoder MPP trained (its export's tag, or its checkpoint's [mask]
    embedding) by the mean of its patch tokens, any other by its [class] token."""
    if features != "auto":
        return features
    return "avg" if pretrained is not None and pretrained.tag == "mpp" else "token"


def open_evaluation_run(cfg: EvaluationRunConfig, prefix: str, classifies: bool = True) -> EvaluationRun:
    """The encoder ``cfg.init`` names (or a seeded random one) as a frozen feature extractor, and the run's
    directory, claimed once the encoder has loaded (nothing is written for an init that does not fit) and, where the
    run ``classifies`` (not an inspection), its training images found to hold two classes or more."""
    if cfg.eval.features == "pixels" and cfg.init:
        raise ConfigError(f"eval.features=pixels reads the images themselves, not an encoder: drop init={cfg.init} "
                          "(or choose eval.features=token or avg to evaluate it)")
    pretrained = read_pretrained(cfg.init) if cfg.init else None
    cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, features=readout(cfg.eval.features,
                                                                                       pretrained)))
    session = Session(cfg, cfg.eval, prefix)  # seeded: a random baseline's weights come from cfg.seed
    accelerator = session.accelerator
    model_cfg = fine_tuning_model_config(cfg.model, pretrained)
    mean, std = input_normalisation(pretrained, cfg.data.mean, cfg.data.std)
    encoder = fine_tuning_encoder(model_cfg, pretrained)
    extractor = ImageEncoder(encoder, InputNormalisation(mean, std, model_cfg.in_chans), cfg.eval.features)
    extractor.requires_grad_(False).eval()
    if cfg.data.streaming:
        raise ConfigError("evaluation reads each image once, by position: set data.streaming=false")
    image_size = encoder.patch_embed.img_size[0]
    splits = [build_dataset(cfg.data, split, image_size, model_cfg.in_chans, augment=False, seed=cfg.seed)
              for split in ("train", "test")]
    if classifies:  # one class: any classifier scores 100%, which would read as a result
        check_classes_to_learn(splits[0])
    run = EvaluationRun(session, accelerator.prepare_model(extractor, evaluation_mode=True), *splits, cfg)
    session.start()
    warn_if_tested_on_training_images(*splits)
    if cfg.eval.features == "pixels":  # the encoder built above is never called
        described = f"none, {image_size} px views"
    else:
        source = pretrained.location if pretrained else f"randomly initialised {model_cfg.name} (seed {cfg.seed})"
        described = (f"{source} ({count_parameters(encoder) / 1e6:.2f}M parameters, "
                     f"{encoder.patch_embed.num_patches} patches at {image_size} px)")
    logger.info("encoder %s, features: %s; data: %s; test: %s", described, FEATURE_DESCRIPTIONS[cfg.eval.features],
                run.train_set.description, run.test_set.description)
    return run


def feature_fingerprint(extractor: ImageEncoder, dataset: ImageDataset) -> str:
    """A digest of everything the features depend on: the weights, normalisation and pooling, and which images
    through which view."""
    digest = hashlib.sha256()
    for name, tensor in sorted(extractor.encoder.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    for tensor in (extractor.normalise.mean, extractor.normalise.std, dataset.indices):
        digest.update(tensor.cpu().contiguous().numpy().tobytes())
    digest.update(f"{extractor.pool}|{dataset.source.description}|{dataset.view.description}|{dataset.channels}"
                  .encode())
    if dataset.decode_cache is not None:  # views of kept images: the file resampled twice
        digest.update(f"|decoded at {dataset.decode_cache.short_side}".encode())
    return digest.hexdigest()[:16]


@torch.no_grad()
def extract_features(accelerator: Accelerator, extractor: nn.Module, dataset: ImageDataset, cfg: EvaluationRunConfig
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(n d) features and (n) labels of every image of ``dataset``, in order; each process extracts its share of
    ``cfg.eval.batch_size`` batches."""
    loader = build_loader(dataset, cfg.eval.batch_size, cfg.data, train=False, device_type=accelerator.device.type,
                          local_processes=local_processes(accelerator))
    features, labels = [], []
    for images, batch_labels, _ in prepare_loader(accelerator, loader):
        with accelerator.autocast():
            batch_features = extractor(images).float()  # cached, and fitted on, in float32
        gathered = accelerator.gather_for_metrics((batch_features, batch_labels))
        features.append(gathered[0])
        labels.append(gathered[1])
    return torch.cat(features), torch.cat(labels)
