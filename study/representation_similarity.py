"""What fine-tuning keeps of a pre-trained encoder: how alike two encoders' features are, block by block (linear
centred kernel alignment, Kornblith et al., ICML 2019), and how far fine-tuning moved the weights.

A block's features are its output's patch tokens averaged per image, the readout MPP trains; the [class] and other
prefix tokens are left out.
"""

from __future__ import annotations

import torch
from timm.models.vision_transformer import VisionTransformer


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """(n d1), (n d2) features of the same n inputs -> their linear CKA, ||yᵀx||² / (||xᵀx|| ||yᵀy||) (Frobenius
    norms) of the features centred over the inputs: 1 where they are equal up to a rotation and an isotropic scale,
    near 0 where unrelated. In float64, since the norms are sums of fourth powers of the features."""
    x, y = x.double(), y.double()
    x, y = x - x.mean(dim=0), y - y.mean(dim=0)
    cross = torch.linalg.matrix_norm(y.T @ x) ** 2  # (d2 d1) before the norm
    return float(cross / (torch.linalg.matrix_norm(x.T @ x) * torch.linalg.matrix_norm(y.T @ y)))


@torch.no_grad()
def block_features(encoder: VisionTransformer, images: torch.Tensor) -> list[torch.Tensor]:
    """(b c h w) normalised images -> per block, first to last, (b d): the mean of the block's output patch tokens
    (before the final norm). Read in eval mode, so that dropout and drop-path draw nothing; the mode is restored."""
    was_training = encoder.training
    encoder.eval()
    # [(b n d)]: timm splits the encoder's num_prefix_tokens off each block's output and returns the patches alone.
    blocks = encoder.forward_intermediates(images, output_fmt="NLC", intermediates_only=True)
    encoder.train(was_training)
    return [tokens.mean(dim=1) for tokens in blocks]


def block_similarity(encoder_a: VisionTransformer, encoder_b: VisionTransformer, images: torch.Tensor
                     ) -> list[float]:
    """Per block, first to last, the linear CKA between the two encoders' ``block_features`` of ``images``; the
    encoders need as many blocks, not the same width."""
    return [linear_cka(a, b) for a, b in zip(block_features(encoder_a, images), block_features(encoder_b, images),
                                             strict=True)]


def relative_weight_change(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    """||θ_after - θ_before|| / ||θ_before|| over the tensors both state dicts hold under one name and shape: the
    encoder's, where one of them is a classifier with a head the other lacks."""
    shared = [name for name, value in before.items() if name in after and after[name].shape == value.shape]
    if not shared:
        raise ValueError("the two state dicts share no tensor of one name and shape: compare an encoder's weights "
                         "with the same encoder's, without a prefix such as 'encoder.'")
    theta_before = torch.cat([before[name].flatten().double() for name in shared])
    theta_after = torch.cat([after[name].flatten().double() for name in shared])
    return float(torch.linalg.vector_norm(theta_after - theta_before) / torch.linalg.vector_norm(theta_before))
