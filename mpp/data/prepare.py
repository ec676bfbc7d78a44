"""Write a dataset once, pre-resized, as parquet shards that ``data.source=hf:<out dir>`` reads back.

    python -m mpp.data.prepare <data.source> <out dir> [data key=value ...] [--short-side 256] [--quality 90]
                               [--shard-size 1000] [--workers N] [--splits train test]

For data read many times (every epoch of every run): a 500x375 photo decoded and resized at each read costs several
times what a 256-pixel one does, and the 224-pixel views of pre-training lose nothing when the shorter side is 256
(images smaller than that are kept as they are). Labels and class names are kept (a ``ClassLabel`` column).

Why parquet: it is the Hugging Face hub's own format (what ``push_to_hub`` writes), so the output can be uploaded as
it is, streamed (``data.streaming=true`` reads the files directly), or read map-style (``datasets`` converts it
once into its Arrow cache, ``data.hf_cache_dir``). Shards are written as ``<split>-NNNNN-of-MMMMM.parquet`` under
``data/``, the hub's layout for splits.

Each shard is written to a ``.partial`` file and renamed when complete, and ``prepared.json`` records the shards
done: an interrupted run continues where it stopped when started again with the same arguments. A finished output
is never overwritten. At the end every split's row count is checked against the source's, less the files that
could not be decoded (skipped, and listed with why, as in training).
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch
from PIL import Image

from mpp.config.building import build_config
from mpp.config.data import DataConfig
from mpp.data.image_source import (
    FileSource,
    ImageSource,
    UndecodableImage,
    open_image,
    resized_to_short_side,
    skip_summary,
)
from mpp.data.loading import open_source
from mpp.errors import DataError, RunError
from mpp.run import write_whole

RECORD = "prepared.json"


@dataclass(frozen=True)
class Settings:
    source: str  # the data.source and its overrides, as given
    overrides: tuple[str, ...]
    short_side: int
    quality: int
    shard_size: int


def shard_path(out_dir: Path, split: str, shard: int, shards: int) -> Path:
    return out_dir / "data" / f"{split}-{shard:05d}-of-{shards:05d}.parquet"


def encoded(image: Image.Image, quality: int) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def source_image(source: ImageSource, index: int) -> Image.Image:
    """Image ``index`` of a source: a file opened (``UndecodableImage`` if it cannot be), or an array as an image."""
    if isinstance(source, FileSource):
        return open_image(source.encoded(index))
    pixels = source.images(torch.tensor([index]))[0]  # (c h w)
    if pixels.dtype != torch.uint8:
        pixels = (pixels * 255).round().to(torch.uint8)
    return Image.fromarray(pixels.permute(1, 2, 0).squeeze(-1).numpy())


OPENED: dict[str, ImageSource] = {}  # in each worker process: the splits it has opened (a folder is listed once)


def write_shard(job: tuple[DataConfig, str, int, int, Settings, Path]) -> tuple[str, int, int, list[list[str]]]:
    """One shard, written under a .partial name and renamed when complete: (split, shard, rows, skipped files, each
    [name, why]: a kind of ``mpp.data.image_source.WHY_UNDECODABLE``)."""
    import datasets

    cfg, split, shard, shards, settings, out_dir = job
    if split not in OPENED:
        datasets.disable_progress_bars()  # one bar, the main process's, counts images
        OPENED[split] = open_source(cfg, split, settings.short_side)
    source = OPENED[split]
    mode = "L" if source.channels == 1 else "RGB"
    start, stop = shard * settings.shard_size, min(len(source), (shard + 1) * settings.shard_size)
    rows: dict[str, list] = {"image": [], "label": []}
    skipped = []
    for index in range(start, stop):
        try:
            resized = resized_to_short_side(source_image(source, index), settings.short_side, mode)
        except UndecodableImage as error:
            skipped.append([source.name(index) if isinstance(source, FileSource) else str(index), error.kind])
            continue
        rows["image"].append({"bytes": encoded(resized, settings.quality), "path": None})
        rows["label"].append(int(source.labels[index]))
    label = datasets.ClassLabel(names=list(source.class_names)) if source.class_names else datasets.Value("int64")
    table = datasets.Dataset.from_dict(rows, datasets.Features({"image": datasets.Image(), "label": label}))
    final = shard_path(out_dir, split, shard, shards)
    write_whole(final, lambda partial: table.to_parquet(str(partial)))
    return split, shard, len(rows["label"]), skipped


def read_record(out_dir: Path, settings: Settings) -> dict:
    """The record of an earlier, interrupted run of the same settings, or a fresh one; refuses anything else."""
    record_path = out_dir / RECORD
    if record_path.is_file():
        record = json.loads(record_path.read_text())
        if record["complete"]:
            raise DataError(f"{out_dir} holds a finished prepared dataset; read it with data.source=hf:{out_dir}, "
                            "or choose another output directory")
        if record["settings"] != json.loads(json.dumps(asdict(settings))):
            raise DataError(f"{out_dir} holds an interrupted preparation with other settings "
                            f"({record['settings']}); continue it with those, or choose another output directory")
        return record
    if out_dir.exists() and any(out_dir.iterdir()):
        raise DataError(f"{out_dir} exists and is not a prepared dataset; choose an empty or new output directory")
    return {"settings": asdict(settings), "splits": {}, "complete": False}


def prepare(settings: Settings, out_dir: Path, splits: Sequence[str], workers: int) -> dict:
    """Write every split of the source that exists; returns the record (rows and skipped files per split, each
    [name, why])."""
    from pyarrow.parquet import read_metadata
    from tqdm.auto import tqdm

    if settings.short_side < 1 or settings.shard_size < 1 or not 1 <= settings.quality <= 100:
        raise DataError("--short-side and --shard-size must be at least 1, --quality between 1 and 100")
    cfg = build_config(DataConfig, None, [f"source={settings.source}", *settings.overrides])
    record = read_record(out_dir, settings)
    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    sizes, jobs = {}, []
    for split in splits:
        try:
            sizes[split] = len(open_source(cfg, split, settings.short_side))
        except DataError as error:
            if split == "train":
                raise
            print(f"no {split} split: {error}")
            continue
        shards = -(-sizes[split] // settings.shard_size)
        done = record["splits"].setdefault(split, {"images": sizes[split], "shards": {}})["shards"]
        jobs += [(cfg, split, shard, shards, settings, out_dir) for shard in range(shards)
                 if str(shard) not in done or not shard_path(out_dir, split, shard, shards).is_file()]
    record_path = out_dir / RECORD
    record_path.write_text(json.dumps(record, indent=2))
    # No more processes than shards to write: each spawned one starts by importing the package (seconds).
    with multiprocessing.get_context("spawn").Pool(max(1, min(workers, len(jobs)))) as pool, \
            tqdm(total=sum(sizes.values()), desc=f"prepare {settings.source}", unit="img") as progress:
        progress.update(sum(shard["rows"] + len(shard["skipped"]) for split in record["splits"].values()
                            for shard in split["shards"].values()))
        for split, shard, rows, skipped in pool.imap_unordered(write_shard, jobs):
            record["splits"][split]["shards"][str(shard)] = {"rows": rows, "skipped": skipped}
            record_path.write_text(json.dumps(record, indent=2))  # after the shard's rename: it is done
            progress.update(rows + len(skipped))
    for split, written in record["splits"].items():
        shards = written["shards"]
        skipped = sum(len(shard["skipped"]) for shard in shards.values())
        rows = sum(read_metadata(shard_path(out_dir, split, int(shard), len(shards))).num_rows for shard in shards)
        if rows != written["images"] - skipped:
            raise DataError(f"{out_dir}: the {split} split holds {rows} images, {written['images']} - {skipped} "
                            f"skipped were expected; delete {out_dir} and prepare it again")
    record["complete"] = True
    record_path.write_text(json.dumps(record, indent=2))
    return record


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mpp.data.prepare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="what data.source would say: folder:<dir>, hf:<name>, fashion-mnist, ...")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("overrides", nargs="*",
                        help="other data.* settings, key=value or data.key=value (e.g. eval_folder=<dir>)")
    parser.add_argument("--short-side", type=int, default=256, help="shorter side of the stored images (default 256)")
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality of the stored images (default 90)")
    parser.add_argument("--shard-size", type=int, default=1000, help="images per parquet file (default 1000)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                        help="processes (default: all cores)")
    parser.add_argument("--splits", nargs="+", default=["train", "test"], help="train, test or both (default both)")
    args = parser.parse_args(argv)
    # --splits takes every word after it: overrides given after it (key=value) are overrides still.
    # The data readers' messages name their keys as a recipe takes them (data.eval_folder=<dir>): taken as given.
    overrides = [word.removeprefix("data.")
                 for word in (*args.overrides, *(word for word in args.splits if "=" in word))]
    args.splits = [word for word in args.splits if "=" not in word]
    if not args.splits or set(args.splits) - {"train", "test"}:
        parser.error(f"--splits takes train, test or both, not {' '.join(args.splits) or 'nothing'}")
    settings = Settings(args.source, tuple(overrides), args.short_side, args.quality, args.shard_size)
    try:
        record = prepare(settings, args.out_dir, args.splits, args.workers)
    except RunError as error:
        raise SystemExit(f"error: {error}") from None
    for split, written in record["splits"].items():
        skipped = [(name, kind) for shard in written["shards"].values() for name, kind in shard["skipped"]]
        print(f"{split}: {written['images'] - len(skipped)} images in {len(written['shards'])} shards"
              + (f"; {skip_summary(skipped)}" if skipped else ""))
    print(f"read it with data.source=hf:{args.out_dir}")


if __name__ == "__main__":
    main()
