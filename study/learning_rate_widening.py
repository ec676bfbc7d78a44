"""A learning rate chosen at its grid's edge may only be the best of too narrow a grid: the study's experiments sweep
that fine-tuning again over the grid widened on that side, in runs of their own (``finetune/<row>-widened<k>-seed<n>``),
until the rate chosen lies inside its grid."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from mpp.experiments.config import ExperimentConfig
from mpp.run import read_metrics

WIDENING = 3.0  # the factor between a widened grid's new rate and its old edge: the grids' own spacing


def widened_grid(grid: Sequence[float], chosen: Sequence[float]) -> tuple[float, ...]:
    """``grid`` with one more rate, a factor of 3 beyond its edge, on each side where one of the ``chosen`` rates is
    the grid's lowest or highest (a rate chosen there may only be the best of too narrow a grid); sorted. A new rate
    is rounded to 3 significant figures, as a command line writes it and a run's metrics give it back."""
    low, high = min(grid), max(grid)
    beyond = [*([low / WIDENING] if low in chosen else []), *([high * WIDENING] if high in chosen else [])]
    return tuple(sorted({*grid, *(float(f"{rate:.3g}") for rate in beyond)}))


def widened_run_name(base: str, seed: int, widenings: int) -> str:
    """The folder of one seed's fine-tuning named ``base`` ("finetune/<row>"): each widening of its grid is swept by
    runs of their own, so that the narrower sweeps stay as they finished."""
    return f"{base}{f'-widened{widenings}' if widenings else ''}-seed{seed}"


def swept_grids(cfg: ExperimentConfig, base: str, grid: Sequence[float]) -> list[tuple[float, ...]]:
    """The grids the fine-tuning ``base`` sweeps: ``grid``, then each widening of the last (widened_grid) once every
    sweep over that one (the first seed's alone with tune_once) has finished, one choosing a rate at its edge. The
    last is the one to run; one empty grid where nothing is swept."""
    grids = [tuple(grid)]
    sweeping = cfg.seeds[:1] if cfg.tune_once else cfg.seeds
    while grids[-1]:
        swept = [read_metrics(Path(cfg.output_dir) / widened_run_name(base, seed, len(grids) - 1))
                 for seed in sweeping]
        if any(metrics is None for metrics in swept):
            break
        wider = widened_grid(grids[-1], [metrics["chosen_lr"] for metrics in swept])
        if wider == grids[-1]:
            break
        grids.append(wider)
    return grids


def finished_widenings(output_dir: Path, base: str, seed: int) -> int:
    """The widenings of ``base``'s grid that ``seed``'s fine-tuning has finished: the last of them holds its result."""
    widenings = 0
    while read_metrics(output_dir / widened_run_name(base, seed, widenings + 1)) is not None:
        widenings += 1
    return widenings


def widened_sweep(grids: list[tuple[float, ...]], tuned: tuple[str, ...]) -> tuple[str, ...]:
    """The override that sweeps the last of ``grids`` where it is a widening and the run sweeps (``tuned``, from
    at_first_seeds_rate, is empty)."""
    if tuned or len(grids) < 2:
        return ()
    return (f"finetune.sweep_lrs=[{','.join(f'{rate:g}' for rate in grids[-1])}]",)
