"""The ImageFolder layout: ``<dir>/<class name>/**/<image>``, classes in sorted order (as torchvision and timm)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import NamedTuple, Optional

import torch

from mpp.data.image_source import FileSource, read_file
from mpp.errors import DataError

IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
logger = logging.getLogger(__name__)
LAYOUT = ("folder: expects <dir>/<class name>/<image files> (jpg, png, ...), or the image files in <dir> itself "
          "(one class)")


def class_folders(root: Path) -> list[str]:
    """The class sub-folders of ``root``; ``["."]``, one class of every image under it, where it has none (a flat
    folder of unlabelled images)."""
    if not root.is_dir():
        raise DataError(f"image folder {root} does not exist; {LAYOUT}")
    names = sorted(entry.name for entry in os.scandir(root) if entry.is_dir() and not entry.name.startswith("."))
    return names or ["."]


class FolderScan(NamedTuple):
    files: list[Path]  # sorted
    repeated: list[Path]  # reached a second time through symbolic links: passed over
    loops: list[str]  # linked folders already read, or links up to a parent: not entered


def image_files(folder: Path, seen: Optional[set[str]] = None) -> FolderScan:
    """The image files under ``folder``. Symbolic links are followed (datasets are often linked in), but each file
    is listed once, by its resolved path (``seen``, shared between calls, holds those listed), and neither a folder
    already read nor a link up to a parent of ``folder`` (a loop) is entered."""
    seen = set() if seen is None else seen
    top = os.path.realpath(folder)
    entered: set[str] = set()
    scan = FolderScan([], [], [])
    for parent, folders, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(parent)
        if real in entered or (real != top and (top + os.sep).startswith(real + os.sep)):
            folders[:] = []  # a second link to a folder already read, or a link up to a parent: a loop
            scan.loops.append(parent)
            continue
        entered.add(real)
        folders.sort()  # which of two links to one file is kept does not depend on the file system's order
        for name in sorted(names):
            if Path(name).suffix.lower() not in IMAGE_EXTENSIONS:
                continue
            path = Path(parent) / name
            resolved = os.path.realpath(path)
            if resolved in seen:
                scan.repeated.append(path)
                continue
            seen.add(resolved)
            scan.files.append(path)
    scan.files.sort()
    return scan


def report_passed_over(root: Path, scans: list[FolderScan]) -> None:
    """One log line for what a scan of ``root`` passed over, if anything."""
    repeated = [path for scan in scans for path in scan.repeated]
    loops = [path for scan in scans for path in scan.loops]
    if repeated or loops:
        logger.warning("image folder %s: %d files reached a second time through symbolic links, read once (e.g. %s); "
                       "%d linked folders already read, or parents (loops), not entered (e.g. %s)", root,
                       len(repeated), repeated[0] if repeated else "none", len(loops), loops[0] if loops else "none")


class ImageFolderSource(FileSource):
    """All images under ``root``; class indices follow ``classes_from``'s sorted class folders (default: root's own;
    a folder without sub-folders is one class).

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
        seen: set[str] = set()  # resolved paths: a file linked into two classes is read once, in the first
        scans = [image_files(root / name, seen) for name in present]
        report_passed_over(root, scans)
        beside = [] if present == ["."] else [
            entry.name for entry in os.scandir(root) if entry.is_file() and Path(entry.name).suffix.lower() in
            IMAGE_EXTENSIONS]
        if beside:  # a class is a sub-folder: files beside them belong to none
            logger.warning("image folder %s holds %d image file(s) beside its class sub-folders (e.g. %s), left out: "
                           "move them into a sub-folder (pre-training reads every sub-folder, whatever its name)",
                           root, len(beside), sorted(beside)[0])
        for name, scan in zip(present, scans, strict=True):
            found = scan.files
            self.files += found
            labels += [self.class_names.index(name)] * len(found)
        if not self.files:
            raise DataError(
                f"image folder {root} holds no image files ({', '.join(sorted(IMAGE_EXTENSIONS))}); {LAYOUT}"
            )
        self.labels = torch.tensor(labels)
        # A flat folder's one class is named after the folder.
        self.class_names = tuple(root.resolve().name if name == "." else name for name in self.class_names)
        self.description = f"image folder {root} ({len(self.files)} images, {len(self.class_names)} classes)"

    def encoded(self, index: int) -> bytes:
        return read_file(self.files[index])

    def name(self, index: int) -> str:
        return str(self.files[index])

    def path(self, index: int) -> Path:
        return self.files[index]
