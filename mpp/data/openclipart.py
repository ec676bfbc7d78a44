"""Real colour images that nobody here drew: Debian's ``openclipart-png`` (``apt-get install openclipart-png``), about
8,100 PNG clip-art images by openclipart.org's artists, in subject folders under /usr/share/openclipart/png.

The classes are the top-level subject folders with at least ``MIN_IMAGES`` images, their sub-folders included (an
image under ``animals/birds/`` is an animal), less ``EXCLUDED``. The package stores a drawing that appears in several
places once and links the others to it (1,221 links): each drawing is read once, in the category that holds its
file, so that no drawing is in both splits or in two categories. Each category's files, in sorted order, are split by
a seeded permutation (``data.split_seed``, 0 unless set): ``TEST_FRACTION`` of them are the test split, the same on
every machine and in every run of that seed.
Most files are RGBA, palette or grey-with-alpha images; the decoder composites their transparency on white
(``mpp.data.image_source.decode``), as they are drawn to be seen. Half the drawings are under 272 px, a few are over
100 megapixels: each split is decoded once at the model's resolution, whole and centred on white, and cached.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from mpp.data.decode_cache import cache_root
from mpp.data.image_folder import image_files
from mpp.data.image_source import ArraySource, UndecodableImage, decode, open_image, read_file, skip_summary
from mpp.errors import DataError
from mpp.run import read_cache, write_whole

DEFAULT_ROOT = "/usr/share/openclipart/png"
MIN_IMAGES = 90  # drawings whose file the category holds
TEST_FRACTION = 0.2
logger = logging.getLogger(__name__)
# Categories with enough images that are left out, and why (measured on 80 images of each, docs/data.md).
EXCLUDED = {
    "shapes": "nine in ten are grey line art (flowcharts, arrows, callouts): no colour to predict",
    "special": "patterns, gradients and page templates, mostly grey: no common subject",
    "unsorted": "anything, and duplicates of the other categories",
}


def categories(root: Path) -> dict[str, list[Path]]:
    """The kept categories, in sorted order, with their image files (sorted)."""
    if not root.is_dir():
        raise DataError(f"openclipart: {root} does not exist; install the clip art with `apt-get install -y "
                        "openclipart-png`, or point data.source=openclipart:<dir> at its png/ folder")
    folders = sorted(entry.name for entry in os.scandir(root) if entry.is_dir() and entry.name not in EXCLUDED)
    # The package keeps one file per drawing and links other places it belongs to it: a drawing is read once, in
    # the category that holds its file (so that it cannot be in both splits, or in two categories).
    found = {name: [path for path in image_files(root / name).files
                    if Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root / name))]
             for name in folders}
    kept = {name: files for name, files in found.items() if len(files) >= MIN_IMAGES}
    if not kept:
        raise DataError(f"openclipart: no category under {root} has {MIN_IMAGES} or more images; is it the "
                        "openclipart-png package's png/ folder?")
    return kept


def split_files(root: Path, split: str, split_seed: int = 0) -> tuple[tuple[str, ...], list[Path], list[int]]:
    """The category names, and the files of ``split`` with their category indices: of each category's files, in
    sorted order, the first ``TEST_FRACTION`` of a permutation seeded by ``split_seed`` are the test split."""
    kept = categories(root)
    generator = torch.Generator().manual_seed(split_seed)
    files: list[Path] = []
    labels: list[int] = []
    for label, found in enumerate(kept.values()):
        order = torch.randperm(len(found), generator=generator)
        test_count = round(TEST_FRACTION * len(found))
        chosen = order[:test_count] if split == "test" else order[test_count:]
        files += [found[i] for i in chosen.sort().values.tolist()]
        labels += [label] * len(chosen)
    return tuple(kept), files, labels


def square_on_white(image: Image.Image, size: int) -> Image.Image:
    """A decoded drawing, whole, at ``size`` x ``size``: scaled so that its longer side fits, centred on white (a
    drawing is meant to be seen whole; a centre crop would cut the ends off a wide one)."""
    scale = size / max(image.size)
    width, height = max(1, round(image.width * scale)), max(1, round(image.height * scale))
    # reducing_gap: shrink by whole factors first (fast for the few drawings of 100 megapixels and more)
    resized = image.resize((width, height), Image.Resampling.BICUBIC, reducing_gap=3.0)
    canvas = Image.new("RGB", (size, size), "white")
    canvas.paste(resized, ((size - width) // 2, (size - height) // 2))
    return canvas


def read_drawings(files: list[Path], size: int) -> tuple[torch.Tensor, list[int], list[tuple[str, str]]]:
    """(n 3 size size) uint8 of the files that decode, their positions in ``files``, and what failed, why (its
    kind of ``mpp.data.image_source.WHY_UNDECODABLE``)."""
    pixels, kept, failed = [], [], []
    for position, path in enumerate(files):
        try:
            image = decode(open_image(read_file(path)), "RGB")
        except UndecodableImage as error:
            failed.append((str(path), error.kind))
            continue
        pixels.append(torch.from_numpy(np.asarray(square_on_white(image, size)).copy()).permute(2, 0, 1))
        kept.append(position)
    return torch.stack(pixels), kept, failed


def read_decoded(cache: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """A decoded split as ``openclipart_source`` caches it: (n c h w) uint8 drawings and their positions in the
    split's file list."""
    stored = torch.load(cache)
    return stored["pixels"], stored["kept"]


def decoded_drawings(files: list[Path], name: str, image_size: int) -> tuple[torch.Tensor, list[int]]:
    """(n 3 s s) uint8 drawings of ``files`` that decode, whole on white, and their positions in ``files``: decoded
    once per file list and size and cached under ~/.cache/mpp (``XDG_CACHE_HOME``) as ``name``, keyed by the files'
    paths, sizes and modification times; later runs read the cache in a fraction of a second."""
    digest = hashlib.sha256(str(image_size).encode())
    for path in files:
        status = path.stat()
        digest.update(f"{path}|{status.st_size}|{status.st_mtime_ns}".encode())
    cache = cache_root() / f"openclipart-{name}-{image_size}px-{digest.hexdigest()[:16]}.pt"
    stored = read_cache(cache, read_decoded)
    if stored is not None:
        return stored
    logger.info("openclipart: decoding the %d %s images at %d px once, into %s", len(files), name, image_size, cache)
    pixels, kept_positions, failed = read_drawings(files, image_size)
    if failed:
        logger.warning("openclipart: %d of %d files left out, %s", len(failed), len(files), skip_summary(failed))
    cache.parent.mkdir(parents=True, exist_ok=True)
    # Runs started together (an experiment's first two) decode the same split at once, each writing it whole
    write_whole(cache, lambda partial: torch.save({"pixels": pixels, "kept": kept_positions}, partial), shared=True)
    return pixels, kept_positions


def openclipart_source(location: str, split: str, image_size: int, split_seed: int = 0) -> ArraySource:
    """One split (train or test, drawn by ``split_seed``) of the clip art at ``image_size`` px: every drawing whole,
    on white, as uint8 in memory (``decoded_drawings``)."""
    if split not in ("train", "test"):
        raise DataError(f"openclipart has no split {split!r}; it has train, test")
    root = Path(location or DEFAULT_ROOT).expanduser()
    class_names, files, labels = split_files(root, split, split_seed)
    pixels, kept_positions = decoded_drawings(files, split, image_size)
    return ArraySource(pixels, torch.tensor(labels)[kept_positions], class_names,
                       f"openclipart {split} ({len(kept_positions)} drawings of {len(class_names)} categories "
                       f"under {root}{split_said(split_seed)}, whole on white at {image_size} px)")


def split_said(split_seed: int) -> str:
    """The split in a source's description where it is not the default one."""
    return f", split seed {split_seed}" if split_seed else ""


def pool_files(root: Path, split_seed: int = 0) -> list[Path]:
    """Every drawing under ``root`` once (by its real path: the package links a drawing into the other places it
    belongs), from every folder, less the test split of the labelled categories (drawn by ``split_seed``): images to
    pre-train on that no test of an encoder ever scores."""
    tested = {os.path.realpath(path) for path in split_files(root, "test", split_seed)[1]}
    return [path for path in image_files(root).files if os.path.realpath(path) not in tested]


def openclipart_pool_source(location: str, split: str, image_size: int, split_seed: int = 0) -> ArraySource:
    """The unlabelled pool (``pool_files``) as the training split, for pre-training on more drawings than the
    labelled categories hold (every image labelled -1); the test split is ``openclipart``'s (of ``split_seed``)."""
    if split == "test":
        return openclipart_source(location, split, image_size, split_seed)
    if split != "train":
        raise DataError(f"openclipart-pool has no split {split!r}; it has train, test")
    root = Path(location or DEFAULT_ROOT).expanduser()
    files = pool_files(root, split_seed)
    pixels, kept_positions = decoded_drawings(files, "pool", image_size)
    return ArraySource(pixels, torch.full((len(kept_positions),), -1), (),
                       f"openclipart pool ({len(kept_positions)} unlabelled drawings of every folder under {root}, "
                       f"less the labelled categories' test split{split_said(split_seed)}; whole on white at "
                       f"{image_size} px)")
