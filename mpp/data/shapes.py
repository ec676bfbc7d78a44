"""The embedded default data: seeded, procedurally drawn coloured shapes, at any resolution, offline.

The class is the shape (8 of them). Everything else varies per image: size, position, rotation, the shape's colour,
and a two-colour background gradient in a random direction, plus a little pixel noise. The shape's colour always
contrasts with its background, so both the shape (classification) and local colour (MPP) are there to be learned.
Image ``i`` of a split is a pure function of (seed, split, i): the same in every process, worker and run. The
parameters of a whole split are drawn at once; a loader's batch is rendered in one vectorised call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mpp.config import DataError
from mpp.data.image_source import BatchSource

SPLIT_SIZES = {"train": 50_000, "test": 10_000}
NOISE_PATTERNS = 16  # pixel-noise images, one drawn at random per image: texture only, so a few suffice


@dataclass
class ShapeParams:
    """Drawing parameters of a batch of b images; lengths relative to the image side."""

    centre: torch.Tensor  # (b 2) x, y
    radius: torch.Tensor  # (b)
    angle: torch.Tensor  # (b) rotation in radians
    colour: torch.Tensor  # (b 3) the shape's RGB
    background: torch.Tensor  # (b 2 3) RGB at the two ends of the gradient
    gradient_angle: torch.Tensor  # (b)

    def select(self, index: torch.Tensor) -> ShapeParams:
        return ShapeParams(**{name: value[index] for name, value in vars(self).items()})


def draw_shape_params(batch_size: int, generator: torch.Generator) -> ShapeParams:
    def uniform(*shape: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        return low + (high - low) * torch.rand(*shape, generator=generator)

    background = uniform(batch_size, 2, 3)
    # Shift every channel by a quarter to three quarters of the range (mod 1) from the mean background.
    colour = (background.mean(dim=1) + uniform(batch_size, 3, low=0.25, high=0.75)) % 1.0
    return ShapeParams(
        centre=uniform(batch_size, 2, low=0.3, high=0.7),
        radius=uniform(batch_size, low=0.18, high=0.36),
        angle=uniform(batch_size, high=2 * math.pi),
        colour=colour,
        background=background,
        gradient_angle=uniform(batch_size, high=2 * math.pi),
    )


def _radius(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(u * u + v * v)


def _box(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.maximum(u.abs(), v.abs())


# Inside-tests at shape-local coordinates (unit radius, centred, rotated): (... h w) -> (... h w) bool.
SHAPES = {
    "circle": lambda u, v: _radius(u, v) <= 1.0,
    "ring": lambda u, v: (_radius(u, v) <= 1.0) & (_radius(u, v) >= 0.6),
    "square": lambda u, v: _box(u, v) <= 0.8,
    "frame": lambda u, v: (_box(u, v) <= 0.8) & (_box(u, v) >= 0.5),
    "triangle": lambda u, v: (v >= -0.5) & (v <= 1.0 - math.sqrt(3) * u.abs()),
    "diamond": lambda u, v: u.abs() + v.abs() <= 1.0,
    "cross": lambda u, v: ((u.abs() <= 0.3) & (v.abs() <= 1.0)) | ((v.abs() <= 0.3) & (u.abs() <= 1.0)),
    "star": lambda u, v: _radius(u, v) <= 0.45 + 0.55 * (0.5 + 0.5 * torch.cos(5 * torch.atan2(v, u))) ** 2,
}
SHAPE_NAMES = tuple(SHAPES)


def render_shapes(labels: torch.Tensor, params: ShapeParams, image_size: int, noise: torch.Tensor) -> torch.Tensor:
    """(b) shape classes -> (b 3 h w) images in [0, 1]; ``noise`` is (b 3 h w) standard normal."""
    coords = (torch.arange(image_size, dtype=torch.float32) + 0.5) / image_size
    y, x = torch.meshgrid(coords, coords, indexing="ij")  # (h w)
    dx = x - params.centre[:, 0, None, None]  # (b h w)
    dy = y - params.centre[:, 1, None, None]
    cos, sin = torch.cos(params.angle)[:, None, None], torch.sin(params.angle)[:, None, None]
    radius = params.radius[:, None, None]
    u, v = (dx * cos + dy * sin) / radius, (dy * cos - dx * sin) / radius
    inside = torch.zeros_like(u, dtype=torch.bool)  # (b h w)
    for label, is_inside in enumerate(SHAPES.values()):  # over the 8 shapes, each on its own images only
        chosen = labels == label
        inside[chosen] = is_inside(u[chosen], v[chosen])

    direction = torch.stack([torch.cos(params.gradient_angle), torch.sin(params.gradient_angle)], dim=-1)
    along = ((x - 0.5) * direction[:, 0, None, None] + (y - 0.5) * direction[:, 1, None, None]) / math.sqrt(2) + 0.5
    along = along.clamp(0, 1)[:, None]  # (b 1 h w)
    start, end = params.background[:, 0, :, None, None], params.background[:, 1, :, None, None]  # (b 3 1 1)
    background = start + (end - start) * along
    image = torch.where(inside[:, None], params.colour[:, :, None, None], background)
    return (image + 0.02 * noise).clamp(0, 1)


class ShapesSource(BatchSource):
    """One split of shapes, rendered at ``image_size``: (3 h w) float images in [0, 1], the shape's class index."""

    channels = 3
    class_names = SHAPE_NAMES

    def __init__(self, split: str, image_size: int, seed: int = 0) -> None:
        if split not in SPLIT_SIZES:
            raise DataError(f"shapes has no split {split!r}; it has {', '.join(SPLIT_SIZES)}")
        self.image_size = image_size
        generator = torch.Generator().manual_seed(2 * seed + list(SPLIT_SIZES).index(split))
        size = SPLIT_SIZES[split]
        self.labels = torch.arange(size) % len(SHAPE_NAMES)  # classes exactly balanced
        self.params = draw_shape_params(size, generator)
        # Nothing but the shape may tell the class: the noise patterns are the same for every split (their own
        # stream, apart from the splits' 2 * seed + k), and each image's pattern is drawn independently of its label.
        # (Pattern i % 16 for image i once fixed its label i % 8, and each split had patterns of its own: a linear
        # probe read the label off the noise on the training split and scored chance on the test split.)
        self.noise = torch.randn(NOISE_PATTERNS, 3, image_size, image_size,
                                 generator=torch.Generator().manual_seed(2**32 + seed))
        self.noise_pattern = torch.randint(NOISE_PATTERNS, (size,), generator=generator)
        self.description = f"shapes {split} ({size} images rendered at {image_size}x{image_size})"

    def images(self, index: torch.Tensor) -> torch.Tensor:
        return render_shapes(self.labels[index], self.params.select(index), self.image_size,
                             self.noise[self.noise_pattern[index]])
