"""What a ViT's attention looks at (paper Sec. 4.5, App. D.7-D.8): mean attention distance per head, and attention
rollout (Abnar & Zuidema 2020) from the [class] token to the image.

Attention tensors are (b h t t) softmax weights over t = p + n tokens, p prefix ([class]) tokens first, then the
n patches of a square grid in row-major order.
"""

from __future__ import annotations

import torch


def patch_distances(grid: int, patch_size: int) -> torch.Tensor:
    """(n n) pixel distance between the centres of every two patches of a ``grid`` x ``grid`` image."""
    rows, columns = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    centres = torch.stack([rows.flatten(), columns.flatten()], dim=1).double() * patch_size
    return torch.cdist(centres, centres)


def mean_attention_distance(attention: torch.Tensor, patch_size: int, prefix_tokens: int = 1) -> torch.Tensor:
    """(b h t t) -> (h): per head, the pixel distance between each patch query and the patches it attends to,
    weighted by the attention and averaged over queries and images (App. D.7). Attention to prefix tokens has no
    place in the image and is left out; each query's weights over the patches are renormalised."""
    patches = attention[:, :, prefix_tokens:, prefix_tokens:].double()  # (b h n n)
    grid = round(patches.shape[-1] ** 0.5)
    weights = patches / patches.sum(dim=-1, keepdim=True)
    distances = patch_distances(grid, patch_size).to(weights.device)
    return (weights * distances).sum(dim=-1).mean(dim=(0, 2))


def attention_rollout(attentions: list[torch.Tensor]) -> torch.Tensor:
    """[(b h t t)] per layer, first to last -> (b t t): heads averaged, the identity added for the residual
    connection and rows renormalised, then multiplied through the layers. Row 0 maps the [class] token's output to
    the input tokens."""
    rollout = None
    for attention in attentions:
        mixed = attention.mean(dim=1) + torch.eye(attention.shape[-1], device=attention.device)
        mixed = mixed / mixed.sum(dim=-1, keepdim=True)
        rollout = mixed if rollout is None else mixed @ rollout
    return rollout
