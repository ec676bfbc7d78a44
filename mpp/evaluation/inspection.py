"""The paper's pictures of what a ViT learned (Sec. 4.5, Fig. 7, App. D.7-D.8), and of what MPP predicts.

- ``filter_principal_components``: the patch-embedding filters' principal components (Fig. 7 left).
- ``position_similarity``: each position embedding's cosine similarity to all others, on the patch grid (Fig. 7
  centre).
- ``attention_weights`` + ``mean_attention_distance``: how far each head looks, against depth (Fig. 7 right).
- ``attention_rollout``: where the [class] token's output comes from in the image (Fig. 6).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from einops import rearrange
from timm.models.vision_transformer import VisionTransformer

from mpp.config.evaluation import InspectionConfig
from mpp.evaluation.attention_maps import attention_rollout, mean_attention_distance
from mpp.evaluation.pictures import colour_mapped, enlarged, figure_picture, image_grid, save_picture
from mpp.models.masked_patch_prediction import as_rgb


def filter_principal_components(weight: torch.Tensor, count: int) -> torch.Tensor:
    """(d c p p) patch-embedding filters -> (m c p p) their first m <= ``count`` principal components, each
    stretched to [0, 1] for display."""
    flat = rearrange(weight.detach().double().cpu(), "d c p q -> d (c p q)")
    _, _, components = torch.linalg.svd(flat - flat.mean(dim=0), full_matrices=False)  # rows: directions
    components = components[:count]
    low, high = components.min(dim=1, keepdim=True).values, components.max(dim=1, keepdim=True).values
    stretched = (components - low) / (high - low).clamp_min(1e-12)
    return rearrange(stretched.float(), "m (c p q) -> m c p q", c=weight.shape[1], p=weight.shape[2])


def position_similarity(pos_embed: torch.Tensor, grid: tuple[int, int], prefix_tokens: int = 1) -> torch.Tensor:
    """(1 p+n d) position embeddings -> (n gh gw): for each patch, the cosine similarity of its embedding to every
    patch's, laid out as the image's patch grid."""
    patches = F.normalize(pos_embed[0, prefix_tokens:].detach().float(), dim=-1)  # (n d)
    return rearrange(patches @ patches.T, "n (gh gw) -> n gh gw", gh=grid[0], gw=grid[1])


@torch.no_grad()
def attention_weights(encoder: VisionTransformer, images: torch.Tensor) -> list[torch.Tensor]:
    """[(b h t t)] the softmax attention of every block, first to last, for normalised ``images``. timm's fused
    attention never forms the weights, so its unfused path runs for this one pass; hooks read them off each block's
    attention dropout (the identity in eval mode)."""
    attentions = [block.attn for block in encoder.blocks]
    fused = [attention.fused_attn for attention in attentions]
    weights: list[torch.Tensor] = []
    handles = [attention.attn_drop.register_forward_hook(lambda module, inputs, output: weights.append(output))
               for attention in attentions]
    was_training = encoder.training
    try:
        for attention in attentions:
            attention.fused_attn = False
        encoder.eval()
        encoder.forward_features(images)
    finally:
        for attention, was_fused in zip(attentions, fused, strict=True):
            attention.fused_attn = was_fused
        for handle in handles:
            handle.remove()
        encoder.train(was_training)
    return weights


def rollout_overlays(images: torch.Tensor, rollout: torch.Tensor, grid: tuple[int, int], prefix_tokens: int = 1
                     ) -> torch.Tensor:
    """(b c h w) raw images, (b t t) rollout -> (b 3 h w): each image weighted by how much of the [class] token's
    output comes from each of its patches, scaled so that the most attended patch keeps its full brightness."""
    weights = rearrange(rollout[:, 0, prefix_tokens:], "b (gh gw) -> b 1 gh gw", gh=grid[0], gw=grid[1])
    weights = weights / weights.amax(dim=(2, 3), keepdim=True)
    weights = F.interpolate(weights.float(), size=images.shape[-2:], mode="bilinear", align_corners=False)
    return as_rgb(images).float() * weights


def attention_distance_chart(distances: torch.Tensor, patch_size: int) -> torch.Tensor:
    """(layers heads) mean attention distances in pixels -> the chart of App. D.7 (one dot per head) as (3 h w)."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(5, 3.6), dpi=100)
    layers = torch.arange(1, distances.shape[0] + 1).repeat_interleave(distances.shape[1])
    axes.scatter(layers.numpy(), distances.flatten().numpy(), s=14, alpha=0.8)
    axes.set(xlabel="network depth (layer)", ylabel="mean attention distance (pixels)",
             title=f"Mean attention distance per head ({patch_size} px patches)",
             xticks=range(1, distances.shape[0] + 1), ylim=(0, None))
    axes.grid(alpha=0.3)
    figure.tight_layout()
    return figure_picture(figure)


def inspect_encoder(accelerator: Accelerator, encoder: VisionTransformer, normalise: torch.nn.Module,
                    images: torch.Tensor, run_dir: Path, cfg: InspectionConfig) -> dict[str, Any]:
    """Writes the four pictures of an encoder (PNG and TensorBoard) for raw ``images`` (b c h w) on its device;
    returns the mean attention distances and the pictures' paths."""
    grid, patch_size = encoder.patch_embed.grid_size, encoder.patch_embed.patch_size[0]
    prefix = encoder.num_prefix_tokens
    paths = {}

    filters = enlarged(as_rgb(filter_principal_components(encoder.patch_embed.proj.weight, cfg.filter_components)),
                       min_side=32)
    paths["patch_embedding_filters"] = save_picture(accelerator, run_dir, "patch_embedding_filters",
                                                    "inspect/patch_embedding_filters", image_grid(filters, 7))

    similarity = position_similarity(encoder.pos_embed, grid, prefix)  # (n gh gw)
    maps = rearrange(colour_mapped(similarity, -1, 1), "n gh gw c -> n c gh gw")
    paths["position_embedding_similarity"] = save_picture(
        accelerator, run_dir, "position_embedding_similarity", "inspect/position_embedding_similarity",
        image_grid(enlarged(maps, min_side=24), columns=grid[1]))

    attentions = attention_weights(encoder, normalise(images[: cfg.attention_images]))
    distances = torch.stack([mean_attention_distance(weights, patch_size, prefix) for weights in attentions]).cpu()
    paths["mean_attention_distance"] = save_picture(accelerator, run_dir, "mean_attention_distance",
                                                    "inspect/mean_attention_distance",
                                                    attention_distance_chart(distances, patch_size))

    shown = images[: cfg.rollout_images]
    rollout = attention_rollout([weights[: len(shown)] for weights in attentions])
    pairs = torch.cat([as_rgb(shown).float(), rollout_overlays(shown, rollout, grid, prefix)])  # images, then maps
    paths["attention_rollout"] = save_picture(accelerator, run_dir, "attention_rollout", "inspect/attention_rollout",
                                              image_grid(enlarged(pairs).cpu(), columns=len(shown)))
    return {"mean_attention_distance": distances.tolist(), "pictures": {name: str(path) for name, path in
                                                                          paths.items()}}
