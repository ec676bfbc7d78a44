"""Masked patch prediction (paper Sec. 4.6, App. B.1.2), in the order a forward pass runs it: the corruption of the
patch embeddings, the targets, and the model, a timm ViT with a learnable [mask] embedding and a per-patch head.

Corruption: a fixed fraction of each image's patches is chosen uniformly at random; of those, about 80% are replaced
by the learnable [mask] embedding, 10% by the embedding of another patch of the same image, and 10% are left
unchanged. It acts on the embeddings after the linear projection and before position embeddings are added, so a
replaced patch still carries its own position. Every operation is batched: no loop over images or patches.

Targets: one object per kind (``PatchTarget``), owning the prediction head's size, the targets, the loss and the
colour classes its accuracy is scored on; ``mpp.target`` picks one from ``TARGETS``. All targets come from the
unnormalised image in [0, 1] (a uint8 one scaled first). Patches are numbered row by row, as timm's patch embedding
flattens its grid, so target ``i`` belongs to token ``i``. A grayscale image counts as RGB with equal channels, so the
class space stays ``2 ** (3 * bits)`` whatever the input.

The model encodes the corrupted embeddings and predicts each corrupted patch's target from that patch's own output
token. Loss and accuracy count corrupted patches only. The head runs on the k corrupted tokens alone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from timm.models import checkpoint_seq
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from mpp.config.model import MPPConfig
from mpp.errors import ConfigError
from mpp.images import KeyedDraws, keys_of, unit_interval
from mpp.models.encoder import BuiltOnEncoder, InputNormalisation
from mpp.private_apis import add_position_embeddings, with_fsdp2_tensor_lookup

# What study/, tools/ and users may import from here
__all__ = ["MaskedPatchPredictor", "class_colours", "select_patches"]


# The corruption (Sec. 4.6: 50% of the patches; 80% [mask], 10% another patch, 10% unchanged)

# What a corrupted position receives.
MASK, RANDOM, UNCHANGED = 0, 1, 2


@dataclass
class Corruption:
    """One draw of corruption for a batch; k corrupted patches per image."""

    positions: torch.Tensor  # (b k) long: indices of the corrupted patches, distinct within an image
    replacement: torch.Tensor  # (b k) long: MASK, RANDOM or UNCHANGED
    sources: torch.Tensor  # (b k) long: the patch whose embedding a RANDOM position receives; never itself


def num_corrupted(num_patches: int, rate: float) -> int:
    """Patches corrupted per image: ``rate`` of them, rounded, at least one."""
    return max(1, min(num_patches, round(rate * num_patches)))


def draw_corruption(
    draws: KeyedDraws,
    num_patches: int,
    rate: float,
    mask_fraction: float = 0.8,
    random_fraction: float = 0.1,
) -> Corruption:
    """Choose which patches to corrupt and how, independently per image, from each image's own draws (so an image's
    corruption is the same in any batch: ``mpp.images``)."""
    if random_fraction > 0 and num_patches < 2:
        raise ValueError("replacing a patch by another patch needs at least two patches per image")
    k = num_corrupted(num_patches, rate)
    # The k smallest of n uniform draws are a uniformly random k-subset.
    positions = draws.uniform(num_patches).argsort(dim=1)[:, :k]
    choice = draws.uniform(k)
    replacement = torch.full_like(positions, UNCHANGED)
    replacement = replacement.masked_fill(choice < mask_fraction + random_fraction, RANDOM)
    replacement = replacement.masked_fill(choice < mask_fraction, MASK)
    # An offset in [1, n) from the patch itself: uniform over the other n - 1 patches, never itself.
    offsets = 1 + (draws.uniform(k) * max(num_patches - 1, 1)).long()
    sources = (positions + offsets) % num_patches
    return Corruption(positions=positions, replacement=replacement, sources=sources)


def select_patches(values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(b n ...) values per patch, (b k) positions -> (b k ...) the values at those positions of each image.

    One ``index_select`` on the batch flattened to rows, faster forward and backward (``index_add``) than
    ``gather`` (docs/measured.md has the timings).
    """
    b, n = values.shape[:2]
    rows = positions + n * torch.arange(b, device=positions.device).unsqueeze(1)
    return values.flatten(0, 1).index_select(0, rows.flatten()).view(*positions.shape, *values.shape[2:])


def corrupt_patch_embeddings(
    embeddings: torch.Tensor, mask_embedding: torch.Tensor, corruption: Corruption
) -> torch.Tensor:
    """Apply ``corruption`` to patch embeddings (b n d); the mask embedding is (d,). Returns a new tensor.

    Each output row is one ``index_select`` from the batch's rows: its own, or another patch's of its image; then
    one ``where`` puts the mask in: faster forward and backward than two gathers, two selects and a scatter
    (docs/measured.md has the timings). The mask enters by ``where``, not as one more row
    to select: its gradient is then a reduction. Summed by ``index_add`` from many rows, compiled code added it in a
    varying order, and a resumed compiled run no longer repeated an uninterrupted one bit for bit.
    """
    b, n, d = embeddings.shape
    first_row = n * torch.arange(b, device=embeddings.device).unsqueeze(1)  # (b 1)
    kind = corruption.replacement
    source = torch.where(kind == RANDOM, corruption.sources, corruption.positions) + first_row
    rows = (torch.arange(n, device=embeddings.device) + first_row).scatter(1, corruption.positions, source)
    masked = torch.zeros_like(rows, dtype=torch.bool).scatter(1, corruption.positions, kind == MASK)
    copied = embeddings.flatten(0, 1).index_select(0, rows.flatten()).view(b, n, d)
    return torch.where(masked.unsqueeze(-1), mask_embedding.to(embeddings.dtype), copied)


# The targets (App. B.1.2: 3-bit mean colour, 4x4 downsized colours, or the pixels under L2)

def as_rgb(images: torch.Tensor) -> torch.Tensor:
    """(b c h w) raw images with c = 1 or 3 -> (b 3 h w) in [0, 1]; grayscale channels replicated (a view)."""
    if images.shape[1] not in (1, 3):
        raise ValueError(f"colour targets need 1 or 3 channels, got images of shape {tuple(images.shape)}")
    return unit_interval(images).expand(-1, 3, -1, -1)


def num_colour_classes(bits: int) -> int:
    return 2 ** (3 * bits)


def quantise_colours(colours: torch.Tensor, bits: int) -> torch.Tensor:
    """(... 3) RGB values in [0, 1] -> (...) class index r * 2^(2 bits) + g * 2^bits + b of the quantised channels."""
    levels = 2**bits
    quantised = (colours * levels).floor().clamp(0, levels - 1).long()
    weights = torch.tensor([levels * levels, levels, 1], device=colours.device)
    return (quantised * weights).sum(dim=-1)


def colour_targets(images: torch.Tensor, patch_size: int, cells_per_side: int = 1, bits: int = 3) -> torch.Tensor:
    """Quantised colours of each patch downsized to ``cells_per_side`` x ``cells_per_side``.

    ``cells_per_side=1`` is the paper's 3-bit mean colour (one 512-way prediction per patch); ``4`` its 4x4 downsized
    patch (16 predictions). Returns (b n s^2) class indices, cells row by row within the patch.
    """
    if patch_size % cells_per_side:
        raise ValueError(f"patch size {patch_size} is not divisible into {cells_per_side} cells per side")
    cell_means = F.avg_pool2d(as_rgb(images).float(), kernel_size=patch_size // cells_per_side)
    cells = rearrange(cell_means, "b c (h s1) (w s2) -> b (h w) (s1 s2) c", s1=cells_per_side, s2=cells_per_side)
    return quantise_colours(cells, bits)


def pixel_targets(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """The full patch for L2 regression: (b n (p p 3)), pixel-major with channels innermost."""
    return rearrange(as_rgb(images).float(), "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=patch_size, p2=patch_size)


def class_colours(classes: torch.Tensor, bits: int) -> torch.Tensor:
    """(...) colour classes -> (... 3) RGB in [0, 1]: the centre of each quantised channel's interval (the inverse of
    ``quantise_colours`` up to quantisation)."""
    levels = 2**bits
    channels = torch.stack([classes // (levels * levels), classes // levels % levels, classes % levels], dim=-1)
    return (channels.float() + 0.5) / levels


class PatchTarget(ABC):
    """One kind of target for patches of ``patch_size`` pixels. Shapes: images (b c h w) raw in [0, 1]; k corrupted
    patches per image; a prediction and its target hold t values per patch (t colour cells, or the patch's pixels)."""

    outputs: int  # the prediction head's outputs per patch

    def __init__(self, patch_size: int, colour_bits: int) -> None:
        self.patch_size, self.colour_bits = patch_size, colour_bits

    @abstractmethod
    def targets(self, images: torch.Tensor) -> torch.Tensor:
        """Every patch's target: (b n t) colour classes, or (b n (p p 3)) pixels."""

    @abstractmethod
    def prediction(self, head_output: torch.Tensor) -> torch.Tensor:
        """(b k outputs) -> the prediction, shaped as ``loss`` takes it."""

    @abstractmethod
    def loss(self, prediction: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss and the colour accuracy of the corrupted patches' predictions (scalars)."""

    def scored_classes(self, images: torch.Tensor) -> torch.Tensor:
        """(b n t) the colour classes accuracy is scored on."""
        return self.targets(images)

    @abstractmethod
    def predicted(self, prediction: torch.Tensor) -> torch.Tensor:
        """A prediction as a value of the target's kind: the most likely classes, or the pixels."""

    @abstractmethod
    def pictures(self, values: torch.Tensor) -> torch.Tensor:
        """(b k ...) targets or ``predicted`` values -> (b k p p 3) how they look as patches."""


class ColourTarget(PatchTarget):
    """Each patch downsized to ``cells_per_side`` x ``cells_per_side`` cells, each cell's quantised colour one of
    ``2 ** (3 * bits)`` classes: with one cell the paper's 3-bit mean colour (its best few-shot option); with 4, its
    4x4 downsized patch (16 predictions of 512 colours)."""

    def __init__(self, patch_size: int, cells_per_side: int, colour_bits: int) -> None:
        if patch_size % cells_per_side:
            raise ConfigError(f"mpp.downsampled_size={cells_per_side} must divide the patch size {patch_size}")
        super().__init__(patch_size, colour_bits)
        self.cells_per_side = cells_per_side
        self.outputs = cells_per_side**2 * num_colour_classes(colour_bits)

    def targets(self, images: torch.Tensor) -> torch.Tensor:
        return colour_targets(images, self.patch_size, self.cells_per_side, self.colour_bits)

    def prediction(self, head_output: torch.Tensor) -> torch.Tensor:
        return rearrange(head_output, "b k (t c) -> b k t c", t=self.cells_per_side**2)  # c: colour logits

    def loss(self, prediction: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss = F.cross_entropy(prediction.flatten(0, 2).float(), target.flatten())
        return loss, (prediction.argmax(dim=-1) == target).float().mean()

    def predicted(self, prediction: torch.Tensor) -> torch.Tensor:
        return prediction.argmax(dim=-1)

    def pictures(self, values: torch.Tensor) -> torch.Tensor:
        """Every cell painted with its class's colour."""
        s, p = self.cells_per_side, self.patch_size
        colours = rearrange(class_colours(values, self.colour_bits), "b k (s1 s2) c -> b k s1 s2 c", s1=s)
        return repeat(colours, "b k s1 s2 c -> b k (s1 r1) (s2 r2) c", r1=p // s, r2=p // s)


class PixelTarget(PatchTarget):
    """L2 regression of the whole patch, (p p 3) values (the paper's third option, slightly worse). Its accuracy is
    scored like the colour targets', on the predicted patch's mean colour, so runs compare."""

    def __init__(self, patch_size: int, colour_bits: int) -> None:
        super().__init__(patch_size, colour_bits)
        self.outputs = patch_size * patch_size * 3

    def targets(self, images: torch.Tensor) -> torch.Tensor:
        return pixel_targets(images, self.patch_size)

    def prediction(self, head_output: torch.Tensor) -> torch.Tensor:
        return head_output

    def loss(self, prediction: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        predicted_colour = self.mean_colour(prediction.float())
        return F.mse_loss(prediction.float(), target), (predicted_colour == self.mean_colour(target)).float().mean()

    def scored_classes(self, images: torch.Tensor) -> torch.Tensor:
        return colour_targets(images, self.patch_size, 1, self.colour_bits)

    def mean_colour(self, pixels: torch.Tensor) -> torch.Tensor:
        """(b k (p p 3)) patches -> (b k) class of their quantised mean colour."""
        return quantise_colours(rearrange(pixels, "b k (pp c) -> b k pp c", c=3).mean(dim=2), self.colour_bits)

    def predicted(self, prediction: torch.Tensor) -> torch.Tensor:
        return prediction

    def pictures(self, values: torch.Tensor) -> torch.Tensor:
        p = self.patch_size
        return rearrange(values.float(), "b k (p q c) -> b k p q c", p=p, q=p).clamp(0, 1)


# mpp.target -> the target for patches of a given size.
TARGETS: dict[str, Callable[[MPPConfig, int], PatchTarget]] = {
    "mean_colour": lambda cfg, patch_size: ColourTarget(patch_size, 1, cfg.colour_bits),
    "downsampled": lambda cfg, patch_size: ColourTarget(patch_size, cfg.downsampled_size, cfg.colour_bits),
    "pixels": lambda cfg, patch_size: PixelTarget(patch_size, cfg.colour_bits),
}


# The model

CORRUPTION_STREAM = 0x4D5050  # folded into each image's key: its corruption is drawn apart from its view


@dataclass
class MPPOutput:
    loss: torch.Tensor  # scalar
    accuracy: torch.Tensor  # scalar: fraction of right colour predictions over the corrupted patches
    prediction: torch.Tensor  # (b k t c) colour logits, or (b k (p p 3)) pixels
    target: torch.Tensor  # (b k t) colour classes, or (b k (p p 3)) pixels
    corruption: Corruption


@with_fsdp2_tensor_lookup  # accelerate's FSDP2 loading finds the top-level mask_embedding
class MaskedPatchPredictor(BuiltOnEncoder):
    """A ViT with MPP's parts around it: the encoder (``encoder``, timm's ViT, and ``normalise``, its input
    normalisation, as in every model here), the learnable [mask] embedding, the prediction head and the target
    (``target``: what each corrupted patch is scored against, and how)."""

    def __init__(
        self,
        encoder: VisionTransformer,
        cfg: MPPConfig,
        mean: Sequence[float],
        std: Sequence[float],
    ) -> None:
        # The encoder sees normalised pixels; targets come from the raw ones, so normalising happens here.
        super().__init__(encoder, InputNormalisation(mean, std, encoder.patch_embed.proj.in_channels))
        self.cfg = cfg
        self.target = TARGETS[cfg.target](cfg, encoder.patch_embed.patch_size[0])
        dim = encoder.embed_dim
        self.mask_embedding = nn.Parameter(torch.empty(dim))
        nn.init.trunc_normal_(self.mask_embedding, std=0.02)
        self.head = nn.Linear(dim, self.target.outputs)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        return super().no_weight_decay() | {"mask_embedding"}

    def draw_corruption(self, random_keys: torch.Tensor) -> Corruption:
        """The corruption of the images with these (b) keys (``mpp.images.keys_of``), on the keys' device.
        The keys are folded with a constant first: the data drew each image's view from the same key."""
        return draw_corruption(
            KeyedDraws(keys_of(CORRUPTION_STREAM, random_keys)),
            self.encoder.patch_embed.num_patches,
            self.cfg.corruption_rate,
            self.cfg.mask_fraction,
            self.cfg.random_fraction,
        )

    def encode(self, images: torch.Tensor, corruption: Corruption) -> torch.Tensor:
        """(b c h w) raw images in [0, 1] -> (b n d) output tokens of the patches, corrupted as drawn."""
        encoder = self.encoder
        x = encoder.patch_embed(self.normalise(images))  # (b n d): before position embeddings
        x = corrupt_patch_embeddings(x, self.mask_embedding, corruption)
        # The rest of timm's VisionTransformer.forward_features, unchanged.
        x = add_position_embeddings(encoder, x)
        x = encoder.patch_drop(x)
        x = encoder.norm_pre(x)
        x = checkpoint_seq(encoder.blocks, x) if encoder.grad_checkpointing else encoder.blocks(x)
        x = encoder.norm(x)
        return x[:, encoder.num_prefix_tokens :]

    def forward(
        self,
        images: torch.Tensor,
        labels: Optional[torch.Tensor] = None,
        random_keys: Optional[torch.Tensor] = None,
        corruption: Optional[Corruption] = None,
    ) -> MPPOutput:
        """One MPP pass over raw images (b c h w), uint8 or float in [0, 1]. Labels are ignored: the objective is
        self-supervised.

        Unless a corruption is given, one is drawn from the images' ``random_keys``, (b) int64 (the batch's own: see
        ``ImageDataset``), or from random keys.
        """
        images = unit_interval(images)  # once, for both the encoder's input and the targets
        if corruption is None:
            if random_keys is None:
                random_keys = torch.randint(2**32, images.shape[:1], device=images.device)
            corruption = self.draw_corruption(random_keys)
        tokens = self.encode(images, corruption)
        prediction = self.target.prediction(self.head(select_patches(tokens, corruption.positions)))
        target = select_patches(self.target.targets(images), corruption.positions)
        loss, accuracy = self.target.loss(prediction, target)
        return MPPOutput(loss=loss, accuracy=accuracy, prediction=prediction, target=target, corruption=corruption)


@torch.no_grad()
def mpp_majority_class_accuracy(model: MaskedPatchPredictor, batches: Iterable[torch.Tensor]) -> float:
    """The MPP accuracy of always predicting the most frequent colour class of these (b c h w) images: the floor
    a trained predictor has to clear (corrupted patches are a uniform sample of all patches)."""
    counts = torch.zeros(num_colour_classes(model.cfg.colour_bits), dtype=torch.long)
    for images in batches:
        counts += torch.bincount(model.target.scored_classes(images).flatten().cpu(), minlength=len(counts))
    return (counts.max() / counts.sum()).item()
