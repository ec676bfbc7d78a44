"""What the data and the models agree on about images: the key each image's random draws come from, and their raw
form.

Random numbers that are a function of a key per image, not of a generator's state. A run draws each image's
augmentation and its corruption from the image's key, a hash of (seed, epoch, index in the dataset) that travels with
the batch, so a draw does not depend on which process holds the image, how the global batch is split into passes, or
what was drawn before it: the run is the same on any number of processes, and a resumed one draws what an
uninterrupted one would.

A counter-based hash in int64 tensor operations (every value kept below 2**32, every product's magnitude below
2**63, so nothing overflows on any backend): vectorised over the batch, with static shapes, on the CPU, CUDA and XLA
alike. The mixing function is Wellons' "lowbias32", an integer hash whose outputs pass the usual avalanche tests;
uniform floats take its top 24 bits, which a float32 holds exactly.

Raw images as the models take them: uint8 (decoded files, which the loader hands on as they are, a quarter of the
bytes of floats) or float in [0, 1] (in-memory sources, and every view once cropped). The one conversion between the
two is ``unit_interval``.
"""

from __future__ import annotations

import math
from typing import Union

import torch

# what study/, tools/ and users may import from here
__all__ = [
    "keys_of", "unit_interval",
]

# Keyed random draws.
LOW32 = 0xFFFFFFFF
Key = Union[int, torch.Tensor]  # a Python int, or an int64 tensor of them (any values, negative ones included)


def multiply32(x: Key, constant: int) -> Key:
    """(x * constant) mod 2**32 for x < 2**32. A constant of 2**31 or more is taken as constant - 2**32, the same
    modulo 2**32, so the product's magnitude stays below 2**63 (its low 32 bits are the same in two's complement)."""
    return (x * (constant - 2**32 if constant >= 2**31 else constant)) & LOW32


def mix32(x: Key) -> Key:
    """A 32-bit value -> a 32-bit hash of it (lowbias32)."""
    x = x ^ (x >> 16)
    x = multiply32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = multiply32(x, 0x846CA68B)
    return x ^ (x >> 16)


def fold(key: Key, value: Key) -> Key:
    """A 32-bit key from a key and a 64-bit value (both halves of it count)."""
    return mix32(mix32((key ^ value) & LOW32) ^ ((value >> 32) & LOW32))


def keys_of(*parts: Key) -> Key:
    """One key per image from its parts: ints shared by the batch (a seed, an epoch) and (b) int64 tensors."""
    key: Key = 0x9E3779B9  # any start; this one is the golden ratio's bits, as in many hashes
    for part in parts:
        key = fold(key, part)
    return key


class KeyedDraws:
    """Uniform draws in [0, 1) for a batch, a function of one key per image: each call to ``uniform`` is a new
    stream of draws, so a sequence of calls is reproducible from the keys alone."""

    def __init__(self, keys: torch.Tensor) -> None:
        self.keys = keys  # (b) int64 below 2**32, from keys_of
        self.calls = 0

    def uniform(self, *shape: int) -> torch.Tensor:
        """(b *shape) float32 in [0, 1)."""
        self.calls += 1
        stream = mix32(self.keys ^ mix32(self.calls)).view(-1, *(1 for _ in shape))  # keys are 32-bit already
        columns = mix32(torch.arange(math.prod(shape), device=self.keys.device)).view(1, *shape)
        return (mix32(stream ^ columns) >> 8).to(torch.float32) / 2**24


# Raw images: uint8 or float in [0, 1].
def unit_interval(images: torch.Tensor) -> torch.Tensor:
    """Raw images as float in [0, 1]: uint8 ones scaled on whatever device they reached, float ones unchanged."""
    return images.float().div_(255) if images.dtype == torch.uint8 else images
