"""What an experiment publishes: its tables (figures as mean ± standard deviation, comparisons as paired differences
with their 95% intervals and a Holm correction across them), results.md and copies in ``publish_dir``.
"""

from __future__ import annotations

import json
import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpp.errors import ConfigError
from mpp.evaluation.statistics import PairedDifference, describe_difference, holm_adjusted
from mpp.experiments.config import ExperimentConfig

# The names meant for use outside the package (study/, tools/ and users)
__all__ = [
    "Comparison", "comparison_table", "copy_to_publish_dir", "holm_summary", "markdown_table", "mean_std",
    "measured_cell", "percent", "publish_table",
]


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def percent(values: list[float]) -> str:
    mean, std = mean_std([100 * value for value in values])
    return f"{mean:.1f} ± {std:.1f}"


def markdown_table(header: list[str], body: list[list[str]], left_columns: int = 1) -> list[str]:
    """A Markdown table's lines and a blank line after it; the columns after the first ``left_columns`` align right
    (figures)."""
    rule = "|" + "|".join("---" if column < left_columns else "---:" for column in range(len(header))) + "|"
    return ["| " + " | ".join(header) + " |", rule, *("| " + " | ".join(cells) + " |" for cells in body), ""]


@dataclass(frozen=True)
class Comparison:
    """One cell of the comparison tables: ``finding``, read in ``column`` by ``measure``, as the paired difference
    over the seeds."""

    finding: str
    column: str
    measure: str
    difference: PairedDifference


def comparison_table(title: str, comparisons: list[Comparison], preferred: str) -> list[str]:
    """``comparisons`` as a table: a row per finding, a column per reading ("—" where a finding is not read); a cell
    read by another measure than ``preferred`` says so."""
    columns = list(dict.fromkeys(comparison.column for comparison in comparisons))
    columns.sort(key=lambda column: column != "Fine-tuned")  # fine-tuned first, the rest as they came
    cells = {(comparison.finding, comparison.column): measured_cell(comparison, preferred)
             for comparison in comparisons}
    findings = list(dict.fromkeys(comparison.finding for comparison in comparisons))
    body = [[finding, *(cells.get((finding, column), "—") for column in columns)] for finding in findings]
    return markdown_table([title, *columns], body, left_columns=len(columns) + 1)


def measured_cell(comparison: Comparison, preferred: str) -> str:
    """describe_difference's cell, naming the measure where it is not ``preferred``."""
    cell = describe_difference(comparison.difference, claimed=True)
    if comparison.measure == preferred:
        return cell
    return f"{cell[:-1]}; {comparison.measure})" if cell.endswith(")") else f"{cell} ({comparison.measure})"


def holm_summary(comparisons: list[Comparison], kind: str = "") -> list[str]:
    """How many comparisons the tables read, and which of those shown stay shown after a Holm correction across
    all of them (5% family-wise); ``kind`` names them where they are one kind of the tables' comparisons ("these
    tables read 12 exploratory comparisons"), corrected apart from the others."""
    tested = [comparison for comparison in comparisons if comparison.difference.p_value is not None]
    adjusted = holm_adjusted([comparison.difference.p_value for comparison in tested])
    shown = sum(comparison.difference.shown for comparison in tested)
    kept = [f"{comparison.finding} ({comparison.column}: {'the opposite, ' if comparison.difference.mean < 0 else ''}"
            f"Holm p {p:.2g})" for comparison, p in zip(tested, adjusted, strict=True)
            if comparison.difference.shown and p is not None and p < 0.05]
    read, across = ((f"{kind} comparisons", f"these {len(tested)} alone") if kind
                    else ("comparisons", f"all {len(tested)}"))
    said = (f"These tables read {len(tested)} {read}, {shown} shown each on its own; after a Holm correction across "
            f"{across} (5% family-wise), ")
    stay = f"{len(kept)} {'stays' if len(kept) == 1 else 'stay'} shown: {'; '.join(kept)}."
    return [said + (stay if kept else "none stays shown."), ""]


def publish_table(cfg: ExperimentConfig, folder: Path, table: str, runs: int, wall_seconds: float) -> str:
    """An experiment's ``table`` with its wall time: written to ``folder``/results.md; returned."""
    table += f"\n{runs} runs, {cfg.parallel_runs} at a time, in {wall_seconds / 60:.0f} min of wall time.\n"
    (folder / "results.md").write_text(table)
    return table


def copy_to_publish_dir(cfg: ExperimentConfig, folder: Path, plots: list[Path]) -> None:
    """results.md, results.json and the plots of ``folder`` copied to ``publish_dir``, where set (and another)."""
    if cfg.publish_dir and Path(cfg.publish_dir).resolve() != folder.resolve():
        published = Path(cfg.publish_dir)
        published.mkdir(parents=True, exist_ok=True)
        for path in [folder / "results.md", folder / "results.json", *plots]:
            shutil.copyfile(path, published / path.name)


def published_results(cfg: ExperimentConfig) -> tuple[Path, dict[str, Any]]:
    """The folder of an experiment's published results.json (``publish_dir``, else ``output_dir``) and its
    contents, for ``tables_only``."""
    folder = Path(cfg.publish_dir or cfg.output_dir)
    path = folder / "results.json"
    if not path.is_file():
        raise ConfigError(f"tables_only=true rewrites the tables from {path}, which does not exist; run the "
                          "experiment first (without tables_only)")
    return folder, json.loads(path.read_text())

