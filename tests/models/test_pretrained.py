"""Starting weights for fine-tuning: read from every kind of init, fitted to the model, or refused clearly."""

from __future__ import annotations

import dataclasses

import pytest
import timm
import torch
from PIL import Image
from safetensors.torch import save_file

from mpp.config.model import ModelConfig
from mpp.errors import ConfigError
from mpp.models.encoder import ImageEncoder, InputNormalisation, create_encoder
from mpp.models.pretrained import (
    export_encoder,
    fine_tuning_encoder,
    fine_tuning_model_config,
    input_normalisation,
    load_encoder_weights,
    read_pretrained,
    resample_position_embeddings,
)


def test_position_embeddings_are_unchanged_when_the_grid_is_the_same():
    pos_embed = torch.randn(1, 1 + 16, 8)
    assert torch.equal(resample_position_embeddings(pos_embed, (4, 4)), pos_embed)


def test_position_embeddings_are_interpolated_in_2d_keeping_the_class_token():
    rows = torch.linspace(-1, 1, 4).view(4, 1, 1).expand(4, 4, 8)  # each embedding depends on its row only
    columns = torch.linspace(-1, 1, 4).view(1, 4, 1).expand(4, 4, 8)  # ... on its column only
    for grid in (rows, columns):
        pos_embed = torch.cat([torch.full((1, 1, 8), 7.0), grid.reshape(1, 16, 8)], dim=1)
        resampled = resample_position_embeddings(pos_embed, (6, 6))
        assert resampled.shape == (1, 1 + 36, 8)
        assert torch.equal(resampled[:, 0], pos_embed[:, 0])  # the [class] token's embedding, as it was
        patches = resampled[0, 1:].reshape(6, 6, 8)
        # Interpolated by location in the image: a row pattern stays a row pattern, a column pattern a column one.
        varies_along = 0 if grid is rows else 1
        assert torch.allclose(patches, patches.select(1 - varies_along, 0).unsqueeze(1 - varies_along), atol=1e-6)
        profile = patches.select(1 - varies_along, 0)[:, 0]
        assert (profile.diff() > 0).all()  # still running from one edge to the other


def test_an_export_fits_a_higher_resolution_model_with_every_other_tensor_unchanged(tiny_model_config, tmp_path):
    pretrained_encoder = create_encoder(tiny_model_config)
    export_encoder(pretrained_encoder, tmp_path / "export", (0.4,) * 3, (0.2,) * 3, tag="mpp")
    pretrained = read_pretrained(str(tmp_path))  # the run directory: its export/ is found
    assert pretrained.architecture == tiny_model_config.name and pretrained.mean == (0.4,) * 3
    higher = dataclasses.replace(tiny_model_config, name="vit_base_patch16_224", img_size=24, patch_size=None,
                                 embed_dim=None, depth=None, num_heads=None)
    model_cfg = fine_tuning_model_config(higher, pretrained)  # the architecture is the export's, at 24 px
    assert (model_cfg.name, model_cfg.img_size, model_cfg.patch_size, model_cfg.embed_dim, model_cfg.depth) == (
        tiny_model_config.name, 24, 4, 32, 2)
    encoder = fine_tuning_encoder(model_cfg, pretrained)
    assert encoder.pos_embed.shape == (1, 1 + 36, 32)
    source = pretrained_encoder.state_dict()
    for name, value in encoder.state_dict().items():
        if name != "pos_embed":
            assert torch.equal(value, source[name]), name
    assert torch.equal(encoder.pos_embed[:, 0], source["pos_embed"][:, 0])


def test_a_checkpoint_file_of_the_package_loads_and_a_classifier_head_is_dropped(tiny_model_config, tmp_path):
    encoder = create_encoder(tiny_model_config)
    state = {f"encoder.{name}": value for name, value in encoder.state_dict().items()}
    state |= {"encoder.head.weight": torch.zeros(5, 32), "mask_embedding": torch.zeros(32)}
    save_file(state, tmp_path / "model.safetensors")
    pretrained = read_pretrained(str(tmp_path / "model.safetensors"))
    assert pretrained.architecture is None  # a bare file: the model comes from the config
    fresh = create_encoder(tiny_model_config)
    assert load_encoder_weights(fresh, pretrained) == ["head.weight"]
    assert all(torch.equal(value, encoder.state_dict()[name]) for name, value in fresh.state_dict().items())


def test_weights_that_do_not_fit_are_refused_with_the_shapes_that_differ(tiny_model_config, tmp_path):
    save_file(create_encoder(tiny_model_config).state_dict(), tmp_path / "model.safetensors")
    pretrained = read_pretrained(str(tmp_path / "model.safetensors"))
    other_patch = dataclasses.replace(tiny_model_config, patch_size=8)
    with pytest.raises(ConfigError, match=r"patch_embed\.proj\.weight: \(32, 3, 4, 4\) in init, \(32, 3, 8, 8\) in"):
        fine_tuning_encoder(other_patch, pretrained)
    deeper = dataclasses.replace(tiny_model_config, depth=3)
    with pytest.raises(ConfigError, match=r"blocks\.2\.norm1\.weight: missing from init"):
        fine_tuning_encoder(deeper, pretrained)
    wider = dataclasses.replace(tiny_model_config, embed_dim=48, num_heads=3)
    with pytest.raises(ConfigError, match=r"cls_token: \(1, 1, 32\) in init, \(1, 1, 48\) in the model"):
        fine_tuning_encoder(wider, pretrained)


def test_a_folder_fixes_the_architecture_and_its_normalisation(tiny_model_config, tmp_path):
    export_encoder(create_encoder(tiny_model_config), tmp_path / "export", (0.4,) * 3, (0.2,) * 3, tag="mpp")
    pretrained = read_pretrained(f"local-dir:{tmp_path / 'export'}")
    with pytest.raises(ConfigError, match="you set model.depth=3 \\(the encoder has 2\\).*fixes the architecture"):
        fine_tuning_model_config(dataclasses.replace(tiny_model_config, depth=3), pretrained)
    assert input_normalisation(pretrained, (0.5,) * 3, (0.5,) * 3) == ((0.4,) * 3, (0.2,) * 3)
    assert input_normalisation(None, (0.5,) * 3, (0.5,) * 3) == ((0.5,) * 3, (0.5,) * 3)


def test_an_init_that_is_not_there_or_not_finished_says_what_to_pass(tmp_path):
    with pytest.raises(ConfigError, match="does not exist; pass a run directory"):
        read_pretrained(str(tmp_path / "nowhere"))
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ConfigError, match="has not finished: resume it, or pass init=<its checkpoint>/model"):
        read_pretrained(str(tmp_path / "run"))



def test_init_random_builds_the_runs_encoder_with_fresh_seeded_weights(tiny_model_config, tmp_path):
    torch.manual_seed(3)  # the run's seed: its session seeds the generator before it builds the encoder
    initial = create_encoder(tiny_model_config).state_dict()
    trained = create_encoder(tiny_model_config)
    export_encoder(trained, tmp_path / "run" / "export", (0.4,) * 3, (0.2,) * 3, tag="mpp", pool="avg")
    preset = ModelConfig()  # a preset's ViT-B/16 at 224 px: the architecture built is the run's, not this

    def random_encoder(seed: int) -> dict[str, torch.Tensor]:
        pretrained = read_pretrained(f"random:{tmp_path / 'run'}")
        assert pretrained.state_dict is None and pretrained.location == f"random:{tmp_path / 'run' / 'export'}"
        assert (pretrained.tag, pretrained.mean) == ("mpp", (0.4,) * 3)  # read and normalised as the trained one
        torch.manual_seed(seed)
        return fine_tuning_encoder(fine_tuning_model_config(preset, pretrained), pretrained).state_dict()

    baseline = random_encoder(3)
    assert {name: value.shape for name, value in baseline.items()} == {
        name: value.shape for name, value in trained.state_dict().items()}
    assert not any(torch.equal(baseline[name], value) for name, value in trained.state_dict().items()
                   if value.std() > 0)  # every drawn tensor differs from the trained one
    assert all(torch.equal(baseline[name], value) for name, value in initial.items())  # the run's own start
    assert all(torch.equal(random_encoder(3)[name], value) for name, value in baseline.items())
    assert not torch.equal(random_encoder(4)["blocks.0.attn.qkv.weight"], baseline["blocks.0.attn.qkv.weight"])


def test_init_random_refuses_settings_that_contradict_the_run_and_a_bare_weights_file(tiny_model_config, tmp_path):
    export_encoder(create_encoder(tiny_model_config), tmp_path / "export", (0.5,) * 3, (0.5,) * 3, tag="mpp")
    pretrained = read_pretrained(f"random:{tmp_path}")
    with pytest.raises(ConfigError, match=r"^you set model.depth=3 \(the encoder has 2\), but init=random:\S+ fixes "
                                          r"the architecture; drop that setting"):
        fine_tuning_model_config(dataclasses.replace(tiny_model_config, depth=3), pretrained)
    save_file(create_encoder(tiny_model_config).state_dict(), tmp_path / "model.safetensors")
    with pytest.raises(ConfigError, match="does not record its architecture; pass init=random:<run directory>"):
        read_pretrained(f"random:{tmp_path / 'model.safetensors'}")
    (tmp_path / "unfinished" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ConfigError, match="no timm config.json; the run has not finished: resume it$"):
        read_pretrained(f"random:{tmp_path / 'unfinished'}")

def test_the_export_loads_in_transformers_with_timms_features_and_the_recorded_input(tiny_model_config, tmp_path):
    from transformers import AutoImageProcessor, AutoModel, AutoModelForImageClassification

    mean, std = (0.4, 0.45, 0.5), (0.2, 0.25, 0.3)
    export_encoder(create_encoder(tiny_model_config), tmp_path / "export", mean, std, tag="mpp")
    folder = str(tmp_path / "export")
    timm_encoder = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()
    assert timm_encoder.num_classes == 0  # timm still reads it as before
    images = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    features = AutoModel.from_pretrained(folder).eval()(pixel_values=images).last_hidden_state
    assert torch.allclose(features, timm_encoder.forward_features(images), atol=1e-6)
    classifier = AutoModelForImageClassification.from_pretrained(folder, num_labels=5).eval()
    assert classifier(pixel_values=images).logits.shape == (2, 5)
    # the processor normalises as training did: an image already at the model's size is only normalised
    pixels = torch.randint(0, 256, (16, 16, 3), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    processed = AutoImageProcessor.from_pretrained(folder)(Image.fromarray(pixels.numpy()), return_tensors="pt")
    expected = (pixels.permute(2, 0, 1) / 255 - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]
    assert torch.allclose(processed["pixel_values"][0], expected, atol=1e-5)


def test_eval_features_auto_reads_an_mpp_encoder_by_its_mean_patch_token_and_any_other_by_its_class_token(
        tiny_model_config, tmp_path):
    from mpp.evaluation.frozen_encoder import readout

    encoder = create_encoder(tiny_model_config)
    export_encoder(encoder, tmp_path / "mpp" / "export", (0.5,) * 3, (0.5,) * 3, tag="mpp")
    export_encoder(encoder, tmp_path / "supervised" / "export", (0.5,) * 3, (0.5,) * 3, tag="supervised")
    checkpoint = {f"encoder.{name}": value for name, value in encoder.state_dict().items()}
    save_file(checkpoint | {"mask_embedding": torch.zeros(32)}, tmp_path / "mpp_checkpoint.safetensors")
    save_file(checkpoint | {"head.weight": torch.zeros(5, 32)}, tmp_path / "classifier_checkpoint.safetensors")
    read = {name: read_pretrained(str(tmp_path / name)) for name in ("mpp", "supervised", "mpp_checkpoint.safetensors",
                                                                      "classifier_checkpoint.safetensors")}
    assert {name: readout("auto", pretrained) for name, pretrained in read.items()} == {
        "mpp": "avg", "supervised": "token", "mpp_checkpoint.safetensors": "avg",
        "classifier_checkpoint.safetensors": "token"}
    assert readout("auto", None) == "token"  # a random encoder: the [class] token, as timm's ViT reads it
    assert readout("token", read["mpp"]) == "token" and readout("pixels", None) == "pixels"  # asked by name: kept


@pytest.mark.slow
@pytest.mark.cpu_only("two gloo processes shard the model with FSDP2 on this machine's CPU")
def test_a_model_sharded_by_fsdp2_exports_what_one_process_exports(tmp_path):
    """FSDP2 shards every weight into DTensors, which safetensors cannot write (an export failed so on a GPU): the
    export reads the whole state dict gathered as accelerate gathers it, into an encoder of its own."""
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file

    from tests.launching import ROOT, free_port

    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                             str(free_port()), str(ROOT / "tests" / "scripts" / "fsdp_export.py"), str(tmp_path)],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-3000:]
    sharded, single = (load_file(tmp_path / run / "model.safetensors") for run in ("sharded", "one-process"))
    assert sharded.keys() == single.keys() and len(sharded) > 20
    assert all(torch.allclose(sharded[name], single[name], atol=1e-6) for name in single)
    encoder = timm.create_model(f"local-dir:{tmp_path / 'sharded'}", pretrained=True, num_classes=0)
    assert encoder(torch.rand(1, 3, 16, 16)).shape == (1, 32)


def test_an_mpp_export_gives_in_timm_the_features_the_packages_evaluations_read(tiny_model_config, tmp_path):
    """MPP trains the patch tokens, not the [class] token: its export pools their mean, so timm's features without
    a head are what the package's linear probe reads from the same encoder; a supervised export keeps the token."""
    encoder = create_encoder(tiny_model_config).eval()
    images = torch.rand(3, 3, tiny_model_config.img_size, tiny_model_config.img_size)
    for tag, pool in (("mpp", "avg"), ("supervised", "token")):
        export_encoder(encoder, tmp_path / tag, (0.4,) * 3, (0.2,) * 3, tag=tag, pool=pool)
        loaded = timm.create_model(f"local-dir:{tmp_path / tag}", pretrained=True, num_classes=0).eval()
        probed = ImageEncoder(encoder, InputNormalisation((0.4,) * 3, (0.2,) * 3, 3), pool).eval()
        with torch.no_grad():
            assert torch.allclose(loaded((images - 0.4) / 0.2), probed(images), atol=1e-5), tag
