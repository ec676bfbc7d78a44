"""Views (crops, resizes, flips), channel matching, seeded subsets, and the batch datasets built from them."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from mpp.config.data import DataConfig
from mpp.data.image_dataset import (
    ImageDataset,
    ImageView,
    image_sizes,
    match_channels,
    random_crop_boxes,
    resized_crop_of_pixels,
    resized_crops,
)
from mpp.data.image_source import decode, decode_for_crop, open_image, pixels_for_crop
from mpp.data.loading import build_dataset, holdout_split, shots_per_class
from mpp.errors import DataError
from mpp.images import KeyedDraws, keys_of


def draws(batch: int, seed: int) -> KeyedDraws:
    return KeyedDraws(keys_of(seed, torch.arange(batch)))


def test_random_crops_stay_inside_with_the_asked_area_and_aspect():
    heights, widths = torch.full((2000,), 30.0), torch.full((2000,), 50.0)
    boxes = random_crop_boxes(heights, widths, (0.1, 0.6), (0.5, 2.0), draws(2000, seed=0))
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    assert (boxes[:, :2] >= 0).all() and (boxes[:, 2] <= 50 + 1e-4).all() and (boxes[:, 3] <= 30 + 1e-4).all()
    area = w * h / 1500
    assert area.min() >= 0.1 - 1e-4 and area.max() <= 0.6 + 1e-4 and area.std() > 0.1
    assert (w / h).min() >= 0.5 - 1e-4 and (w / h).max() <= 2.0 + 1e-4


def test_when_no_crop_fits_the_fallback_is_the_centred_image_trimmed_to_an_allowed_ratio():
    boxes = random_crop_boxes(torch.tensor([10.0, 10.0]), torch.tensor([10.0, 40.0]), (1.0, 1.0), (0.75, 1.5),
                              draws(2, seed=0))
    assert torch.allclose(boxes, torch.tensor([[0.0, 0, 10, 10], [12.5, 0, 27.5, 10]]))


def test_the_evaluation_view_at_the_stored_size_is_the_image_itself():
    images = torch.randint(0, 256, (3, 2, 9, 9), dtype=torch.uint8)
    assert torch.allclose(ImageView(9, augment=False)(images), images / 255, atol=1e-6)


def test_shrinking_averages_each_output_pixels_footprint():
    image = torch.arange(16.0).view(1, 1, 4, 4) / 16
    blocks = resized_crops(image, torch.tensor([[0.0, 0, 4, 4]]), 2)
    assert torch.allclose(blocks * 16, torch.tensor([[[[2.5, 4.5], [10.5, 12.5]]]]))
    mirrored = resized_crops(image, torch.tensor([[0.0, 0, 4, 4]]), 4, flips=torch.tensor([True]))
    assert torch.equal(mirrored, image.flip(-1))



def test_views_are_cut_on_the_device_the_images_and_boxes_are_on():
    # A GPU's decoded JPEGs are cut there (nvJPEG); the meta device stands in for it on a CPU: a tensor made on the
    # CPU inside would fail as it failed on an H200.
    images, boxes = torch.rand(2, 3, 20, 20, device="meta"), torch.tensor([[0.0, 0, 10, 10]] * 2, device="meta")
    views = resized_crops(images, boxes, 8, flips=torch.tensor([True, False], device="meta"))
    assert views.device.type == "meta" and views.shape == (2, 3, 8, 8)

def test_channels_follow_the_model():
    grey = torch.rand(2, 1, 4, 4)
    assert torch.equal(match_channels(grey, 3), grey.expand(-1, 3, -1, -1))
    rgb = torch.rand(2, 3, 4, 4)
    assert torch.allclose(match_channels(rgb, 1)[:, 0], 0.299 * rgb[:, 0] + 0.587 * rgb[:, 1] + 0.114 * rgb[:, 2])
    rgb = torch.tensor([255, 0, 100], dtype=torch.uint8).view(1, 3, 1, 1)  # decoded files stay uint8
    assert match_channels(rgb, 1).dtype == torch.uint8 and match_channels(rgb, 1).item() == round(76.245 + 11.4)


def test_holdout_slices_are_disjoint_seeded_and_complete():
    kept, held = holdout_split(1000, 0.05, seed=3)
    assert len(held) == 50 and sorted(torch.cat([kept, held]).tolist()) == list(range(1000))
    assert torch.equal(held, holdout_split(1000, 0.05, seed=3)[1])
    assert not torch.equal(held, holdout_split(1000, 0.05, seed=4)[1])
    assert len(holdout_split(10, 0.0, seed=0)[1]) == 0


def test_shots_per_class_takes_exactly_k_of_each_class_seeded():
    labels = torch.randint(0, 7, (500,), generator=torch.Generator().manual_seed(0))
    chosen = shots_per_class(labels, 5, seed=1)
    assert torch.bincount(labels[chosen]).tolist() == [5] * 7
    assert torch.equal(chosen, shots_per_class(labels, 5, seed=1))
    assert not torch.equal(chosen, shots_per_class(labels, 5, seed=2))
    with pytest.raises(DataError, match="data.shots_per_class needs 2 examples of every class, but classes have fewer"):
        shots_per_class(torch.tensor([0, 0, 1]), 2, seed=0)
    with pytest.raises(DataError, match=r"classes have fewer: class 1 \(dogs\): 1; "  # named as the user knows it
                                        r"set data.shots_per_class=1 \(or fewer\) to fit them all$"):
        shots_per_class(torch.tensor([0, 0, 1]), 2, seed=0, class_names=("cats", "dogs"))
    # The fix names the smallest class's count.
    with pytest.raises(DataError, match=r"\(a\): 40, class 1 \(b\): 60; "
                                        r"set data.shots_per_class=40 \(or fewer\) to fit them all$"):
        shots_per_class(torch.tensor([0] * 40 + [1] * 60 + [2] * 100), 100, seed=0, class_names=("a", "b", "c"))


def test_splits_of_the_built_dataset_respect_holdout_and_shots():
    cfg = DataConfig(holdout_fraction=0.1, shots_per_class=3, subset_seed=5)
    train = build_dataset(cfg, "train", 8, channels=3, augment=False)
    holdout = build_dataset(cfg, "holdout", 8, channels=3, augment=False)
    assert len(holdout) == 5000 and len(train) == 30 and torch.bincount(train.labels).tolist() == [3] * 10
    assert not set(train.indices.tolist()) & set(holdout.indices.tolist())
    with pytest.raises(DataError, match="holdout_fraction > 0"):
        build_dataset(DataConfig(), "holdout", 8, channels=3, augment=False)


def test_an_images_view_is_a_function_of_seed_epoch_and_index_whatever_its_batch():
    dataset = build_dataset(DataConfig(), "train", 16, channels=3, augment=True, seed=7)
    first, _, keys = dataset.__getitems__([3, 4, 5, 6])
    again, _, _ = build_dataset(DataConfig(), "train", 16, channels=3, augment=True, seed=7).__getitems__([3, 4, 5, 6])
    assert torch.equal(first, again)
    # Each image's key (what its view, and a model's per-image draws, come from) travels with the batch.
    assert torch.equal(keys, keys_of(7, 0, dataset.indices[[3, 4, 5, 6]]))
    # Split over two processes' batches, or in another order: each image keeps its view.
    halves = torch.cat([dataset.__getitems__([3, 4])[0], dataset.__getitems__([5, 6])[0]])
    assert torch.equal(halves, first)
    assert torch.equal(dataset.__getitems__([6, 3])[0], first[[3, 0]])
    # Another epoch (each sampled position carries its own): another view.
    later, _, later_keys = dataset.__getitems__([(1, 3), (1, 4), (1, 5), (1, 6)])
    assert not torch.equal(first, later) and torch.equal(later_keys, keys_of(7, 1, dataset.indices[[3, 4, 5, 6]]))
    assert torch.equal(dataset.__getitems__([(0, 3), (1, 4)])[0], torch.stack([first[0], later[1]]))


def test_decoded_files_and_tensors_get_the_same_view():
    smooth = torch.linspace(0, 1, 48)
    pixels = (torch.stack([smooth[:, None] * smooth[None, :40]] * 3) * 255).round().to(torch.uint8)  # (3 48 40)
    png = io.BytesIO()
    Image.fromarray(pixels.permute(1, 2, 0).numpy()).save(png, format="PNG")
    for augment in (False, True):
        view = ImageView(16, augment=augment)
        from_tensor = view(pixels[None], draws(1, seed=1))
        from_file = view.of_files([png.getvalue()], draws(1, seed=1))
        assert from_file.shape == from_tensor.shape == (1, 3, 16, 16) and from_file.dtype == torch.uint8
        assert (from_file / 255 - from_tensor).abs().max() < 0.02  # the file's box rounded to whole pixels


def photo_like_jpeg(width: int, height: int, seed: int) -> bytes:
    """Smooth shading with a little grain, as photos have (noise alone would defeat JPEG's downscaled decoding)."""
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.rand(1, 3, 6, 8, generator=generator)
    shading = torch.nn.functional.interpolate(coarse, size=(height, width), mode="bicubic", align_corners=False)
    grain = 0.03 * torch.randn(1, 3, height, width, generator=generator)
    pixels = ((shading + grain).clamp(0, 1)[0] * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
    encoded = io.BytesIO()
    Image.fromarray(pixels).save(encoded, format="JPEG", quality=90)
    return encoded.getvalue()


def lossless(image: Image.Image) -> bytes:
    png = io.BytesIO()
    image.save(png, format="PNG")
    return png.getvalue()


def test_jpegs_decode_only_what_their_crop_needs_with_the_boxes_and_sizes_of_a_whole_decode():
    files = [photo_like_jpeg(480 - 40 * i, 360 + 20 * i, seed=i) for i in range(4)]
    whole = [lossless(decode(open_image(f), "RGB")) for f in files]  # each JPEG decoded whole by PIL, kept exactly
    for augment in (True, False):
        view = ImageView(32, augment=augment)
        # the boxes are drawn from the header's sizes exactly as from the decoded images'
        assert torch.equal(view.draw(*image_sizes([open_image(f) for f in files]), draws(4, seed=3))[0],
                           view.draw(*image_sizes([open_image(f) for f in whole]), draws(4, seed=3))[0])
        fast = view.of_files(files, draws(4, seed=3)).float()
        slow = view.of_files(whole, draws(4, seed=3)).float()
        assert fast.shape == slow.shape == (4, 3, 32, 32)
        assert (fast - slow).abs().mean() < 2.5 and (fast - slow).abs().max() < 25
    # a 240x180 crop of a 480x360 JPEG, resized to 32: decoded at 1/4 scale, its box in the reduced pixels
    box = [100.0, 40.0, 340.0, 220.0]
    decoded, reduced = decode_for_crop(open_image(files[0]), box, 32, "RGB")
    assert decoded.size == (120, 90) and reduced == [25.0, 10.0, 85.0, 55.0]
    pixels, reduced = pixels_for_crop(files[0], open_image(files[0]), box, 32, "RGB")
    assert pixels.shape == (3, 90, 120) and reduced == [25.0, 10.0, 85.0, 55.0]
    # a crop smaller than twice the output size: decoded whole, by torchvision's decoder as by PIL's
    box = [100.0, 40.0, 150.0, 90.0]
    decoded, kept = decode_for_crop(open_image(files[0]), box, 32, "RGB")
    assert decoded.size == (480, 360) and kept == box
    pixels, kept = pixels_for_crop(files[0], open_image(files[0]), box, 32, "RGB")
    assert pixels.shape == (3, 360, 480) and kept == box
    assert (pixels.float() - torch.from_numpy(np.array(decoded)).permute(2, 0, 1)).abs().mean() < 1
    grey, _ = pixels_for_crop(files[0], open_image(files[0]), box, 32, "L")
    assert grey.shape == (1, 360, 480)


def test_a_files_crop_is_resampled_as_pils_bilinear_filter_would():
    pixels = torch.from_numpy(np.array(decode(open_image(photo_like_jpeg(120, 90, seed=5)), "RGB")))  # (h w c)
    image = Image.fromarray(pixels.numpy())
    for box, size in (([10, 5, 110, 85], 24), ([30, 20, 50, 36], 48)):  # shrinking, enlarging
        ours = resized_crop_of_pixels(pixels.permute(2, 0, 1), [float(x) for x in box], size)
        pils = torch.from_numpy(np.array(image.resize((size, size), Image.Resampling.BILINEAR, box=box)))
        assert ours.dtype == torch.uint8 and ours.shape == (3, size, size)
        difference = (ours.permute(1, 2, 0).int() - pils.int()).abs()
        # the same filter; only the outermost pixels differ: PIL reaches past the box, a cut crop cannot
        assert difference[1:-1, 1:-1].max() <= 1 and difference.float().mean() < 0.5


def test_batched_tensor_decoding_gives_the_views_of_pil_decoding_and_falls_back_on_a_broken_file(tmp_path):
    # data.decode=gpu's path, run here on the CPU (torchvision's decode_jpeg takes the device as an argument)
    for i in range(6):
        path = tmp_path / f"class_{i % 2}" / f"{i}.jpg"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(photo_like_jpeg(200 + 10 * i, 150, seed=i))
    cfg = DataConfig(source=f"folder:{tmp_path}", max_bad_fraction=0.5)
    pil = build_dataset(cfg, "train", 32, channels=3, augment=True, seed=1)
    tensor = ImageDataset(pil.source, pil.view, 3, pil.indices, seed=1, max_bad_fraction=0.5, decode_device="cpu")
    (pil_images, pil_labels, pil_keys), (images, labels, keys) = (pil.__getitems__([0, 3, 5]),
                                                                  tensor.__getitems__([0, 3, 5]))
    assert images.shape == pil_images.shape == (3, 3, 32, 32) and torch.equal(labels, pil_labels)
    assert torch.equal(keys, pil_keys)
    assert images.dtype == pil_images.dtype == torch.uint8
    assert (images.float() - pil_images.float()).abs().mean() < 5  # resamplers differ slightly; boxes are the same
    (tmp_path / "class_1" / "3.jpg").write_bytes(photo_like_jpeg(200, 150, seed=3)[:2000])  # cut short
    images, labels, keys = tensor.__getitems__([0, 4, 5])  # position 4: class_1/3.jpg, replaced by the next image
    assert images.shape == (3, 3, 32, 32) and labels.tolist() == [0, 1, 1] and tensor.skipped_count() == 1
    assert torch.equal(keys, tensor.keys_for(tensor.indices[[0, 5, 5]]))  # the stand-in's key, as its view's
    assert tensor.undecodable_files() == [str(tmp_path / "class_1" / "3.jpg")]


def test_gpu_decoding_without_a_gpu_is_refused_with_the_fix():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(DataError, match=r"data.decode=gpu .* no.*use data.decode=cpu"):
        build_dataset(DataConfig(source="folder:/nowhere", decode="gpu"), "train", 32, channels=3, augment=True)
