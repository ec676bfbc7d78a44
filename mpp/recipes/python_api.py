"""The recipes called from Python, in the calling process: ``mpp.pretrain``, ``mpp.finetune``, ``mpp.evaluate``; and
``mpp.compare``, which runs them over seeds in subprocesses.

    import mpp
    pre = mpp.pretrain(data="folder:/data/images", output_dir="runs/pre", train={"steps": 500})
    tuned = mpp.finetune(init=pre.run_dir, data="folder:/data/labelled", output_dir="runs/tuned")
    probe = mpp.evaluate(init=pre.run_dir, data="folder:/data/labelled", protocol="knn")

Each builds its config as its command line does (mpp/config/building.py: the preset, then the overrides, each key
checked and each value coerced by its field) and runs the same function as its command (mpp/commands.py), so a run
from Python and one from ``accelerate launch`` are the same run. Overrides are the command line's keys as keywords: a
top-level key as itself (``seed=1``), a section as a dict of its keys (``train={"steps": 500}``, the same as
``**{"train.steps": 500}``).
A failure the user can act on raises ``RunError`` (the command line prints it and exits). Every function runs under
``accelerate.notebook_launcher`` too, one call per process.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Optional

from mpp.commands import COMMANDS
from mpp.config.building import build_config, preset_path
from mpp.errors import ConfigError, RunFinished
from mpp.experiments import comparison
from mpp.experiments.config import ComparisonConfig
from mpp.private_apis import forget_accelerate_state, leave_process_group_to_launcher
from mpp.recipes.run_result import RunResult
from mpp.training.checkpoint import Preempted

# The commands (mpp/commands.py) each function's choice names: pretrain's method, evaluate's protocol.
METHODS = {"mpp": "pretrain", "supervised": "supervised"}
PROTOCOLS = ("linear_probe", "knn", "few_shot", "inspect")


def pretrain(data: Optional[str | dict[str, Any]] = None, output_dir: Optional[str | Path] = None, *,
             method: Literal["mpp", "supervised"] = "mpp", config: Optional[str | Path] = None,
             resume: bool | str = False, **overrides: Any) -> RunResult:
    """Pre-train an encoder as ``python -m mpp pretrain`` (or ``python -m mpp supervised``, ``method="supervised"``)
    does.

    Args:
        data: ``data.source``, e.g. ``"folder:/data/images"`` or ``"hf:<dataset>"``, or the data section as a dict
            (``{"source": ..., "eval_folder": ...}``); None: the preset's.
        output_dir: the run directory; None: ``runs/<method>-<date>-<time>``.
        method: MPP, or supervised pre-training on the labels.
        config: a preset, by its name (``"mpp_own_images_cpu"``) or as a YAML file; None: the command's default, the
            tiny CPU preset.
        resume: True continues the run in ``output_dir`` (``--resume``); a path continues from that checkpoint.
        overrides: the command line's keys: ``seed=1``, ``train={"steps": 500}``, ``**{"model.depth": 6}``; None
            is null.

    Returns:
        The run's metrics and directory; ``export_dir`` holds the encoder in timm's format.
    """
    return _run(METHODS[_pick(METHODS, method, "method")], config,
                _common(data, output_dir, overrides, resume="auto" if resume is True else resume or None))


def finetune(init: Optional[str | Path] = None, data: Optional[str | dict[str, Any]] = None,
             output_dir: Optional[str | Path] = None, *, config: Optional[str | Path] = None,
             resume: bool | str = False, **overrides: Any) -> RunResult:
    """Fine-tune an encoder on a classification task as ``python -m mpp finetune`` does.

    Args:
        init: the starting weights, a run directory (``pretrain(...).run_dir``), its export or a checkpoint file;
            None: from scratch, the baseline.
        data, output_dir, config, resume, overrides: as for ``pretrain`` (default preset: finetune_tiny_cpu).

    Returns:
        The run's metrics (``test_accuracy`` among them) and directory.
    """
    return _run("finetune", config, _common(data, output_dir, overrides, init=init,
                                            resume="auto" if resume is True else resume or None))


def evaluate(init: Optional[str | Path] = None, data: Optional[str | dict[str, Any]] = None,
             output_dir: Optional[str | Path] = None, *,
             protocol: Literal["linear_probe", "knn", "few_shot", "inspect"] = "linear_probe",
             config: Optional[str | Path] = None, **overrides: Any) -> RunResult:
    """Evaluate a frozen encoder as ``python -m mpp <protocol>`` does.

    Args:
        init: the encoder, a run directory, its export or a checkpoint file; None: a randomly initialised one.
        protocol: logistic regression on the features, kNN votes, few-shot ridge regression, or the paper's pictures.
        data, output_dir, config, overrides: as for ``pretrain`` (default preset: eval_tiny_cpu).

    Returns:
        The run's metrics (e.g. ``metrics["linear_probe"]["test_accuracy"]``) and directory.
    """
    return _run(_pick(PROTOCOLS, protocol, "protocol"), config, _common(data, output_dir, overrides, init=init))


def compare(unlabelled: str, labelled: str, output_dir: Optional[str | Path] = None, *,
            config: Optional[str | Path] = None, **overrides: Any) -> dict[str, Any]:
    """What MPP pre-training buys on your images, over seeds, as ``python -m mpp compare`` measures it: per seed an MPP
    run on ``unlabelled`` and a draw of ``labelled``; fine-tuned, that encoder against the same architecture trained
    from scratch as many steps as MPP's pre-training and fine-tuning together, with the same recipe (and at random
    weights as briefly), each at its own swept rate; frozen, the encoder, its random weights and the raw pixels by a
    linear probe and kNN. Everything is checked before the first run; the runs go to subprocesses (``python -m mpp``
    of this installed package, from any directory); calling it again continues.

    Args:
        unlabelled: the images to pre-train on, as ``data.source`` (``"hf:/data/my-images-64px"``).
        labelled: the labelled images, with a train and a test split, as ``data.source``.
        output_dir: where the runs, results.md and results.json go; None: the preset's (``runs/comparison``).
        config: a preset, as for ``pretrain``; None: compare_own_images_cpu.
        overrides: the comparison's keys: ``seeds=[0, 1, 2, 3, 4]``, ``mpp=["train.epochs=200"]``.

    Returns:
        results.json's contents: ``protocols`` (each arm's accuracy and balanced accuracy per seed, the floors),
        each fine-tuned arm's steps, the images skipped, the package's ``version`` and commit, and ``table``, the
        verdict and tables results.md holds.
    """
    cfg = build_config(ComparisonConfig, preset_path(config or COMMANDS["compare"].preset), override_arguments(
        _common(None, output_dir, overrides, unlabelled=unlabelled, labelled=labelled)))
    return comparison.compare(cfg)  # the command's own, less its console: a caller's logging is its own


def dotted(overrides: dict[str, Any]) -> dict[str, Any]:
    """Keyword overrides with each section's dict spelled out as the command line's dotted keys."""
    flat = {}
    for key, value in overrides.items():
        if isinstance(value, dict):
            flat.update(dotted({f"{key}.{inner}": item for inner, item in value.items()}))
        else:
            flat[key] = value
    return flat


def override_arguments(overrides: dict[str, Any]) -> list[str]:
    """Keyword overrides as the command line's ``key=value`` arguments: a string (or path) as it is, any other value
    as JSON, which the config reads as YAML."""
    return [f"{key}={value if isinstance(value, (str, Path)) else json.dumps(value)}"
            for key, value in dotted(overrides).items()]


def _common(data: Optional[str | dict[str, Any]], output_dir: Optional[str | Path], overrides: dict[str, Any],
            **named: Any) -> dict[str, Any]:
    """The named parameters as the overrides they stand for, with the other overrides (which may not repeat them); a
    parameter left at None leaves its key to the preset."""
    named = {key: value for key, value in dotted({"data" if isinstance(data, dict) else "data.source": data,
                                                  "output_dir": output_dir, **named}).items() if value is not None}
    overrides = dotted(overrides)
    repeated = [key for key in named if key in overrides]
    if repeated:
        raise TypeError(f"{', '.join(repeated)} given twice: as a parameter and among the overrides")
    return {**named, **overrides}


def _pick(choices: Iterable[str], name: str, parameter: str) -> str:
    if name not in choices:
        raise ConfigError(f"{parameter}={name!r} is not one of: {', '.join(choices)}")
    return name


def _run(name: str, config: Optional[str | Path], overrides: dict[str, Any]) -> RunResult:
    command = COMMANDS[name]
    cfg = build_config(command.config_class(), preset_path(config or command.preset), override_arguments(overrides))
    with run_in_this_process():
        try:
            return command.function()(cfg)
        except RunFinished as finished:  # resume=True of a finished run: its result, nothing rewritten
            logging.getLogger(__name__).info("%s", finished)
            return RunResult(finished.run_dir, finished.metrics)
        except Preempted as stop:  # said in this API's words
            stop.args = (stop.continued_by("resume=True"),)
            raise


@contextmanager
def run_in_this_process() -> Iterator[None]:
    """A run in a process that goes on after it (a notebook's): afterwards the run's log file is closed, and
    accelerate's process-wide state forgotten, so that the next run makes its own Accelerator (with its own
    precision). ``notebook_launcher`` still wants a process that has not trained: autograd cannot run in a process
    forked from one that has."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # one of a launcher's processes: its runs share one group
        leave_process_group_to_launcher()
    root = logging.getLogger()
    before = set(root.handlers)
    try:
        yield
    finally:
        for handler in [handler for handler in root.handlers if handler not in before]:
            if isinstance(handler, logging.FileHandler):  # the run's log.txt; the console's handler stays
                root.removeHandler(handler)
                handler.close()
        forget_accelerate_state()
