"""An encoder's weights out of a run and back in: the export in timm's hub format (``export_encoder``), and the
starting weights of fine-tuning and evaluation (Sec. 3.2): an encoder from a run, an export, a timm folder or a
checkpoint file, fitted to the model.

``<run>/export/`` holds ``config.json`` and ``model.safetensors`` as timm writes them:
``timm.create_model("local-dir:<run>/export", pretrained=True)`` rebuilds the encoder offline, and the folder can be
uploaded to the Hugging Face hub unchanged.

``init=random:<run>`` reads only the architecture (and the normalisation and tag) of a run or export: the encoder
is built with fresh random weights drawn as any fresh encoder's are, so a baseline differs from the trained encoder in
its weights alone (with the run's seed, they are that run's own starting weights).

The pre-training head is dropped. Position embeddings are the one shape allowed to differ: fine-tuning at a higher
resolution with the same patch size gives a larger patch grid, and the pre-trained embeddings are 2-D interpolated to
it by their location in the image, the [class] token's kept as it is. Any other difference (patch size, width,
depth) is refused with the shapes that differ.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch
from timm.layers import resample_abs_pos_embed
from timm.models import load_state_dict, save_for_hf
from timm.models.vision_transformer import VisionTransformer
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

from mpp.config.model import ModelConfig, Pooling
from mpp.errors import ConfigError
from mpp.models.encoder import create_encoder
from mpp.run import CHECKPOINTS_DIR, EXPORT_DIR, PARTIAL_SUFFIX

# The names meant for use outside the package (study/, tools/ and users)
__all__ = [
    "fine_tuning_encoder", "read_pretrained",
]

RANDOM_PREFIX = "random:"  # init=random:<run>: the run's architecture with fresh weights, a like-with-like baseline
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # in a timm folder, in the order timm looks
HEAD_PREFIXES = ("head.", "head_drop.", "fc_norm.", "pre_logits.")  # a classifier's, never the encoder's (ours)
SIZE_FIELDS = ("patch_size", "embed_dim", "depth", "num_heads")
logger = logging.getLogger(__name__)


@dataclass
class PretrainedEncoder:
    state_dict: Optional[dict[str, torch.Tensor]]  # None for init=random:<run>: the architecture alone
    location: str  # for messages and logs: the folder or file read (random:<folder> for fresh weights)
    architecture: Optional[str] = None  # a timm folder's architecture and its model_args; None for a bare file
    model_args: dict = dataclasses.field(default_factory=dict)
    mean: Optional[tuple[float, ...]] = None  # the normalisation it was trained with, where recorded
    std: Optional[tuple[float, ...]] = None
    tag: Optional[str] = None  # how it was trained, where recorded: "mpp", "supervised", "finetuned"


def read_pretrained(init: str) -> PretrainedEncoder:
    """``init``: a run directory (its export/), an export or timm folder (``local-dir:`` optional), or a checkpoint
    file (timm's ``load_state_dict``: safetensors or torch, a training checkpoint's ``state_dict`` inside); or
    ``random:`` and a run directory or folder, whose architecture is read without its weights."""
    random = init.startswith(RANDOM_PREFIX)
    path = Path(init.removeprefix(RANDOM_PREFIX).removeprefix("local-dir:"))
    folders = f"random:<run directory> or random:<its {EXPORT_DIR}/ folder>"
    if not path.exists():
        raise ConfigError(f"init={init} does not exist; pass " + (folders if random else (
            f"a run directory, its {EXPORT_DIR}/ folder, local-dir:<timm folder> or a checkpoint file")))
    if path.is_file() and random:
        raise ConfigError(f"init={init}: a weights file does not record its architecture; pass init={folders}")
    if path.is_file():
        state = read_weights(path, init)
        tag = None
        if any(name.startswith("encoder.") for name in state):  # a checkpoint of this package's model
            tag = "mpp" if "mask_embedding" in state else None
            state = {name.removeprefix("encoder."): value for name, value in state.items()
                     if name.startswith("encoder.")}
        return PretrainedEncoder(state, str(path), tag=tag)
    folder = path / EXPORT_DIR if (path / EXPORT_DIR / "config.json").is_file() else path
    weights = [folder / name for name in WEIGHT_FILES if (folder / name).is_file()]
    if not (folder / "config.json").is_file() or not (weights or random):
        needed = "timm config.json" + ("" if random else f" with {' or '.join(WEIGHT_FILES)}")
        advice = "resume it" + ("" if random else ", or pass init=<its checkpoint>/model.safetensors")
        unfinished = (path / CHECKPOINTS_DIR).is_dir()
        raise ConfigError(f"init={init} holds no {EXPORT_DIR}/ folder and no {needed}"
                          + (f"; the run has not finished: {advice}" if unfinished else ""))
    try:
        config = json.loads((folder / "config.json").read_text())
        architecture = config["architecture"]
    except (ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"init={init}: {folder / 'config.json'} is not a timm model config ({error}); "
                          "re-export the encoder, or pass its weights file") from error
    pretrained_cfg = config.get("pretrained_cfg", {})
    mean, std = pretrained_cfg.get("mean"), pretrained_cfg.get("std")
    # A random encoder keeps the run's tag and normalisation too, so it is read and fed exactly as the trained one.
    return PretrainedEncoder(None if random else read_weights(weights[0], init),
                             f"{RANDOM_PREFIX}{folder}" if random else str(folder), architecture,
                             config.get("model_args", {}), tuple(mean) if mean else None, tuple(std) if std else None,
                             pretrained_cfg.get("tag"))


def read_weights(path: Path, init: str) -> dict[str, torch.Tensor]:
    """A weights file as timm reads one (safetensors, or a torch file with the weights or a training checkpoint's
    ``state_dict``); a file neither format can read is refused by name."""
    try:
        return load_state_dict(str(path))
    except Exception as error:  # each format has its own errors for a file that is not one: safetensors', pickle's
        reason = (str(error).splitlines() or [type(error).__name__])[0].split(". ")[0]
        raise ConfigError(
            f"init={init}: cannot read {path} as weights, a safetensors file or a torch checkpoint of tensors "
            f"({reason}); pass a run directory, its {EXPORT_DIR}/ folder, local-dir:<timm folder> or a checkpoint file"
        ) from error


def fine_tuning_model_config(cfg: ModelConfig, pretrained: Optional[PretrainedEncoder]) -> ModelConfig:
    """The encoder to fine-tune: a folder's architecture (``cfg`` otherwise), at ``cfg.img_size`` when set, with
    ``cfg``'s regularisation."""
    if pretrained is None or pretrained.architecture is None:
        return cfg
    args = pretrained.model_args
    # A preset's sizes gave way to the folder's (EncoderFromInit): what is left here was given by the user.
    conflicts = [f"model.{name}={getattr(cfg, name)} (the encoder has {args.get(name)})" for name in SIZE_FIELDS
                 if getattr(cfg, name) is not None and args.get(name) is not None and getattr(cfg, name) != args[name]]
    if conflicts:
        raise ConfigError(f"you set {', '.join(conflicts)}, but init={pretrained.location} fixes the architecture; "
                          f"drop {'these settings' if len(conflicts) > 1 else 'that setting'} (model.img_size alone "
                          "may change)")
    img_size = args.get("img_size")
    return dataclasses.replace(
        cfg,
        name=pretrained.architecture,
        img_size=cfg.img_size or (img_size[0] if isinstance(img_size, (list, tuple)) else img_size),
        in_chans=args.get("in_chans", 3),
        **{name: args.get(name) for name in SIZE_FIELDS},
    )


def fine_tuning_encoder(cfg: ModelConfig, pretrained: Optional[PretrainedEncoder]) -> VisionTransformer:
    """The encoder ``cfg`` describes (``fine_tuning_model_config``), holding the pre-trained weights if any (fresh
    random ones, drawn from the seeded generator, for none or ``init=random:<run>``)."""
    encoder = create_encoder(cfg)
    if pretrained is not None and pretrained.state_dict is not None:
        load_encoder_weights(encoder, pretrained)
    return encoder


def resample_position_embeddings(pos_embed: torch.Tensor, grid: tuple[int, int], prefix_tokens: int = 1
                                 ) -> torch.Tensor:
    """(1 p+n d) embeddings of a square grid of n patches -> (1 p+g0*g1 d) for ``grid``: the patch embeddings as a
    2-D image, resampled (timm's bicubic resampling); the p prefix ([class]) embeddings unchanged."""
    side = math.isqrt(pos_embed.shape[1] - prefix_tokens)
    if side * side != pos_embed.shape[1] - prefix_tokens:
        raise ConfigError(f"position embeddings of {pos_embed.shape[1] - prefix_tokens} patches are not a square "
                          "grid; cannot interpolate them")
    if (side, side) == tuple(grid):
        return pos_embed
    return resample_abs_pos_embed(pos_embed, new_size=list(grid), old_size=[side, side],
                                  num_prefix_tokens=prefix_tokens)


def load_encoder_weights(encoder: VisionTransformer, pretrained: PretrainedEncoder) -> list[str]:
    """Copy ``pretrained`` into ``encoder``; returns the names of the head weights dropped. Raises ConfigError,
    naming every tensor whose shape differs, when the weights do not fit."""
    own = encoder.state_dict()
    state = {name: value for name, value in pretrained.state_dict.items() if not name.startswith(HEAD_PREFIXES)}
    dropped = sorted(set(pretrained.state_dict) - set(state))
    pos_embed = state.get("pos_embed")
    if pos_embed is not None and pos_embed.shape != own["pos_embed"].shape and pos_embed.shape[-1] == encoder.embed_dim:
        state["pos_embed"] = resample_position_embeddings(pos_embed, encoder.patch_embed.grid_size,
                                                          encoder.num_prefix_tokens)
    problems = [f"{name}: {tuple(state[name].shape)} in init, {tuple(value.shape)} in the model"
                for name, value in own.items() if name in state and state[name].shape != value.shape]
    problems += [f"{name}: missing from init" for name in own if name not in state]
    problems += [f"{name}: in init, not in the model" for name in state if name not in own]
    if problems:
        shown = problems[:12] + ([f"... {len(problems) - 12} more"] if len(problems) > 12 else [])
        raise ConfigError(
            f"the weights in {pretrained.location} do not fit the model:\n  " + "\n  ".join(shown)
            + "\nset model.name / model.patch_size / model.embed_dim / model.depth / model.num_heads / model.in_chans "
            "to the pre-trained encoder's, or choose another init"
        )
    encoder.load_state_dict(state)
    return dropped


def input_normalisation(pretrained: Optional[PretrainedEncoder], mean: tuple[float, ...], std: tuple[float, ...]
                        ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The encoder's input normalisation: the one it was pre-trained with where recorded (its pretrained_cfg),
    else ``mean`` / ``std`` (data.mean / data.std)."""
    if pretrained is None or pretrained.mean is None or pretrained.std is None:
        return mean, std
    if (pretrained.mean, pretrained.std) != (tuple(mean), tuple(std)):
        logger.warning("normalising with the pre-trained encoder's mean %s and std %s (data.mean / data.std: %s, %s)",
                       pretrained.mean, pretrained.std, mean, std)
    return pretrained.mean, pretrained.std


def encoder_from_model_state(state: dict[str, torch.Tensor], cfg: ModelConfig) -> VisionTransformer:
    """A fresh encoder of ``cfg``'s architecture holding the encoder weights of a model's whole state dict (an MPP
    model's or a classifier's, compiled or not, as gathered from every process): plain tensors of its own, which
    safetensors can write whatever the state dict's came from (FSDP's gathered shards included)."""
    consume_prefix_in_state_dict_if_present(state, "_orig_mod.")  # a compiled model's names
    encoder = create_encoder(cfg)
    encoder.load_state_dict({name.removeprefix("encoder."): tensor for name, tensor in state.items()
                             if name.startswith("encoder.")})
    return encoder


def export_encoder(
    encoder: VisionTransformer, directory: Path, mean: Sequence[float], std: Sequence[float], tag: str,
    eval_crop_fraction: float = 1.0, card: str = "", pool: Pooling = "token",
) -> None:
    """Write the encoder in timm's hub format, which timm (``local-dir:``) and transformers (``AutoModel``, through
    its TimmWrapper) both load, with the input it was trained on in its pretrained_cfg: the normalisation, and the
    evaluation view (bilinear resize, centre crop of ``eval_crop_fraction`` of the short side) for image
    processors; ``pool`` as the features timm gives without a head (``avg`` for what MPP trains, the patch tokens'
    mean; ``token``, the [class] token's); ``card`` (mpp.models.model_card) as its README.md. What is written is a
    copy on the host: an accelerator's tensors (XLA's) cannot be written as they are."""
    partial = directory.with_name(directory.name + PARTIAL_SUFFIX)
    shutil.rmtree(partial, ignore_errors=True)
    save_for_hf(
        copy.deepcopy(encoder).cpu(),
        str(partial),
        model_config={"pretrained_cfg": {"tag": tag, "license": None}},
        safe_serialization=True,
        data_config={"mean": tuple(mean), "std": tuple(std), "crop_pct": eval_crop_fraction,
                     "interpolation": "bilinear"},
    )
    config_path = partial / "config.json"
    config = json.loads(config_path.read_text())
    # timm records num_classes at the top level and in model_args; transformers' TimmWrapper passes num_classes to
    # timm itself and fails on the repeat. The pooling timm builds the model with is model_args' (the top level's
    # is a record).
    model_args = {key: value for key, value in config.get("model_args", {}).items() if key != "num_classes"}
    config["global_pool"] = model_args["global_pool"] = pool
    if pool == "avg":  # the mean of the normalised patch tokens, as the package reads it: timm's default for "avg"
        model_args["fc_norm"] = False  # would move the final norm after the pooling
    config["model_args"] = model_args
    config_path.write_text(json.dumps(config, indent=2))
    if card:
        (partial / "README.md").write_text(card)
    if directory.exists():
        shutil.rmtree(directory)
    partial.rename(directory)
