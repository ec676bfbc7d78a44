"""``python -m tools.shapes_regions --run <MPP run dir on shapes>``: where a trained MPP model on the embedded
shapes data is right, by where each corrupted patch lies: wholly inside a shape, across an outline, or outside every
shape (the background). A shape's class is its outline; this says whether MPP learned to fill in outlines or only
the background (docs/results.md, "What the default run shows").

The model is the run's newest intact checkpoint, on the first ``--images`` test images at the run's resolution, each
with one corruption drawn from its index (seed 1), as in training.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from mpp.data.shapes import ShapesSource, copy_masks
from mpp.images import keys_of
from mpp.models.masked_patch_prediction import MaskedPatchPredictor, select_patches
from tools.trained_mpp import trained_colour_mpp

REGIONS = ("inside", "outline", "outside")


def shape_cover(source: ShapesSource, index: torch.Tensor, patch_size: int) -> torch.Tensor:
    """(b n): the share of each patch's pixels that lie inside a shape, for the images ``index``."""
    shape_pixels = copy_masks(source.labels[index], source.params.select(index), source.image_size).any(dim=1)
    return F.avg_pool2d(shape_pixels[:, None].float(), patch_size).flatten(1)


def region_accuracy(model: MaskedPatchPredictor, source: ShapesSource, images: int, batch_size: int = 250
                    ) -> dict[str, dict[str, float]]:
    """Per region: the share of corrupted patches there and the model's MPP accuracy on them."""
    patch = model.encoder.patch_embed.patch_size[0]
    right, count = torch.zeros(len(REGIONS)), torch.zeros(len(REGIONS))
    model.eval()
    with torch.no_grad():
        for index in torch.arange(images).split(batch_size):
            cover = shape_cover(source, index, patch)  # (b n)
            out = model(source.images(index), corruption=model.draw_corruption(keys_of(1, index)))
            correct = (out.prediction.argmax(-1) == out.target).float().mean(-1)  # (b k), over a patch's cells
            where = select_patches(cover, out.corruption.positions)  # (b k)
            for region, chosen in enumerate((where == 1, (where > 0) & (where < 1), where == 0)):
                right[region] += correct[chosen].sum()
                count[region] += chosen.sum()
    return {name: {"share": (count[i] / count.sum()).item(), "mpp_accuracy": (right[i] / count[i].clamp_min(1)).item()}
            for i, name in enumerate(REGIONS)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m tools.shapes_regions", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="an MPP run directory on data.source=shapes")
    parser.add_argument("--images", type=int, default=2000, help="test images (default 2000)")
    args = parser.parse_args(argv)
    cfg, checkpoint, model = trained_colour_mpp(args.run)
    if cfg.data.source != "shapes":
        raise SystemExit(f"error: {args.run} trained on data.source={cfg.data.source}; this reads shapes runs only")
    regions = region_accuracy(model, ShapesSource("test", cfg.model.img_size), args.images)
    print(f"{checkpoint}, {args.images} test images:")
    for name, figures in regions.items():
        print(f"  {name:8s} {100 * figures['share']:5.1f}% of corrupted patches, MPP accuracy "
              f"{100 * figures['mpp_accuracy']:.1f}%")
    print(json.dumps(regions))
    return regions


if __name__ == "__main__":
    main()
