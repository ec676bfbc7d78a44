"""The ImageFolder layout: ``<dir>/<class name>/**/<image>``, classes in sorted order (as torchvision and timm)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import torch

from mpp.config import DataError
from mpp.data.image_source import FileSource, read_file

IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
LAYOUT = "folder: expects <dir>/<class name>/<image files> (jpg, png, ...)"


def class_folders(root: Path) -> list[str]:
    if not root.is_dir():
        raise DataError(f"image folder {root} does not exist; {LAYOUT}")
    names = sorted(entry.name for entry in os.scandir(root) if entry.is_dir() and not entry.name.startswith("."))
    if not names:
        raise DataError(f"image folder {root} has no class sub-folders; {LAYOUT}")
    return names


def image_files(folder: Path) -> list[Path]:
    return sorted(
        Path(parent) / name
        for parent, _, names in os.walk(folder, followlinks=True)
        for name in names
        if Path(name).suffix.lower() in IMAGE_EXTENSIONS
    )


class ImageFolderSource(FileSource):
    """All images under ``root``; class indices follow ``classes_from``'s sorted class folders (default: root's own).

    A separate validation folder takes its class indices from the training folder, so a class missing from one
    of them cannot shift every label.
    """

    channels, mode = 3, "RGB"

    def __init__(self, root: str | Path, classes_from: Optional[str | Path] = None):
        root = Path(root).expanduser()
        present = class_folders(root)
        self.class_names = tuple(class_folders(Path(classes_from).expanduser()) if classes_from else present)
        unknown = sorted(set(present) - set(self.class_names))
        if unknown:
            raise DataError(
                f"image folder {root} has classes the training folder {classes_from} lacks: {', '.join(unknown[:10])}"
            )
        self.files: list[Path] = []
        labels: list[int] = []
        for name in present:
            found = image_files(root / name)
            self.files += found
            labels += [self.class_names.index(name)] * len(found)
        if not self.files:
            raise DataError(
                f"image folder {root} holds no image files ({', '.join(sorted(IMAGE_EXTENSIONS))}); {LAYOUT}"
            )
        self.labels = torch.tensor(labels)
        self.description = f"image folder {root} ({len(self.files)} images, {len(self.class_names)} classes)"

    def encoded(self, index: int) -> bytes:
        return read_file(self.files[index])

    def name(self, index: int) -> str:
        return str(self.files[index])
