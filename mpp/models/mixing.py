"""Mixup and cutmix of a training pass (``augment.mixup_alpha``, ``augment.cutmix_alpha``), as timm's ``Mixup`` draws
them in its "batch" mode (DeiT's): the pass mixed with itself reversed, one weight a pass, and the soft targets of
timm's ``mixup_target`` (label smoothing included).

timm's draw (whether to mix, mixup or cutmix, the weight, the box) runs on the host from numpy's generator, which the
training loop seeds per (seed, step, pass, process): a resumed run repeats it. Its cutmix pastes a box by slicing,
whose shape changes every pass; here the box becomes a mask made on the device from four numbers handed over as a
tensor, so every pass is one graph of static shapes (XLA compiles it once) and nothing waits for the device.
"""

from __future__ import annotations

from typing import Optional

import torch
from timm.data.mixup import Mixup, cutmix_bbox_and_lam, mixup_target

from mpp.config.training import AugmentConfig
from mpp.images import unit_interval
from mpp.private_apis import mixup_batch_parameters


class BatchMixing:
    """(b c h w) raw images and (b) labels of a pass -> the mixed images (float in [0, 1]) and (b classes) soft
    targets."""

    def __init__(self, cfg: AugmentConfig, num_classes: int, label_smoothing: float) -> None:
        self.draws = Mixup(mixup_alpha=cfg.mixup_alpha, cutmix_alpha=cfg.cutmix_alpha, prob=cfg.mix_prob,
                           switch_prob=cfg.mix_switch_prob, mode="batch", label_smoothing=label_smoothing,
                           num_classes=num_classes)
        self.num_classes, self.label_smoothing = num_classes, label_smoothing
        kinds = [f"{name} alpha {alpha:g}" for name, alpha in (("mixup", cfg.mixup_alpha),
                                                                 ("cutmix", cfg.cutmix_alpha)) if alpha]
        self.description = (" or ".join(kinds) + f" on {cfg.mix_prob:.0%} of the passes"
                            + (f", cutmix on {cfg.mix_switch_prob:.0%} of those" if len(kinds) == 2 else ""))

    def weights(self, height: int, width: int) -> tuple[float, list[float]]:
        """One pass's draw: the targets' weight of each image's own label, and (rows from, rows to, columns from,
        columns to, weight outside the box) of its pixels' own share (cutmix: 1 outside the box, 0 in it; mixup: the
        weight everywhere, the box empty)."""
        weight, cutmix = mixup_batch_parameters(self.draws)
        if not cutmix:
            return weight, [0, 0, 0, 0, weight]
        (top, bottom, left, right), weight = cutmix_bbox_and_lam((height, width), weight, correct_lam=True)
        return weight, [top, bottom, left, right, 1.0]

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        images = unit_interval(images)
        height, width = images.shape[-2:]
        target_weight, box = self.weights(height, width)
        top, bottom, left, right, outside = torch.tensor(box, device=images.device).unbind()
        rows = torch.arange(height, device=images.device)[:, None]
        columns = torch.arange(width, device=images.device)[None, :]
        in_box = (rows >= top) & (rows < bottom) & (columns >= left) & (columns < right)  # (h w)
        own = torch.where(in_box, 0.0, outside)  # (h w): each pixel's share of its own image
        mixed = images * own + images.flip(0) * (1 - own)
        weight = torch.tensor(target_weight, device=images.device)
        return mixed, mixup_target(labels, self.num_classes, weight, self.label_smoothing)


def batch_mixing(cfg: AugmentConfig, num_classes: int, label_smoothing: float) -> Optional[BatchMixing]:
    """What ``augment.*`` mixes in each training pass of a classifier (None where nothing)."""
    return BatchMixing(cfg, num_classes, label_smoothing) if cfg.mixes else None
