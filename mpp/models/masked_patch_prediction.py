"""The masked patch prediction model: a timm ViT, a learnable [mask] embedding and a per-patch prediction head.

Paper Sec. 4.6: corrupt patch embeddings, encode, and predict each corrupted patch's target from that patch's own
output token. Loss and accuracy count corrupted patches only. The head runs on the k corrupted tokens alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

import torch
from timm.models import checkpoint_seq
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from mpp.config.model import MPPConfig
from mpp.keyed_random import KeyedDraws, keys_of
from mpp.models.corruption import Corruption, corrupt_patch_embeddings, draw_corruption, select_patches
from mpp.models.encoder import BuiltOnEncoder, InputNormalisation
from mpp.models.targets import TARGETS, num_colour_classes
from mpp.private_apis import add_position_embeddings, with_fsdp2_tensor_lookup
from mpp.raw_images import unit_interval

__all__ = ["MaskedPatchPredictor"]  # what study/, tools/ and users may import from here

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
        """The corruption of the images with these (b) keys (``mpp.keyed_random.keys_of``), on the keys' device.
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
