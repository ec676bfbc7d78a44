"""What a classifier's training view adds per image since DeiT: torchvision's RandAugment or TrivialAugmentWide, and
its random erasing (``augment.*``).

torchvision draws one set of operations per call from torch's global generator, so each image is augmented on its
own, with the generator seeded from the image's random key (``mpp.images``: (seed, epoch, index)): its draws
are the same whichever worker, process or batch holds it, and a resumed run repeats them. The loop over the batch runs
in the loader (its workers on a GPU machine), beside the decoding of files, which is per image already; the
generator's state is restored after it, so the loading process draws on as it would have without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch
from torchvision.transforms import v2

from mpp.config.training import RANDAUGMENT_SCALE, AugmentConfig
from mpp.images import keys_of, unit_interval

AUGMENT_STREAM = 0x5EEDA06  # folded into each image's key, so these draws are a stream apart from its view's


@dataclass(frozen=True)
class ImageAugmentation:
    """(b c s s) views (uint8, or float in [0, 1]) and their (b) random keys -> the views, each through the
    ``auto_augment`` policy, then erased with probability ``random_erasing`` (the box's noise is normal in the
    normalised input, ``mean`` and ``std``: the model's normalisation, as DeiT erases after normalising). Erased views
    come out float (the noise leaves [0, 1]); the others keep their dtype."""

    auto_augment: str  # "none", "randaugment", "trivialaugment"
    randaugment_ops: int
    randaugment_magnitude: int
    random_erasing: float
    mean: tuple[float, ...]
    std: tuple[float, ...]
    # The steps for uint8 views and for float ones: the policy's fill is in the views' own scale
    steps: dict[torch.dtype, list[Callable]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        erasing = [unit_interval, v2.Normalize(self.mean, self.std),
                   v2.RandomErasing(self.random_erasing, value="random"),
                   v2.Normalize([-m / s for m, s in zip(self.mean, self.std, strict=True)],
                                [1 / s for s in self.std])] if self.random_erasing else []  # back to [0, 1]
        # What a rotation or shear uncovers is filled with the data's mean colour, as timm's policies do
        for dtype, fill in ((torch.uint8, [round(255 * value) for value in self.mean]), (torch.float32, self.mean)):
            policy = {"randaugment": [v2.RandAugment(self.randaugment_ops, self.randaugment_magnitude,
                                                     num_magnitude_bins=RANDAUGMENT_SCALE + 1, fill=list(fill))],
                      "trivialaugment": [v2.TrivialAugmentWide(fill=list(fill))], "none": []}[self.auto_augment]
            self.steps[dtype] = policy + erasing

    @property
    def description(self) -> str:
        policy = {"randaugment": f"RandAugment ({self.randaugment_ops} operations at magnitude "
                                 f"{self.randaugment_magnitude} of {RANDAUGMENT_SCALE})",
                  "trivialaugment": "TrivialAugmentWide", "none": ""}[self.auto_augment]
        erasing = f"random erasing {self.random_erasing:g}" if self.random_erasing else ""
        return ", ".join(part for part in (policy, erasing) if part)

    def __call__(self, views: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        augmented, steps = [], self.steps[views.dtype]
        with torch.random.fork_rng(devices=[]):  # the loading process's generator as it was, afterwards
            for view, stream in zip(views, keys_of(keys, AUGMENT_STREAM).tolist(), strict=True):
                torch.manual_seed(stream)
                for step in steps:
                    view = step(view)
                augmented.append(view)
        return torch.stack(augmented)


def image_augmentation(cfg: AugmentConfig, mean: Sequence[float], std: Sequence[float]
                       ) -> Optional[ImageAugmentation]:
    """What ``augment.*`` adds per image to a classifier's training view (None where nothing)."""
    if cfg.auto_augment == "none" and not cfg.random_erasing:
        return None
    return ImageAugmentation(cfg.auto_augment, cfg.randaugment_ops, cfg.randaugment_magnitude, cfg.random_erasing,
                             tuple(mean), tuple(std))
