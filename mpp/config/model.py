"""The model sections: the encoder (a timm ViT), the MPP objective and the classifier head, and what a frozen encoder
is read by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, Optional

from mpp.errors import ConfigError

__all__ = ["Pooling"]  # what study/, tools/ and users may import from here


Pooling = Literal["token", "avg"]  # the [class] token's output after the final norm, or the patch tokens' mean (D.3)


# What a frozen evaluation reads: a pooling of the encoder's output, or "pixels", the normalised input image itself
# (no encoder): the raw-pixel baseline that every accuracy should be read against.
FrozenFeatures = Literal["token", "avg", "pixels"]


# eval.features may also say "auto": the mean of the patch tokens for an encoder MPP trained (which never trains the
# [class] token's output), the [class] token for any other.
EvaluationFeatures = Literal["auto", "token", "avg", "pixels"]


@dataclass
class ModelConfig:
    """The encoder: a timm Vision Transformer (Sec. 3.1) with a [class] token and learnable 1-D position embeddings."""

    name: str = "vit_base_patch16_224"  # any timm ViT architecture; the fields below override its sizes when set
    img_size: Optional[int] = None  # pre-training resolution (Sec. 4.6 and B.1: 224)
    patch_size: Optional[int] = None  # pixels per patch side (8, 14, 16, 32); must divide model.img_size
    embed_dim: Optional[int] = None  # token width (Ti 192, S 384, B 768, L 1024, H 1280)
    depth: Optional[int] = None  # transformer blocks
    num_heads: Optional[int] = None  # attention heads per block; must divide model.embed_dim
    in_chans: int = 3  # input channels: 3 for colour, 1 for grey images (each image is converted to it)
    drop_path_rate: float = 0.0  # stochastic depth
    dropout: float = 0.0  # after adding position embeddings and after every dense layer but qkv (App. B.1)
    # Recompute each block's activations in the backward pass instead of keeping them (timm's
    # set_grad_checkpointing): the same loss and gradients, with activation memory of one block instead of all, for
    # about a third more compute. For large ViTs on small GPUs; a resume may switch it.
    grad_checkpointing: bool = False

    FREE_ON_RESUME: ClassVar[tuple[str, ...]] = ("grad_checkpointing",)  # memory and speed only, not the results

    def __post_init__(self) -> None:
        if self.img_size is not None and self.patch_size is not None and self.img_size % self.patch_size:
            raise ConfigError(
                f"model.img_size={self.img_size} is not divisible by model.patch_size={self.patch_size}; "
                f"choose an image size that is a multiple of the patch size, e.g. "
                f"model.img_size={self.img_size // self.patch_size * self.patch_size or self.patch_size}"
            )


@dataclass
class MPPConfig:
    """Masked patch prediction (Sec. 4.6, App. B.1.2)."""

    target: Literal["mean_colour", "downsampled", "pixels"] = "mean_colour"  # the paper's best few-shot option
    corruption_rate: float = 0.5  # fraction of patches corrupted per image (BERT's 0.15 was slightly worse)
    mask_fraction: float = 0.8  # of the corrupted patches: replaced by the learnable [mask] embedding
    random_fraction: float = 0.1  # ... by another patch's embedding; the rest stay unchanged
    colour_bits: int = 3  # bits per channel of the colour targets: 3 gives 512 classes
    downsampled_size: int = 4  # cells per side of the "downsampled" target (4x4 = 16 predictions per patch)

    def __post_init__(self) -> None:
        if not 0.0 < self.corruption_rate <= 1.0:
            raise ConfigError(f"mpp.corruption_rate={self.corruption_rate} must lie in (0, 1]")
        if self.mask_fraction < 0 or self.random_fraction < 0 or self.mask_fraction + self.random_fraction > 1:
            raise ConfigError(
                f"mpp.mask_fraction={self.mask_fraction} and mpp.random_fraction={self.random_fraction} must be "
                "non-negative and sum to at most 1 (the remainder stays unchanged)"
            )
        if not 1 <= self.colour_bits <= 8:
            raise ConfigError(f"mpp.colour_bits={self.colour_bits} must lie between 1 and 8")


@dataclass
class ExportConfig:
    """The encoder an MPP run writes at its end (export/, timm's hub format)."""

    # The features timm's model gives without a head: the mean of the patch tokens, what MPP trains (never the [class]
    # token's output); a supervised run's export reads what its head read (classifier.pool).
    features: Pooling = "avg"


@dataclass
class ClassifierConfig:
    """The classification head on the encoder's output (Sec. 3.1, App. D.3)."""

    head: Literal["mlp", "linear"] = "mlp"  # pre-training: one tanh hidden layer of the encoder's width; fine-tuning:
    # a single linear layer (Sec. 3.2). The output layer always starts at zero, so initial logits are exactly zero.
    pool: Pooling = "token"  # what the head reads
    label_smoothing: float = 0.0  # of the cross-entropy's targets (0: none)

    def __post_init__(self) -> None:
        if not 0 <= self.label_smoothing < 1:
            raise ConfigError(f"classifier.label_smoothing={self.label_smoothing} must lie in [0, 1)")
