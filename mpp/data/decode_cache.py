"""A folder's images kept decoded, at the size its views need (``data.decode_cache=true``), so that a file is decoded
once, not every epoch: a drawing of 168 megapixels takes seconds to decode, and its few kept pixels a millisecond to
read.

A file whose shorter side is larger than the views need (``ImageView.detail_short_side``) is decoded whole the first
time it is read, its shorter side brought down to that (``resized_to_short_side``, as ``mpp.data.prepare``), and
kept under ~/.cache/mpp/decoded (``XDG_CACHE_HOME``) as raw uint8 pixels with the file's own size; the key is the
file's real path, size and modification time, the kept side and the colour mode, so a changed file is decoded
again (its old entry stays until the folder is deleted). Crop boxes are still drawn from the file's own size, then
mapped onto the kept pixels, as onto a JPEG decoded at reduced scale: the views are those of the file resampled
twice instead of once. A file no larger than the views need is read as without the cache, so its views are the same
pixels. Views of a file decoded now and of one read back from the cache are the same.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from PIL import Image

from mpp.data.image_source import ReducedImage, resized_to_short_side
from mpp.run import read_cache, write_whole


def cache_root() -> Path:
    """Where the package keeps what it decoded once: ~/.cache/mpp, or ``$XDG_CACHE_HOME/mpp``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mpp"


def read_kept(entry: Path) -> ReducedImage:
    with np.load(entry) as stored:
        width, height = stored["size"].tolist()
        pixels = torch.from_numpy(stored["pixels"])  # (h w c), channels last as the resize wants them
    return ReducedImage(pixels.permute(2, 0, 1), width, height)


class DecodeCache:
    """Files decoded and kept with their shorter side at ``short_side``, in ``mode`` (RGB or L); picklable, for the
    loader's workers, which fill it."""

    def __init__(self, short_side: int, mode: str) -> None:
        self.short_side, self.mode, self.folder = short_side, mode, cache_root() / "decoded"

    def entry(self, path: Path) -> Path:
        status = path.stat()
        key = f"{os.path.realpath(path)}|{status.st_size}|{status.st_mtime_ns}|{self.short_side}|{self.mode}"
        return self.folder / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.npz"

    def read(self, path: Path) -> Optional[ReducedImage]:
        """The kept image of the file at ``path``, or None where there is none (or it cannot be read)."""
        try:
            entry = self.entry(path)
        except OSError:  # gone since the folder was listed: reading the file says so
            return None
        return read_cache(entry, read_kept)

    def keep(self, path: Path, image: Image.Image) -> Optional[ReducedImage]:
        """The file at ``path``, opened as ``image``, decoded at the kept size and written to the cache; None where
        its shorter side is no larger than the views need (then it is read as it is). Raises ``UndecodableImage``
        where it cannot be decoded."""
        width, height = image.size  # the file's: a JPEG's changes as it is decoded at reduced scale
        if min(width, height) <= self.short_side:
            return None
        resized = resized_to_short_side(image, self.short_side, self.mode)
        pixels = np.asarray(resized).reshape(resized.height, resized.width, -1)
        entry = self.entry(path)
        self.folder.mkdir(parents=True, exist_ok=True)

        def write(partial: Path) -> None:
            with open(partial, "wb") as file:  # a file object: np.savez would add .npz to a partial name
                np.savez(file, pixels=pixels, size=np.array([width, height]))

        write_whole(entry, write, shared=True)  # the workers of two runs may keep one file at once
        return ReducedImage(torch.from_numpy(pixels.copy()).permute(2, 0, 1), width, height)
