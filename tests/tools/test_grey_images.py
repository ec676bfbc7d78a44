"""What a colour target does on grey images (tools/grey_images.py): which images count as grey, which colour
classes are grey levels, and MPP accuracy counted on the grey and on the colour images apart."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from tools import grey_images as grey_images_command
from tools.grey_images import accuracy_on_grey_and_colour, grey_images, is_grey_level
from mpp.config.model import MPPConfig
from mpp.models.encoder import create_encoder
from mpp.models.masked_patch_prediction import MaskedPatchPredictor
from tests.launching import NO_MPP_MONITORS, TINY, run_here


def grey_and_colour(count: int, size: int = 16) -> torch.Tensor:
    """(2 count 3 size size): ``count`` grey images, then as many in colour."""
    generator = torch.Generator().manual_seed(0)
    grey = torch.rand(count, 1, size, size, generator=generator).expand(count, 3, size, size)
    return torch.cat([grey, torch.rand(count, 3, size, size, generator=generator)])


def test_an_image_is_grey_but_for_a_few_coloured_pixels_in_either_pixel_format():
    image = torch.full((1, 3, 32, 32), 0.5)
    image[0, 0, 0, :10] = 1.0  # 10 of 1,024 pixels red: under 1%
    assert grey_images(image).tolist() == [True]
    image[0, 0, 1, :10] = 1.0  # 20: 2%
    assert grey_images(image).tolist() == [False]
    images = grey_and_colour(3, 32)
    assert grey_images(images).tolist() == [True] * 3 + [False] * 3
    assert torch.equal(grey_images((images * 255).round().to(torch.uint8)), grey_images(images))


def test_eight_of_the_512_three_bit_colours_are_grey_levels():
    grey = torch.arange(512)[is_grey_level(torch.arange(512), bits=3)]
    assert grey.tolist() == [level * (64 + 8 + 1) for level in range(8)]  # r = g = b


def test_mpp_accuracy_is_counted_on_the_grey_and_the_colour_images_apart(tiny_model_config):
    model = MaskedPatchPredictor(create_encoder(tiny_model_config), MPPConfig(), (0.5,) * 3, (0.25,) * 3)
    images = grey_and_colour(5)
    predict = model.forward

    def right_on_grey_images(batch, corruption):  # the true colour wherever the image is grey, else as predicted
        out = predict(batch, corruption=corruption)
        grey = grey_images(batch)[:, None, None, None]
        perfect = F.one_hot(out.target, out.prediction.shape[-1]).float()
        return dataclasses.replace(out, prediction=torch.where(grey, perfect, out.prediction))

    model.forward = right_on_grey_images
    groups = accuracy_on_grey_and_colour(model, images, batch_size=4)
    assert groups["grey"]["images"] == 5 and groups["colour"]["images"] == 5
    assert groups["grey"]["mpp_accuracy"] == 1.0 and groups["colour"]["mpp_accuracy"] < 0.2
    assert groups["grey"]["grey_level_predictions"] == groups["grey"]["grey_level_targets"] == 1.0
    assert groups["colour"]["grey_level_targets"] < 0.2  # random colours: few of them grey levels


@pytest.mark.slow
def test_the_command_reads_a_runs_test_images_and_counts_every_one_once(tmp_path, capsys):
    run_here(*TINY, *NO_MPP_MONITORS, "data.source=shapes", f"output_dir={tmp_path / 'run'}")
    results = grey_images_command.main(["--run", str(tmp_path / "run")])
    per_class, groups = results["per_class"], results["groups"]
    assert len(per_class) == 10 and results["checkpoint"].endswith("step_00000006")
    assert sum(counts["images"] for counts in per_class.values()) == groups["grey"]["images"] + groups["colour"][
        "images"]
    assert sum(counts["grey"] for counts in per_class.values()) == groups["grey"]["images"]
    assert "grey levels among its predictions" in capsys.readouterr().out
