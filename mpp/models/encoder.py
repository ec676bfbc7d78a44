"""The encoder: timm's VisionTransformer, built by name with optional explicit sizes (paper Sec. 3.1, Table 1), and
``BuiltOnEncoder``, what MPP, the classifier and the frozen ``ImageEncoder`` are each built on the same way, with the
one path from raw images to features they share: normalise -> ViT -> pool."""

from __future__ import annotations

import difflib
from typing import Sequence

import timm
import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from mpp.config.model import FrozenFeatures, ModelConfig, Pooling
from mpp.errors import ConfigError
from mpp.images import unit_interval

# The names meant for use outside the package (study/, tools/ and users)
__all__ = [
    "InputNormalisation", "count_parameters", "create_encoder", "encoder_structure",
]

_SIZE_FIELDS = ("img_size", "patch_size", "embed_dim", "depth", "num_heads")


def encoder_kwargs(cfg: ModelConfig) -> dict:
    """The arguments for ``timm.create_model``: the sizes set in ``cfg`` override the named architecture's."""
    sizes = {name: getattr(cfg, name) for name in _SIZE_FIELDS if getattr(cfg, name) is not None}
    # A [class] token and learnable 1-D position embeddings added to it too: the paper's (and timm's default) ViT.
    return dict(
        num_classes=0,
        global_pool="token",
        class_token=True,
        pos_embed="learn",
        no_embed_class=False,
        in_chans=cfg.in_chans,
        drop_path_rate=cfg.drop_path_rate,
        pos_drop_rate=cfg.dropout,  # right after adding the position embeddings
        proj_drop_rate=cfg.dropout,  # after the attention output projection and both MLP layers (not qkv)
        **sizes,
    )


def create_encoder(cfg: ModelConfig) -> VisionTransformer:
    """A randomly initialised ViT without a head; ``forward_features`` gives (b, 1 + n, d) tokens."""
    vit_names = timm.list_models("vit_*")
    if cfg.name not in vit_names:
        close = difflib.get_close_matches(cfg.name, vit_names, n=3, cutoff=0.5) or ["vit_base_patch16_224"]
        raise ConfigError(
            f"model.name={cfg.name!r} is not a timm Vision Transformer (timm.list_models('vit_*')); "
            f"e.g. {', '.join(close)}"
        )
    encoder = timm.create_model(cfg.name, pretrained=False, **encoder_kwargs(cfg))
    if not isinstance(encoder, VisionTransformer):
        raise ConfigError(f"model.name={cfg.name!r} builds a {type(encoder).__name__}, not a VisionTransformer")
    encoder.set_grad_checkpointing(cfg.grad_checkpointing)
    img_size, patch_size = encoder.patch_embed.img_size, encoder.patch_embed.patch_size
    if img_size[0] % patch_size[0] or img_size[1] % patch_size[1]:
        raise ConfigError(
            f"image size {img_size} of {cfg.name} is not divisible by its patch size {patch_size}; "
            "set model.img_size to a multiple of the patch size"
        )
    return encoder


class InputNormalisation(nn.Module):
    """(b c h w) raw images, uint8 or float in [0, 1] -> the encoder's input, ``(x - mean) / std`` per channel. The
    models take raw images because MPP's targets come from the unnormalised pixels; a grey image (one channel) is
    repeated."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], channels: int) -> None:
        super().__init__()
        if not len(mean) == len(std) == channels:
            raise ConfigError(
                f"data.mean and data.std need one value per input channel (the encoder takes {channels}); "
                f"got {len(mean)} and {len(std)}"
            )
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return (unit_interval(images).expand(-1, self.mean.shape[1], -1, -1) - self.mean) / self.std


def encoder_structure(cfg: ModelConfig) -> VisionTransformer:
    """The encoder ``cfg`` names with its sizes as timm resolves them (width, blocks, image and patch size, parameter
    count) and no weights: made on the meta device, nothing is allocated or initialised (a ViT-L's initialisation
    alone takes seconds on a CPU)."""
    with torch.device("meta"):
        return create_encoder(cfg)


def count_parameters(module: torch.nn.Module) -> int:
    return sum(parameter.numel() for parameter in module.parameters())


def pooled_features(tokens: torch.Tensor, pool: Pooling, prefix_tokens: int = 1) -> torch.Tensor:
    """(b 1+n d) encoder output after the final norm -> (b d): the [class] token's, or the patch tokens' mean."""
    return tokens[:, 0] if pool == "token" else tokens[:, prefix_tokens:].mean(dim=1)


class BuiltOnEncoder(nn.Module):
    """What every model here is built on, the same way: timm's ViT as ``encoder`` (so a model's weights are
    ``encoder.<timm's names>`` and its own parts) and its input normalisation as ``normalise``. MPP, the classifier
    and the frozen ``ImageEncoder`` are built on it; monitors and evaluation read features through it."""

    def __init__(self, encoder: VisionTransformer, normalise: InputNormalisation) -> None:
        super().__init__()
        self.normalise, self.encoder = normalise, encoder

    def features(self, images: torch.Tensor, pool: FrozenFeatures) -> torch.Tensor:
        """(b c h w) raw images (uint8, or float in [0, 1]) -> (b d): normalised, through timm's ViT
        (``forward_features``: its blocks and final norm), pooled; for ``pixels``, the normalised input itself,
        (b (c h w)): the raw-pixel baseline."""
        if pool == "pixels":
            return self.normalise(images).flatten(1)
        tokens = self.encoder.forward_features(self.normalise(images))
        return pooled_features(tokens, pool, self.encoder.num_prefix_tokens)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        return {f"encoder.{name}" for name in self.encoder.no_weight_decay()}


class ImageEncoder(BuiltOnEncoder):
    """(b c h w) raw images -> (b d) features, read through ``pool``: an encoder under evaluation, frozen."""

    def __init__(self, encoder: VisionTransformer, normalise: InputNormalisation, pool: FrozenFeatures = "token"
                 ) -> None:
        super().__init__(encoder, normalise)
        self.pool = pool

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.features(images, self.pool)
