from __future__ import annotations

import pytest
import torch
from einops import repeat

from mpp.config.model import MPPConfig
from mpp.errors import ConfigError
from mpp.images import KeyedDraws, keys_of
from mpp.models.encoder import BuiltOnEncoder, ImageEncoder, create_encoder
from mpp.models.masked_patch_prediction import (
    MASK,
    UNCHANGED,
    Corruption,
    MaskedPatchPredictor,
    draw_corruption,
    mpp_majority_class_accuracy,
)

MEAN, STD = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)


def build(model_config, **mpp_settings) -> MaskedPatchPredictor:
    return MaskedPatchPredictor(create_encoder(model_config), MPPConfig(**mpp_settings), MEAN, STD).eval()


def test_uncorrupted_encoding_is_timms_forward_features_on_normalised_input(tiny_model_config):
    model = build(tiny_model_config)
    images = torch.rand(3, 3, 16, 16)
    nothing = model.draw_corruption(torch.arange(3))
    nothing.replacement.fill_(UNCHANGED)
    normalised = (images - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]
    expected = model.encoder.forward_features(normalised)[:, 1:]  # patch tokens, after the class token
    assert torch.allclose(model.encode(images, nothing), expected, atol=1e-6)


def test_corruption_acts_before_position_embeddings(tiny_model_config):
    model = build(tiny_model_config)
    images = torch.rand(2, 3, 16, 16)
    everything = Corruption(
        positions=torch.arange(16).repeat(2, 1),
        replacement=torch.full((2, 16), MASK),
        sources=torch.zeros(2, 16, dtype=torch.long),
    )
    # With every patch masked the image is gone, but position embeddings still tell the tokens apart.
    tokens = model.encode(images, everything)
    assert torch.allclose(tokens[0], tokens[1], atol=1e-6)
    assert not torch.allclose(tokens[0, 0], tokens[0, 1], atol=1e-3)


@pytest.mark.parametrize(
    ("target", "prediction_shape", "target_shape"),
    [("mean_colour", (2, 8, 1, 512), (2, 8, 1)), ("downsampled", (2, 8, 16, 512), (2, 8, 16)),
     ("pixels", (2, 8, 48), (2, 8, 48))],
)
def test_each_corrupted_patch_is_predicted_from_its_own_token(
    tiny_model_config, target, prediction_shape, target_shape
):
    model = build(tiny_model_config, target=target)
    images = torch.rand(2, 3, 16, 16)
    output = model(images)
    assert output.prediction.shape == prediction_shape and output.target.shape == target_shape

    tokens = model.encode(images, output.corruption)
    positions = output.corruption.positions
    own_tokens = tokens.gather(1, repeat(positions, "b k -> b k d", d=tokens.shape[-1]))
    assert torch.allclose(output.prediction.flatten(2), model.head(own_tokens), atol=1e-6)
    all_targets = model.target.targets(images)
    assert torch.equal(output.target, all_targets.gather(1, repeat(positions, "b k -> b k t", t=all_targets.shape[-1])))
    assert torch.isfinite(output.loss) and 0 <= output.accuracy <= 1


def test_loss_and_accuracy_count_the_corrupted_patches_only(tiny_model_config):
    model = build(tiny_model_config)
    prediction = torch.zeros(1, 2, 1, 512)
    prediction[0, 0, 0, 7] = 100.0  # right about the first corrupted patch, uniform about the second
    loss, accuracy = model.target.loss(prediction, torch.tensor([[[7], [9]]]))
    assert accuracy.item() == 0.5
    assert loss.item() == pytest.approx(torch.log(torch.tensor(512.0)).item() / 2, rel=1e-4)


@pytest.mark.parametrize("target", ["mean_colour", "downsampled", "pixels"])
def test_loss_falls_when_overfitting_one_batch(tiny_model_config, target):
    model = build(tiny_model_config, target=target).train()
    images = torch.rand(8, 3, 16, 16)
    corruption = model.draw_corruption(torch.arange(8))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(60):
        output = model(images, corruption=corruption)
        optimizer.zero_grad()
        output.loss.backward()
        optimizer.step()
        losses.append(output.loss.item())
    assert losses[-1] < 0.3 * losses[0], losses[::10]
    if target != "pixels":
        assert output.accuracy.item() > 0.9


def test_grayscale_images_train_an_rgb_encoder(tiny_model_config):
    model = build(tiny_model_config)
    gray = torch.rand(2, 1, 16, 16)
    corruption = model.draw_corruption(torch.arange(2))
    from_gray = model(gray, corruption=corruption)
    from_rgb = model(gray.expand(-1, 3, -1, -1), corruption=corruption)
    assert torch.allclose(from_gray.loss, from_rgb.loss) and torch.equal(from_gray.target, from_rgb.target)


def test_uint8_images_from_decoded_files_give_the_pass_of_their_float_values(tiny_model_config):
    model = build(tiny_model_config)
    pixels = torch.randint(0, 256, (2, 3, 16, 16), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    corruption = model.draw_corruption(torch.arange(2))
    from_uint8, from_float = model(pixels, corruption=corruption), model(pixels / 255, corruption=corruption)
    assert torch.equal(from_uint8.loss, from_float.loss) and torch.equal(from_uint8.target, from_float.target)
    encoder = ImageEncoder(model.encoder, model.normalise)  # the encoder every model shares
    assert torch.equal(encoder(pixels), encoder(pixels / 255))


def test_mpp_has_an_encoder_whose_weights_keep_timms_names_and_are_shared(tiny_model_config):
    model = build(tiny_model_config)
    vit_names = {f"encoder.{name}" for name in model.encoder.state_dict()}
    assert set(model.state_dict()) == vit_names | {"mask_embedding", "head.weight", "head.bias"}
    features = ImageEncoder(model.encoder, model.normalise, "avg")
    assert isinstance(model, BuiltOnEncoder) and not isinstance(model, ImageEncoder)
    images = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    before = features(images)
    with torch.no_grad():
        model.encoder.norm.bias.add_(1.0)  # a change to the model's encoder is a change to its features
    assert torch.allclose(features(images), before + 1.0, atol=1e-6)


def test_every_state_tensor_is_found_by_name_as_accelerates_fsdp2_loading_looks_it_up(tiny_model_config):
    # accelerate 1.15's fsdp2_load_full_state_dict calls model.get_parameter_or_buffer(name) for every state-dict name
    # (else it splits the name at a dot, which failed on a GPU for the top-level mask_embedding).
    model = build(tiny_model_config)
    for name, tensor in model.state_dict(keep_vars=True).items():
        assert model.get_parameter_or_buffer(name) is tensor, name
    with pytest.raises(AttributeError):
        model.get_parameter_or_buffer("encoder.no_such_weight")


def test_normalisation_must_fit_the_input_channels(tiny_model_config):
    with pytest.raises(ConfigError, match="one value per input channel"):
        MaskedPatchPredictor(create_encoder(tiny_model_config), MPPConfig(), (0.5,), (0.5,))
    with pytest.raises(ConfigError, match="must divide the patch size"):
        build(tiny_model_config, target="downsampled", downsampled_size=3)


def test_tokens_and_mask_embedding_are_excluded_from_weight_decay(tiny_model_config):
    names = build(tiny_model_config).no_weight_decay()
    assert {"mask_embedding", "encoder.pos_embed", "encoder.cls_token"} <= names


@pytest.mark.parametrize("target", ["mean_colour", "pixels"])
def test_the_most_frequent_class_baseline_counts_every_patch(tiny_model_config, target):
    model = build(tiny_model_config, target=target)
    images = torch.zeros(2, 3, 16, 16)  # 16 black patches per image ...
    images[0, :, :4, :8] = 1.0  # ... but two white ones in the first, and a grey one in the second
    images[1, :, 4:8, 4:8] = 0.5
    batches = [images[:1], images[1:]]
    assert mpp_majority_class_accuracy(model, batches) == pytest.approx(29 / 32)


def test_the_corruption_is_drawn_apart_from_the_view_of_the_same_image_key(tiny_model_config):
    model = build(tiny_model_config)
    keys = keys_of(0, 0, torch.arange(64))  # what the data drew these images' views from
    from_the_model = model.draw_corruption(keys)
    from_the_raw_keys = draw_corruption(KeyedDraws(keys), model.encoder.patch_embed.num_patches, 0.5)
    assert not torch.equal(from_the_model.positions, from_the_raw_keys.positions)
    assert torch.equal(from_the_model.positions, model.draw_corruption(keys.clone()).positions)  # the key's alone
