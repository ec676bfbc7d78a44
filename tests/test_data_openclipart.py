from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from mpp.config import DataConfig, DataError
from mpp.data.loading import build_dataset
from mpp.data.openclipart import DEFAULT_ROOT, EXCLUDED, MIN_IMAGES, TEST_FRACTION, OpenClipartSource


def draw(path: Path, colour: tuple[int, int, int]) -> None:
    """A small transparent drawing: a coloured square in the middle of a clear canvas."""
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.new("RGBA", (12, 8), (0, 0, 0, 0))
    image.paste(Image.new("RGBA", (4, 4), (*colour, 255)), (4, 2))
    image.save(path)


@pytest.fixture
def clip_art(tmp_path) -> Path:
    """animals (with a sub-folder) and food with enough images each, a small category, and an excluded one."""
    root = tmp_path / "png"
    for i in range(MIN_IMAGES + 10):
        draw(root / "animals" / ("birds" if i % 2 else "") / f"a{i:03d}.png", (200, 30, 30))
        draw(root / "food" / f"f{i:03d}.png", (30, 200, 30))
        draw(root / "shapes" / f"s{i:03d}.png", (30, 30, 200))
    for i in range(5):
        draw(root / "logos" / f"l{i}.png", (9, 9, 9))
    return root


def test_categories_with_enough_images_less_the_excluded_split_by_file_the_same_every_time(clip_art):
    assert "shapes" in EXCLUDED
    train, test = OpenClipartSource(str(clip_art), "train"), OpenClipartSource(str(clip_art), "test")
    assert train.class_names == test.class_names == ("animals", "food")
    assert torch.bincount(test.labels).tolist() == [round(TEST_FRACTION * (MIN_IMAGES + 10))] * 2
    assert len(train) + len(test) == 2 * (MIN_IMAGES + 10)
    assert not set(train.files) & set(test.files)  # a file is in one split only
    assert any("birds" in str(path) for path in train.files)  # sub-folders belong to their category
    assert all(path.parts[-2 if path.parent.name != "birds" else -3] == train.class_names[label]
               for path, label in zip(train.files, train.labels.tolist()))
    assert OpenClipartSource(str(clip_art), "test").files == test.files


def test_clip_art_reaches_the_model_composited_on_white(clip_art):
    dataset = build_dataset(DataConfig(source=f"openclipart:{clip_art}"), "test", 12, 3, augment=False, seed=0)
    images, labels = dataset.__getitems__([0])
    image = images[0].float() / (255 if images.dtype == torch.uint8 else 1)  # (3 12 12): the 12x8 drawing's centre
    assert image[:, 0, 0].tolist() == pytest.approx([1.0, 1.0, 1.0], abs=0.02)  # clear corner: white, not black
    assert labels[0] == 0 and image[0, 6, 6].item() == pytest.approx(200 / 255, abs=0.05)  # an animal's red square


def test_a_missing_clip_art_folder_says_how_to_install_it(tmp_path):
    with pytest.raises(DataError, match="apt-get install -y openclipart-png"):
        OpenClipartSource(str(tmp_path / "absent"), "train")


@pytest.mark.skipif(not Path(DEFAULT_ROOT).is_dir(), reason="the openclipart-png package is not installed")
def test_the_debian_package_gives_eleven_colour_categories():
    train, test = OpenClipartSource("", "train"), OpenClipartSource("", "test")
    assert len(train.class_names) == 11 and not set(EXCLUDED) & set(train.class_names)
    assert 7_000 > len(train) + len(test) > 5_000 and abs(len(test) / (len(train) + len(test)) - TEST_FRACTION) < 0.01
