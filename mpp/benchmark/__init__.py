"""Benchmarks: tools beside the library that measure it, and that nothing in it imports.

- ``python -m mpp.benchmark`` (``training_step.py``): the training step's images/s, peak memory and FLOP utilisation,
  for supervised, MPP and vit-pytorch's MPP, timed in turn.
- ``python -m mpp.benchmark.loading`` (``loading.py``): images/s of every data source at several worker counts,
  next to the training step.
- ``python -m mpp.benchmark.training_run`` (``training_run.py``): the pre-training recipe on prepared images, its
  images/s and the share of its time spent waiting for data beside the step's, on a small and a large dataset.
- ``python -m mpp.benchmark.checkpoint`` (``checkpoint.py``): saving, verifying and loading a checkpoint of the
  ViT-B/16 preset's size (synthetic state), from the page cache and (``--cold``) from the disk.
- ``python -m mpp.benchmark.shapes_regions`` and ``python -m mpp.benchmark.grey_images``: where a trained MPP model
  with a colour target is right (inside shapes or on their outlines; on grey or colour images).

Run them from the repository root: their default preset is ``recipes/configs/mpp_tiny_cpu.yaml``.
"""

from pathlib import Path

from safetensors.torch import load_file

from mpp.config import MPPRunConfig
from mpp.config_loading import build_config
from mpp.models.encoder import create_encoder
from mpp.models.masked_patch_prediction import MaskedPatchPredictor
from mpp.training.checkpoint import newest_intact_checkpoint


def preset_encoder_and_batch(preset: str | Path) -> MPPRunConfig:
    """An MPP preset's settings for a benchmark that builds its encoder and batch on images of its own: the preset's
    data is never read, so a preset that leaves ``data.source`` to the user (the paper's) is given the embedded one."""
    return build_config(MPPRunConfig, preset, ["data.source=shapes"])


def trained_colour_mpp(run: Path) -> tuple[MPPRunConfig, Path, MaskedPatchPredictor]:
    """An MPP run's config, its newest intact checkpoint and the model trained there; a run that regresses pixels
    (no colour accuracy to score) or holds no intact checkpoint ends the command saying so."""
    cfg = build_config(MPPRunConfig, run / "config.yaml")
    if cfg.mpp.target == "pixels":
        raise SystemExit(f"error: {run} regresses pixels (mpp.target=pixels); this scores colour targets only")
    checkpoint = newest_intact_checkpoint(run)
    if checkpoint is None:
        raise SystemExit(f"error: {run} holds no intact checkpoint")
    model = MaskedPatchPredictor(create_encoder(cfg.model), cfg.mpp, cfg.data.mean, cfg.data.std)
    model.load_state_dict(load_file(checkpoint / "model.safetensors"))
    return cfg, checkpoint, model
