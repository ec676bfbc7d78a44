"""The pictures' contents: filter components, position similarity, attention read off timm's blocks, rollout
overlays, the MPP mosaic; and the feature cache's fingerprint."""

from __future__ import annotations

import pytest
import torch
from einops import rearrange

from mpp.config.model import MPPConfig
from mpp.data.image_dataset import ImageDataset, ImageView
from mpp.data.shapes import ShapesSource
from mpp.evaluation.frozen_encoder import feature_fingerprint
from mpp.evaluation.inspection import (
    attention_weights,
    filter_principal_components,
    position_similarity,
    rollout_overlays,
)
from mpp.evaluation.mpp_mosaic import mpp_mosaic
from mpp.evaluation.pictures import enlarged
from mpp.models.encoder import ImageEncoder as FeatureExtractor
from mpp.models.encoder import InputNormalisation, create_encoder
from mpp.models.masked_patch_prediction import (
    MASK,
    RANDOM,
    UNCHANGED,
    Corruption,
    MaskedPatchPredictor,
    class_colours,
    colour_targets,
    quantise_colours,
)
from mpp.private_apis import add_position_embeddings


def test_class_colours_invert_the_quantisation():
    classes = torch.arange(512)
    assert torch.equal(quantise_colours(class_colours(classes, bits=3), bits=3), classes)


def test_the_first_filter_component_is_the_direction_the_filters_vary_along():
    pattern = torch.randn(3, 4, 4)
    weight = torch.randn(64, 1, 1, 1) * pattern + 0.01 * torch.randn(64, 3, 4, 4)  # (d c p p): one direction
    first = filter_principal_components(weight, count=5)[0]
    stretched = (pattern - pattern.min()) / (pattern.max() - pattern.min())
    assert min((first - stretched).abs().max(), (first - (1 - stretched)).abs().max()) < 0.02  # up to sign
    assert filter_principal_components(torch.randn(32, 1, 2, 2), count=28).shape == (4, 1, 2, 2)  # at most c p p


def test_each_position_is_most_similar_to_itself_and_maps_lie_on_the_patch_grid():
    pos_embed = torch.randn(1, 1 + 12, 16)
    maps = position_similarity(pos_embed, grid=(3, 4))
    assert maps.shape == (12, 3, 4)
    own = maps.flatten(1).diagonal()
    assert torch.allclose(own, torch.ones(12)) and (maps.flatten(1).argmax(dim=1) == torch.arange(12)).all()


def test_attention_weights_are_timms_own_and_leave_the_encoder_as_it_was(tiny_model_config):
    encoder = create_encoder(tiny_model_config).train()
    images = torch.randn(3, 3, 16, 16)
    fused = [block.attn.fused_attn for block in encoder.blocks]
    weights = attention_weights(encoder, images)
    assert len(weights) == 2 and weights[0].shape == (3, 2, 17, 17)
    assert torch.allclose(weights[0].sum(dim=-1), torch.ones(3, 2, 17))
    # The first block's weights, recomputed from its query and key projections.
    block = encoder.blocks[0]
    x = block.norm1(encoder.norm_pre(add_position_embeddings(encoder, encoder.patch_embed(images))))
    q, k, _ = rearrange(block.attn.qkv(x), "b t (three h e) -> three b h t e", three=3, h=2)
    assert torch.allclose(weights[0], (q @ k.transpose(-1, -2) * block.attn.scale).softmax(dim=-1), atol=1e-6)
    assert encoder.training and [block.attn.fused_attn for block in encoder.blocks] == fused
    assert not any(block.attn.attn_drop._forward_hooks for block in encoder.blocks)


def test_uniform_rollout_keeps_the_image_and_a_focused_one_darkens_the_rest():
    images = torch.rand(2, 3, 8, 8)
    uniform = torch.full((2, 5, 5), 0.2)  # [class] + 2x2 patches
    assert torch.allclose(rollout_overlays(images, uniform, grid=(2, 2)), images)
    focused = torch.zeros(2, 5, 5)
    focused[:, 0, 1] = 1  # all from the top-left patch
    overlay = rollout_overlays(images, focused, grid=(2, 2))
    assert torch.allclose(overlay[..., :2, :2], images[..., :2, :2]) and overlay[..., 6:, 6:].abs().max() == 0


@pytest.mark.parametrize("target", ["mean_colour", "downsampled", "pixels"])
def test_the_mosaic_shows_images_their_corrupted_views_targets_and_predictions(tiny_model_config, target):
    model = MaskedPatchPredictor(create_encoder(tiny_model_config), MPPConfig(target=target), (0.5,) * 3,
                                 (0.5,) * 3).eval()
    images = torch.rand(2, 3, 16, 16)
    corruption = Corruption(positions=torch.tensor([[0, 5, 9], [3, 4, 15]]),
                            replacement=torch.tensor([[MASK, RANDOM, UNCHANGED], [RANDOM, MASK, MASK]]),
                            sources=torch.tensor([[1, 2, 3], [12, 0, 0]]))
    mosaic = mpp_mosaic(model, images, corruption)
    scale = enlarged(images).shape[-1] // 16
    side = 16 * scale  # make_grid: cells of side x side, 2 pixels apart and from the edge

    def first_image_of_row(row: int) -> torch.Tensor:
        top = 2 + row * (side + 2)
        return mosaic[:, top: top + side: scale, 2: 2 + side: scale]

    rows = [first_image_of_row(row) for row in range(4)]
    original, seen, targets, _ = rows  # the first image of each row
    assert torch.allclose(original, images[0], atol=1e-6)

    def patch(picture, index):
        return picture[:, index // 4 * 4: index // 4 * 4 + 4, index % 4 * 4: index % 4 * 4 + 4]

    assert torch.allclose(patch(seen, 0), torch.full((3, 4, 4), 0.5))  # [mask]
    assert torch.allclose(patch(seen, 5), patch(images[0], 2), atol=1e-6)  # the patch it was replaced by
    assert torch.allclose(patch(seen, 9), patch(images[0], 9), atol=1e-6)  # unchanged
    assert torch.allclose(patch(targets, 7), patch(images[0], 7), atol=1e-6)  # not corrupted: the image itself
    if target == "mean_colour":
        expected = class_colours(colour_targets(images[:1], 4)[0, 5, 0], bits=3)
        assert torch.allclose(patch(targets, 5), expected[:, None, None].expand(3, 4, 4), atol=1e-6)
    if target == "pixels":
        assert torch.allclose(patch(targets, 5), patch(images[0], 5), atol=1e-6)


def test_the_feature_fingerprint_changes_with_the_weights_the_pooling_and_the_images(tiny_model_config):
    encoder = create_encoder(tiny_model_config)
    extractor = FeatureExtractor(encoder, InputNormalisation((0.5,) * 3, (0.5,) * 3, 3), "token")
    source, view = ShapesSource("test", 16), ImageView(16, augment=False)
    dataset = ImageDataset(source, view, 3, torch.arange(10))
    key = feature_fingerprint(extractor, dataset)
    assert key == feature_fingerprint(extractor, ImageDataset(source, view, 3, torch.arange(10)))
    assert key != feature_fingerprint(extractor, ImageDataset(source, view, 3, torch.arange(1, 11)))
    assert key != feature_fingerprint(FeatureExtractor(encoder, extractor.normalise, "avg"), dataset)
    with torch.no_grad():
        encoder.pos_embed[0, 0, 0] += 1e-3
    assert key != feature_fingerprint(extractor, dataset)
