"""``python -m tools.grey_images --run <MPP run dir>``: what a colour target does on grey images. Clip art
holds grey icons beside colour drawings (docs/data.md); on a grey image the 3-bit mean colour of every patch is one of
its 8 grey levels, so predicting it is predicting brightness, and "this image is grey" alone rules out 504 of the 512
classes.

On the run's test images, each image counts as grey where all but ``GREY_TOLERANCE_SHARE`` of its pixels have their
three channels within ``GREY_CHANNEL_SPREAD`` of each other. It prints how many images are grey, per class; and the
run's newest intact checkpoint's MPP accuracy on the grey and on the colour images, with how many of its predictions
there are grey levels (each image one corruption drawn from its index, seed 1, as in training).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from mpp.data.loading import build_dataset
from mpp.images import keys_of, unit_interval
from mpp.models.masked_patch_prediction import MaskedPatchPredictor, class_colours
from tools.trained_mpp import trained_colour_mpp

GREY_CHANNEL_SPREAD = 16 / 255  # a pixel's largest minus smallest channel: anti-aliasing and PNG palettes stay within
GREY_TOLERANCE_SHARE = 0.01  # a few coloured pixels (a logo's dot) do not make a drawing colour


def grey_images(images: torch.Tensor) -> torch.Tensor:
    """(b 3 h w) images, uint8 or in [0, 1] -> (b) whether each is grey."""
    images = unit_interval(images)
    spread = images.amax(dim=1) - images.amin(dim=1)  # (b h w)
    return (spread > GREY_CHANNEL_SPREAD).float().mean(dim=(1, 2)) <= GREY_TOLERANCE_SHARE


def is_grey_level(classes: torch.Tensor, bits: int) -> torch.Tensor:
    """Whether each colour class is a grey level (its three channels quantised alike)."""
    colours = class_colours(classes, bits)
    return (colours == colours[..., :1]).all(dim=-1)


def accuracy_on_grey_and_colour(model: MaskedPatchPredictor, images: torch.Tensor, batch_size: int = 250
                                ) -> dict[str, dict[str, float]]:
    """For the grey and the colour ones among ``images`` (b 3 h w): how many images, MPP accuracy over their
    corrupted patches, and the share of the predictions and of the targets that are grey levels."""
    bits = model.cfg.colour_bits
    totals = {group: torch.zeros(4) for group in ("grey", "colour")}  # images, right, grey predictions, grey targets
    cells = 1  # scored per image: its corrupted patches times each one's colour cells
    model.eval()
    with torch.no_grad():
        for index in torch.arange(len(images)).split(batch_size):
            batch = images[index]
            out = model(batch, corruption=model.draw_corruption(keys_of(1, index)))
            predicted = out.prediction.argmax(-1)  # (b k t)
            per_image = torch.stack([
                (predicted == out.target).float().flatten(1).sum(1),
                is_grey_level(predicted, bits).float().flatten(1).sum(1),
                is_grey_level(out.target, bits).float().flatten(1).sum(1),
            ], dim=1)  # (b 3): counts over each image's corrupted patches and cells
            grey = grey_images(batch)
            for group, chosen in (("grey", grey), ("colour", ~grey)):
                totals[group] += torch.cat([chosen.sum().float()[None], per_image[chosen].sum(0)])
            cells = out.target[0].numel()
    return {group: {"images": int(total[0]), "mpp_accuracy": (total[1] / max(1, total[0] * cells)).item(),
                    "grey_level_predictions": (total[2] / max(1, total[0] * cells)).item(),
                    "grey_level_targets": (total[3] / max(1, total[0] * cells)).item()}
            for group, total in totals.items()}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m tools.grey_images", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="an MPP run directory with a colour target")
    args = parser.parse_args(argv)
    cfg, checkpoint, model = trained_colour_mpp(args.run)
    test_set = build_dataset(cfg.data, "test", cfg.model.img_size, channels=3, augment=False)
    images, labels, _ = test_set.__getitems__(list(range(len(test_set))))
    grey = grey_images(images)
    per_class = {name: {"images": int((labels == label).sum()), "grey": int((grey & (labels == label)).sum())}
                 for label, name in enumerate(test_set.class_names)}
    results = {"checkpoint": str(checkpoint), "per_class": per_class,
               "groups": accuracy_on_grey_and_colour(model, images)}
    print(f"{checkpoint}, {len(images)} test images, {int(grey.sum())} grey:")
    for name, counts in per_class.items():
        print(f"  {name:20s} {counts['grey']:4d} of {counts['images']:4d} grey")
    for group, figures in results["groups"].items():
        print(f"  {group:6s} images ({figures['images']}): MPP accuracy {100 * figures['mpp_accuracy']:.1f}%, grey "
              f"levels among its predictions {100 * figures['grey_level_predictions']:.1f}% and among the targets "
              f"{100 * figures['grey_level_targets']:.1f}%")
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
