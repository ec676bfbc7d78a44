"""The files of ``mpp/`` one MPP training step runs through, from the command line to ``optimizer.step()``, traced
rather than written by hand: the trail docs/layout.md shows.

    python -m tools.step_trail [--write docs/layout.md]

A tiny run (``python -m mpp pretrain --config mpp_tiny_cpu``, shapes data, monitors off) is traced with
``sys.setprofile`` from the command line's ``main`` to its first ``optimizer.step()``: the config, the set-up (the
session, the model, the data, the trainer) and the first step (the learning rate, the first batch, the forward and
backward passes, the checks). Imports are left out: nothing that runs while a module is being imported counts (module
and class bodies, and what they call). Each file of ``mpp/`` met is listed once, in the order first met, with the
functions of it that ran. A trace of what runs, not of what the source could call: the table of commands names each
run function by its import path, which no static reading follows.

With ``--write``, the trail replaces the block between the page's ``STEP_TRAIL`` markers.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

import torch.optim

from mpp.command_line import main as mpp_main

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(importlib.util.find_spec("mpp").submodule_search_locations[0]).resolve()
OPTIMIZER_CODE = Path(torch.optim.__file__).resolve().parent
CONFIG = "mpp/config/"  # the config sections and their building: counted apart
BEGIN, END = "<!-- STEP_TRAIL: written by python -m tools.step_trail --write docs/layout.md -->", "<!-- /STEP_TRAIL -->"
TINY_RUN = ["pretrain", "--config", "mpp_tiny_cpu", "train.steps=3", "train.log_every=100",
            "train.checkpoint_every=100", "monitor.few_shot_every=0", "monitor.mosaic_every=0",
            "monitor.final_few_shot_draws=0"]


def step_trail() -> dict[str, list[str]]:
    """The trail, traced in a fresh interpreter: one that has built configs or loaded modules before would skip what
    its caches hold (``functools.cache``) or what it has imported already."""
    traced = subprocess.run([sys.executable, "-m", "tools.step_trail", "--json"], cwd=ROOT, capture_output=True,
                            text=True)
    if traced.returncode:
        raise RuntimeError(f"the traced run failed (exit status {traced.returncode}):\n{traced.stderr[-4000:]}")
    return json.loads(traced.stdout.strip().splitlines()[-1])


def trail_in_this_process() -> dict[str, list[str]]:
    """{file of mpp/, relative to the repository: the functions of it that ran}, in the order first met, from a tiny
    run's command line to its first ``optimizer.step()``, imports left out."""
    trail: dict[str, list[str]] = {}
    importing = 0  # module bodies on the stack: what runs under one is an import
    stepped = False

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal importing, stepped
        code = frame.f_code
        if stepped or event not in ("call", "return"):
            return
        if code.co_name == "<module>":
            importing += 1 if event == "call" else -1
            return
        if event != "call" or importing:
            return
        path = Path(code.co_filename)
        if code.co_name == "step" and path.is_relative_to(OPTIMIZER_CODE):
            stepped = True
        elif path.is_relative_to(PACKAGE):
            names = trail.setdefault(f"mpp/{path.relative_to(PACKAGE)}", [])
            if code.co_name not in names:
                names.append(code.co_name)

    with tempfile.TemporaryDirectory() as run_dir:
        sys.setprofile(profile)
        try:
            mpp_main([*TINY_RUN, f"output_dir={run_dir}"])
        finally:
            sys.setprofile(None)
    return trail


def outside_config(trail: dict[str, list[str]]) -> list[str]:
    """The trail's files outside mpp/config/ (the count the package holds to 15)."""
    return [path for path in trail if not path.startswith(CONFIG)]


def trail_markdown(trail: dict[str, list[str]]) -> str:
    """The trail as the page's numbered list: each file with its named functions (comprehensions and lambdas count
    towards their file, and are listed only where nothing else of it ran)."""
    def shown(names: list[str]) -> list[str]:
        return [name for name in names if not name.startswith("<")] or names

    return "\n".join(f"{number}. `{path}`: " + ", ".join(f"`{name}`" for name in shown(names))
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
    parser.add_argument("--json", action="store_true", help="trace in this process; print the trail as JSON")
    args = parser.parse_args()
    if args.json:
        print(json.dumps(trail_in_this_process()))
        return
    trail = step_trail()
    if args.write:
        args.write.write_text(page_with_trail(args.write.read_text(), trail))
    print(f"{len(outside_config(trail))} files outside {CONFIG}, {len(trail)} in all\n{trail_markdown(trail)}")


if __name__ == "__main__":
    main()
