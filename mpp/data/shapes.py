"""The embedded default data: seeded, procedurally drawn coloured shapes, at any resolution, offline.

The class is the shape (10 of them), and nothing else tells it. Each image shows its shape three times, apart, each
copy at its own size (2.5% to 8.5% of the image, drawn alike for every class, so that thin and solid shapes cover
alike), place, slight turn (up to 20 degrees: a square turned by 45 would be a diamond) and stretch (up to 1.25 times
as wide as high, or as high), in one colour, on a background of two colours mixed by a random wavy texture, lighter
than it or (half the images, drawn apart from the class) its negative, with a little pixel noise.

What this design is for, measured in docs/data.md, "The embedded data: shapes": three copies at independent places and
sizes on a textured background leave kNN on the pixels of all 50,000 training images no near neighbour that shares
the class by its layout (one unturned shape on a plain gradient: kNN 92%), a linear classifier on the pixels and a
colour histogram score near chance, so features must be learned; a small ViT learns them; and a patch's mean colour
follows from its neighbours (shapes two or three patches wide in one colour, a background that changes smoothly),
which is what masked patch prediction learns from.

Image ``i`` of a split is a pure function of (seed, split, i): the same in every process, worker and run. The
parameters of a whole split are drawn at once; a loader's batch is rendered in one vectorised call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mpp.data.image_source import BatchSource
from mpp.errors import DataError

__all__ = ["ShapesSource", "copy_masks"]  # what study/, tools/ and users may import from here

SPLIT_SIZES = {"train": 50_000, "test": 10_000}
NOISE_PATTERNS = 16  # pixel-noise images, one drawn at random per image: texture only, so a few suffice
COPIES = 3  # of the shape in each image
AREA_RANGE = (0.025, 0.085)  # of the image, per copy, whatever the shape
MAX_TURN = math.radians(20)  # a square and a diamond (a square turned by 45) stay at least 15 degrees apart
MAX_STRETCH = 1.25  # of a copy's width against its height, either way, its area kept
REACH = 1.25  # every shape lies within REACH x radius of its centre (the triangle's base corners: sqrt(1 + 0.75^2))
PLACEMENT_TRIES = 64  # candidate layouts per image; the one whose copies lie furthest apart is kept
WAVES = 3  # plane waves summed into each background channel's texture


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

    centre: torch.Tensor  # (b copies 2) x, y
    radius: torch.Tensor  # (b copies) half the side of each copy's square
    turn: torch.Tensor  # (b copies) radians
    stretch: torch.Tensor  # (b copies) width over height
    colour: torch.Tensor  # (b 3) the shape's RGB
    background: torch.Tensor  # (b 2 3) the two RGB colours the texture mixes
    wave_angle: torch.Tensor  # (b 3 waves) direction of each plane wave of each channel's texture
    wave_frequency: torch.Tensor  # (b 3 waves) cycles per image side
    wave_phase: torch.Tensor  # (b 3 waves)

    def select(self, index: torch.Tensor) -> ShapeParams:
        return ShapeParams(**{name: value[index] for name, value in vars(self).items()})


def separated_centres(reach: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """(b copies) how far each copy reaches from its centre -> (b copies 2) centres that keep every copy inside the
    image; of PLACEMENT_TRIES random layouts, the one whose closest two copies are furthest apart for their reach
    (apart whenever any of them is)."""
    margin = reach[:, None, :, None]  # (b 1 copies 1)
    candidates = margin + torch.rand(len(reach), PLACEMENT_TRIES, COPIES, 2, generator=generator) * (1 - 2 * margin)
    # Each copy against the one `shift` copies on, for shifts up to half the copies: every pair at least once, without
    # forming all copies x copies distances (placing the 50,000 training images took a third longer that way).
    shifts = range(1, COPIES // 2 + 1)
    distance = torch.cat([(candidates - candidates.roll(shift, dims=2)).norm(dim=-1) for shift in shifts], dim=2)
    both = torch.cat([reach + reach.roll(shift, dims=1) for shift in shifts], dim=1)[:, None]  # (b 1 pairs)
    spacing = (distance / both).amin(dim=2)  # (b tries): at least 1 where the copies lie apart
    return candidates[torch.arange(len(reach)), spacing.argmax(dim=1)]


def draw_shape_params(labels: torch.Tensor, generator: torch.Generator) -> ShapeParams:
    """Parameters for shapes of classes ``labels``: each copy's area is drawn alike for every class and its size
    follows from it, so that how much of the image is the shape's colour says nothing of the class."""
    batch_size = len(labels)

    def uniform(*shape: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        return low + (high - low) * torch.rand(*shape, generator=generator)

    area = uniform(batch_size, COPIES, low=AREA_RANGE[0], high=AREA_RANGE[1])
    radius = torch.sqrt(area / (4 * UNIT_AREAS[labels, None]))  # the shape's square, side 2r, covers area / unit area
    stretch = torch.exp(uniform(batch_size, COPIES, low=-math.log(MAX_STRETCH), high=math.log(MAX_STRETCH)))
    centre = separated_centres(REACH * radius * torch.maximum(stretch, 1 / stretch), generator)
    # A light shape on a dark background, or (half the images, drawn apart from the class) its negative: the shape
    # stands out in brightness in every channel. (Colours drawn with a separate direction of contrast in each channel
    # left some shapes as bright as their background, and a small ViT did not leave chance in 2,000 steps.)
    background = uniform(batch_size, 2, 3, high=0.5)
    colour = uniform(batch_size, 3, low=0.55, high=1.0)
    negative = uniform(batch_size) < 0.5
    background = torch.where(negative[:, None, None], 1 - background, background)
    colour = torch.where(negative[:, None], 1 - colour, colour)
    return ShapeParams(centre=centre, radius=radius, stretch=stretch,
                       turn=uniform(batch_size, COPIES, low=-MAX_TURN, high=MAX_TURN),
                       colour=colour, background=background,
                       wave_angle=uniform(batch_size, 3, WAVES, high=2 * math.pi),
                       wave_frequency=uniform(batch_size, 3, WAVES, low=1.0, high=4.0),
                       wave_phase=uniform(batch_size, 3, WAVES, high=2 * math.pi))


def wavy_texture(params: ShapeParams, coords: torch.Tensor) -> torch.Tensor:
    """(b 3 h w) in [0, 1]: each channel a sum of plane waves sin(a x + c y + phase), stretched to the full range.
    Each wave is formed from sines and cosines along one row and one column, sin(a x) cos(c y + phase) +
    cos(a x) sin(c y + phase), a tenth of the sines that a whole image would take."""
    cycles = 2 * math.pi * params.wave_frequency[..., None]  # (b 3 waves 1)
    along_x = cycles * torch.cos(params.wave_angle)[..., None] * coords  # (b 3 waves w)
    along_y = cycles * torch.sin(params.wave_angle)[..., None] * coords + params.wave_phase[..., None]  # (... h)
    texture = (torch.einsum("bcwy,bcwx->bcyx", torch.cos(along_y), torch.sin(along_x))
               + torch.einsum("bcwy,bcwx->bcyx", torch.sin(along_y), torch.cos(along_x)))
    low, high = texture.amin(dim=(2, 3), keepdim=True), texture.amax(dim=(2, 3), keepdim=True)
    return (texture - low) / (high - low).clamp(min=1e-6)  # a flat texture (no waves) stays flat


def pixel_centres(image_size: int) -> torch.Tensor:
    """(image_size) pixel centres in [0, 1]."""
    return (torch.arange(image_size, dtype=torch.float32) + 0.5) / image_size


def copy_masks(labels: torch.Tensor, params: ShapeParams, image_size: int) -> torch.Tensor:
    """(b) shape classes -> (b copies h w) bool: the pixels of each copy of each image's shape."""
    order = labels.argsort()  # the images of each class side by side: each shape's test runs on one slice
    params = params.select(order)
    # Each copy's own frame is an affine map of the image's: u = (cos x' + sin y') stretch / radius and
    # v = (cos y' - sin x') / (stretch radius), x' and y' from the copy's centre. Formed from one row and one
    # column, so that a full-size tensor is made by one addition.
    coords = pixel_centres(image_size)
    cos, sin = torch.cos(params.turn), torch.sin(params.turn)  # (b copies)
    x, y = params.centre[..., 0], params.centre[..., 1]
    to_u = params.stretch / params.radius
    to_v = 1 / (params.stretch * params.radius)
    u = ((cos * to_u)[..., None, None] * (coords - x[..., None])[..., None, :]
         + (sin * to_u)[..., None, None] * (coords - y[..., None])[..., :, None])  # (b copies h w)
    v = ((cos * to_v)[..., None, None] * (coords - y[..., None])[..., :, None]
         - (sin * to_v)[..., None, None] * (coords - x[..., None])[..., None, :])
    per_class = torch.bincount(labels, minlength=len(SHAPES)).tolist()
    inside = torch.cat([is_inside(u_class, v_class) for is_inside, u_class, v_class
                        in zip(SHAPES.values(), u.split(per_class), v.split(per_class), strict=True)])
    return inside[order.argsort()]


def render_shapes(labels: torch.Tensor, params: ShapeParams, image_size: int, noise: torch.Tensor) -> torch.Tensor:
    """(b) shape classes -> (b 3 h w) images in [0, 1]; ``noise`` is (b 3 h w) standard normal."""
    start, end = params.background[:, 0, :, None, None], params.background[:, 1, :, None, None]  # (b 3 1 1)
    background = start + (end - start) * wavy_texture(params, pixel_centres(image_size))
    shape = copy_masks(labels, params, image_size).any(dim=1)  # (b h w)
    image = torch.where(shape[:, None], params.colour[:, :, None, None], background)
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
