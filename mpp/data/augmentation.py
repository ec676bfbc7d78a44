"""What a classifier's view adds per image since DeiT: timm's augmentation policy (RandAugment, AutoAugment, AugMix)
and torchvision's random erasing (``augment.*``).

Both libraries draw from global generators and one image at a time, so each image is augmented on its own, with the
generators seeded from its random key (``mpp.keyed_random``: (seed, epoch, index)): its draws are the same whichever
worker, process or batch holds it, and a resumed run repeats them. The loop over the batch runs in the loader (its
workers on a GPU machine), beside the decoding of files, which is per image already; the generators' states are
restored after it, so the process that loads draws on as it would have without it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
import torch
from timm.data.auto_augment import augment_and_mix_transform, auto_augment_transform, rand_augment_transform
from torchvision.transforms import v2
from torchvision.transforms.v2.functional import to_pil_image, pil_to_tensor

from mpp.config.training import AugmentConfig
from mpp.errors import ConfigError
from mpp.keyed_random import keys_of
from mpp.raw_images import unit_interval

AUGMENT_STREAM = 0x5EED_A06  # folded into each image's key, so these draws are a stream apart from its view's


def timm_policy(policy: str, image_size: int, mean: Sequence[float]) -> Callable:
    """timm's transform for a policy string, with the hyper-parameters timm's own training sets (its
    transforms_factory): translations up to 45% of the image, the fill the data's mean colour."""
    fill = tuple(round(255 * value) for value in mean) if len(mean) > 1 else round(255 * mean[0])
    hparams = dict(translate_const=int(image_size * 0.45), img_mean=fill)
    try:
        if policy.startswith("rand"):
            return rand_augment_transform(policy, hparams)
        if policy.startswith("augmix"):
            return augment_and_mix_transform(policy, hparams)
        return auto_augment_transform(policy, hparams)
    except (AssertionError, KeyError, ValueError, IndexError) as error:
        raise ConfigError(f"augment.auto_augment={policy!r}: timm cannot read this policy ({error!r}); e.g. "
                          "rand-m9-mstd0.5-inc1 (DeiT's), rand-m7-n2, augmix-m5-w3, original") from None


@dataclass(frozen=True)
class ImageAugmentation:
    """(b c s s) views (uint8, or float in [0, 1]) and their (b) random keys -> the views, each through timm's
    ``auto_augment`` policy, then erased with probability ``random_erasing`` (the box's noise is normal in the
    normalised input, ``mean`` and ``std``: the model's normalisation). Erased views come out float (the box's noise
    leaves [0, 1]); the others keep their dtype."""

    image_size: int
    auto_augment: str
    random_erasing: float
    mean: tuple[float, ...]
    std: tuple[float, ...]
    policy: Optional[Callable] = field(default=None, compare=False, repr=False)
    erasing: Optional[Callable] = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.auto_augment:
            object.__setattr__(self, "policy", timm_policy(self.auto_augment, self.image_size, self.mean))
        if self.random_erasing:
            # In the normalised input, as DeiT erases after normalising; back to [0, 1] after, as the model takes it
            object.__setattr__(self, "erasing", v2.Compose([
                v2.Normalize(self.mean, self.std), v2.RandomErasing(self.random_erasing, value="random"),
                v2.Normalize([-m / s for m, s in zip(self.mean, self.std, strict=True)], [1 / s for s in self.std])]))

    @property
    def description(self) -> str:
        return ", ".join(([self.auto_augment] if self.auto_augment else [])
                         + ([f"random erasing {self.random_erasing:g}"] if self.random_erasing else []))

    def __call__(self, views: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        streams = keys_of(keys, AUGMENT_STREAM).tolist()
        saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
        try:
            augmented = [self.one(view, stream) for view, stream in zip(views, streams, strict=True)]
        finally:
            random.setstate(saved[0])
            np.random.set_state(saved[1])
            torch.set_rng_state(saved[2])
        return torch.stack(augmented)

    def one(self, view: torch.Tensor, stream: int) -> torch.Tensor:
        """One (c s s) view, its draws from ``stream``: timm's policy draws from Python's and numpy's generators (on
        a PIL image, as timm's pipeline), torchvision's erasing from torch's."""
        random.seed(stream)
        np.random.seed(stream)
        torch.manual_seed(stream)
        if self.policy is not None:
            as_uint8 = view if view.dtype == torch.uint8 else (view * 255).round_().to(torch.uint8)
            augmented = pil_to_tensor(self.policy(to_pil_image(as_uint8)))
            view = augmented if view.dtype == torch.uint8 else unit_interval(augmented)
        if self.erasing is not None:
            view = self.erasing(unit_interval(view))
        return view


def image_augmentation(cfg: AugmentConfig, image_size: int, mean: Sequence[float], std: Sequence[float]
                       ) -> Optional[ImageAugmentation]:
    """What ``augment.*`` adds per image to a classifier's training view (None where nothing)."""
    if not cfg.auto_augment and not cfg.random_erasing:
        return None
    return ImageAugmentation(image_size, cfg.auto_augment, cfg.random_erasing, tuple(mean), tuple(std))
