"""The encoder's structure without its weights (mpp.models.encoder.encoder_structure): what the presets table, the cost
table and the benchmarks read of a preset's encoder, without initialising a ViT-L's weights to read it."""

from __future__ import annotations

import dataclasses

import pytest

from mpp.config.model import ModelConfig
from mpp.errors import ConfigError
from mpp.models.encoder import count_parameters, create_encoder, encoder_structure


def sizes(encoder) -> tuple:
    return (encoder.embed_dim, len(encoder.blocks), encoder.blocks[0].attn.num_heads, encoder.patch_embed.img_size,
            encoder.patch_embed.patch_size, encoder.patch_embed.num_patches, count_parameters(encoder))


def test_the_structure_has_the_built_encoders_sizes_and_parameters_and_no_weights(tiny_model_config):
    structure = encoder_structure(tiny_model_config)
    assert sizes(structure) == sizes(create_encoder(tiny_model_config))
    assert all(parameter.is_meta for parameter in structure.parameters())


def test_a_named_vits_structure_has_the_papers_parameter_count():
    # ViT-B has 86M parameters (the paper's Table 1); timm's encoder without its head 85.8M
    structure = encoder_structure(ModelConfig(name="vit_base_patch16_224"))
    assert count_parameters(structure) / 1e6 == pytest.approx(86, abs=0.5)
    assert sizes(structure)[:5] == (768, 12, 12, (224, 224), (16, 16))


def test_the_structure_refuses_what_building_the_encoder_refuses(tiny_model_config):
    with pytest.raises(ConfigError, match="is not a timm Vision Transformer.*vit_tiny_patch16_224"):
        encoder_structure(dataclasses.replace(tiny_model_config, name="vit_tiny_patch16"))
