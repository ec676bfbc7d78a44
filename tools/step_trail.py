"""The files of ``mpp/`` one MPP training step runs through, from the command line down, traced rather than written
by hand: the trail docs/layout.md shows.

    python -m tools.step_trail [--write docs/layout.md]

A tiny run (``python -m mpp pretrain --config mpp_tiny_cpu``, shapes data, three steps) is traced with
``sys.setprofile`` from the return of its first ``optimizer.step()`` to the call of its second: one whole turn of the
loop (the learning rate, the next batch, the forward and backward passes, the checks, ``optimizer.step()``) with every
frame above it on the stack (the command line, the recipe, the trainer). Each file of ``mpp/`` met there is listed
once, in the order first met, with the functions of it that ran. With ``--write``, the trail replaces the block
between the page's ``STEP_TRAIL`` markers.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

import torch.optim

from mpp.command_line import main as mpp_main

PACKAGE = Path(importlib.util.find_spec("mpp").submodule_search_locations[0]).resolve()
OPTIMIZER_CODE = Path(torch.optim.__file__).resolve().parent
BEGIN, END = "<!-- STEP_TRAIL: written by python -m tools.step_trail --write docs/layout.md -->", "<!-- /STEP_TRAIL -->"
TINY_RUN = ["pretrain", "--config", "mpp_tiny_cpu", "train.steps=3", "train.log_every=100",
            "train.checkpoint_every=100", "monitor.few_shot_every=0", "monitor.mosaic_every=0",
            "monitor.final_few_shot_draws=0"]


def step_trail() -> dict[str, list[str]]:
    """{file of mpp/, relative to the repository: the functions of it that ran}, in the order first met, over one
    turn of a tiny run's loop and the frames above it."""
    trail: dict[str, list[str]] = {}
    steps = 0

    def note(frame: FrameType) -> None:
        path = Path(frame.f_code.co_filename)
        if path.is_relative_to(PACKAGE) and not frame.f_code.co_name.startswith("<"):
            names = trail.setdefault(f"mpp/{path.relative_to(PACKAGE)}", [])
            if frame.f_code.co_name not in names:
                names.append(frame.f_code.co_name)

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal steps
        if event != "call" or steps > 1:
            return
        code = frame.f_code
        if code.co_name == "step" and Path(code.co_filename).is_relative_to(OPTIMIZER_CODE):
            steps += 1
            if steps == 1:  # the frames above the loop, bottom up
                stack = []
                while frame is not None:
                    stack.append(frame)
                    frame = frame.f_back
                for above in reversed(stack):
                    note(above)
        elif steps == 1:
            note(frame)

    with tempfile.TemporaryDirectory() as run_dir:
        sys.setprofile(profile)
        try:
            mpp_main([*TINY_RUN, f"output_dir={run_dir}"])
        finally:
            sys.setprofile(None)
    return trail


def trail_markdown(trail: dict[str, list[str]]) -> str:
    """The trail as the page's numbered list."""
    return "\n".join(f"{number}. `{path}`: " + ", ".join(f"`{name}`" for name in names)
                     for number, (path, names) in enumerate(trail.items(), start=1))


def page_with_trail(page: str, trail: dict[str, list[str]]) -> str:
    """``page`` with the block between its markers replaced by ``trail``."""
    if BEGIN not in page or END not in page:
        raise SystemExit(f"error: the page has no {BEGIN} ... {END} block to write the trail into")
    before, rest = page.split(BEGIN, 1)
    return f"{before}{BEGIN}\n{trail_markdown(trail)}\n{END}{rest.split(END, 1)[1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help="the page whose STEP_TRAIL block the trail replaces")
    args = parser.parse_args()
    trail = step_trail()
    if args.write:
        args.write.write_text(page_with_trail(args.write.read_text(), trail))
    print(f"{len(trail)} files\n{trail_markdown(trail)}")


if __name__ == "__main__":
    main()
