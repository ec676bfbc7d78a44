"""Pictures of what MPP predicts, drawn while it trains: images, their corrupted views, the targets and the
predictions (``monitor.mosaic_every``)."""

from __future__ import annotations

from dataclasses import astuple
from pathlib import Path

import torch
from accelerate import Accelerator
from einops import rearrange

from mpp.evaluation.pictures import enlarged, image_grid, save_picture
from mpp.images import keys_of
from mpp.models.masked_patch_prediction import MASK, RANDOM, Corruption, MaskedPatchPredictor, as_rgb


def mpp_mosaic(model: MaskedPatchPredictor, images: torch.Tensor, corruption: Corruption) -> torch.Tensor:
    """Rows: the raw images; their corrupted views (a [mask] patch grey, a replaced patch showing the patch whose
    embedding it received, an unchanged one as it is); every corrupted patch painted with its target; and with the
    model's prediction. (3 H W), one image per column."""
    output = model(images, corruption=corruption)
    p = model.target.patch_size
    patches = rearrange(as_rgb(images).float(), "b c (h p) (w q) -> b (h w) p q c", p=p, q=p)
    rows = torch.arange(len(images), device=images.device)[:, None]  # (b 1), pairs with (b k) positions
    seen = patches.clone()
    seen[rows, corruption.positions] = torch.where(
        (corruption.replacement == MASK)[..., None, None, None], torch.full_like(patches[:1, :1], 0.5),
        torch.where((corruption.replacement == RANDOM)[..., None, None, None], patches[rows, corruption.sources],
                    patches[rows, corruption.positions]))
    painted = []
    for values in (output.target, model.target.predicted(output.prediction)):
        picture = patches.clone()
        picture[rows, corruption.positions] = model.target.pictures(values)
        painted.append(picture)
    grid_height = images.shape[-2] // p
    mosaic = torch.cat([rearrange(x, "b (h w) p q c -> b c (h p) (w q)", h=grid_height) for x in
                        (patches, seen, *painted)])
    return image_grid(enlarged(mosaic), columns=len(images))


class MPPMosaic:
    """``mpp_mosaic`` of a fixed set of images under a fixed corruption, every ``every`` steps of training:
    ``<run>/pictures/mpp_step_<step>.png`` and TensorBoard's ``mpp/mosaic``."""

    def __init__(self, accelerator: Accelerator, model: MaskedPatchPredictor, images: torch.Tensor, run_dir: Path,
                 seed: int, every: int):
        self.accelerator, self.model, self.run_dir, self.every = accelerator, model, run_dir, every
        self.images = images.to(accelerator.device)
        drawn = model.draw_corruption(keys_of(seed, torch.arange(len(images))))  # on the CPU
        self.corruption = Corruption(*(part.to(accelerator.device) for part in astuple(drawn)))

    @torch.no_grad()
    def __call__(self, step: int, images_seen: int) -> None:
        was_training = self.model.training
        self.model.eval()
        with self.accelerator.autocast():
            mosaic = mpp_mosaic(self.model, self.images, self.corruption)
        self.model.train(was_training)
        save_picture(self.accelerator, self.run_dir, f"mpp_step_{step:08d}", "mpp/mosaic", mosaic, images_seen)
