"""The MPP model a run trained, for the analyses that score it."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import load_file

from mpp.config.runs import MPPRunConfig
from mpp.config.building import build_config
from mpp.models.encoder import create_encoder
from mpp.models.masked_patch_prediction import MaskedPatchPredictor
from mpp.private_apis import saved_model_file
from mpp.training.checkpoint import newest_intact_checkpoint


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
    model.load_state_dict(load_file(checkpoint / saved_model_file(0)))
    return cfg, checkpoint, model
