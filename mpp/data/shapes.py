"""The embedded default data: seeded, procedurally drawn coloured shapes, at any resolution, offline.

The class is the shape (10 of them), and nothing else tells it. Everything else is drawn per image independently
of the class: the shape's area (a tenth to a quarter of the image, so that thin and solid shapes cover alike), its
position, its colour, a two-colour background gradient in a random direction, whether the shape is lighter or darker
than its background, and a little pixel noise. Shapes are not rotated, so that no two classes can look alike (a
square turned by 45 degrees is a diamond).

What this design is for, measured in README "Data": a shape of random colour at a random place defeats a linear
classifier or kNN on the pixels, and a colour histogram scores chance, so features must be learned; a small ViT
learns them; and a patch's mean colour follows from its neighbours (a shape several patches wide in one colour,
a background that changes smoothly), which is what masked patch prediction learns from.

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
AREA_RANGE = (0.10, 0.25)  # of the image, whatever the shape


def _radius(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(u * u + v * v)


def _box(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.maximum(u.abs(), v.abs())


# Inside-tests at shape-local coordinates (the shape within [-1, 1]^2, y down): (... h w) -> (... h w) bool.
SHAPES = {
    "circle": lambda u, v: _radius(u, v) <= 1.0,
    "square": lambda u, v: _box(u, v) <= 0.8,
    "triangle": lambda u, v: (v <= 0.75) & (v >= 1.75 * u.abs() - 1.0),  # apex up
    "inverted triangle": lambda u, v: (v >= -0.75) & (v <= 1.0 - 1.75 * u.abs()),
    "diamond": lambda u, v: u.abs() + v.abs() <= 1.0,
    "plus": lambda u, v: ((u.abs() <= 0.3) & (v.abs() <= 1.0)) | ((v.abs() <= 0.3) & (u.abs() <= 1.0)),
    "saltire": lambda u, v: (((u - v).abs() <= 0.4) | ((u + v).abs() <= 0.4)) & (_box(u, v) <= 0.8),
    "ring": lambda u, v: (_radius(u, v) <= 1.0) & (_radius(u, v) >= 0.6),
    "frame": lambda u, v: (_box(u, v) <= 0.85) & (_box(u, v) >= 0.5),
    "bars": lambda u, v: (u.abs() <= 0.9) & (((v - 0.5).abs() <= 0.25) | ((v + 0.5).abs() <= 0.25)),
}
SHAPE_NAMES = tuple(SHAPES)


def unit_areas(resolution: int = 512) -> torch.Tensor:
    """(classes) each shape's area as a fraction of its [-1, 1]^2 square, counted on a fine grid."""
    coords = (torch.arange(resolution) + 0.5) / resolution * 2 - 1
    v, u = torch.meshgrid(coords, coords, indexing="ij")
    return torch.tensor([is_inside(u, v).float().mean().item() for is_inside in SHAPES.values()])


UNIT_AREAS = unit_areas()


@dataclass
class ShapeParams:
    """Drawing parameters of a batch of b images; lengths relative to the image side."""

    centre: torch.Tensor  # (b 2) x, y
    radius: torch.Tensor  # (b) half the side of the shape's square
    colour: torch.Tensor  # (b 3) the shape's RGB
    background: torch.Tensor  # (b 2 3) RGB at the two ends of the gradient
    gradient_angle: torch.Tensor  # (b)

    def select(self, index: torch.Tensor) -> ShapeParams:
        return ShapeParams(**{name: value[index] for name, value in vars(self).items()})


def draw_shape_params(labels: torch.Tensor, generator: torch.Generator) -> ShapeParams:
    """Parameters for shapes of classes ``labels``: the area is drawn alike for every class and the shape's size
    follows from it, so that how much of the image is the shape's colour says nothing of the class."""
    batch_size = len(labels)

    def uniform(*shape: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        return low + (high - low) * torch.rand(*shape, generator=generator)

    area = uniform(batch_size, low=AREA_RANGE[0], high=AREA_RANGE[1])
    radius = torch.sqrt(area / (4 * UNIT_AREAS[labels]))  # the shape's square, side 2r, covers area / unit area
    centre = radius[:, None] + uniform(batch_size, 2) * (1 - 2 * radius[:, None])  # inside the image
    # A light shape on a dark background, or (half the images, drawn apart from the class) its negative: the shape
    # stands out in brightness in every channel. (Colours drawn with a separate direction of contrast in each channel
    # left some shapes as bright as their background, and a small ViT did not leave chance in 2,000 steps.)
    background = uniform(batch_size, 2, 3, high=0.5)
    colour = uniform(batch_size, 3, low=0.55, high=1.0)
    negative = uniform(batch_size) < 0.5
    background = torch.where(negative[:, None, None], 1 - background, background)
    colour = torch.where(negative[:, None], 1 - colour, colour)
    return ShapeParams(centre=centre, radius=radius, colour=colour, background=background,
                       gradient_angle=uniform(batch_size, high=2 * math.pi))


def render_shapes(labels: torch.Tensor, params: ShapeParams, image_size: int, noise: torch.Tensor) -> torch.Tensor:
    """(b) shape classes -> (b 3 h w) images in [0, 1]; ``noise`` is (b 3 h w) standard normal."""
    coords = (torch.arange(image_size, dtype=torch.float32) + 0.5) / image_size
    y, x = torch.meshgrid(coords, coords, indexing="ij")  # (h w)
    radius = params.radius[:, None, None]
    u = (x - params.centre[:, 0, None, None]) / radius  # (b h w)
    v = (y - params.centre[:, 1, None, None]) / radius
    inside = torch.zeros_like(u, dtype=torch.bool)  # (b h w)
    for label, is_inside in enumerate(SHAPES.values()):  # over the shapes, each on its own images only
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
        self.params = draw_shape_params(self.labels, generator)
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
