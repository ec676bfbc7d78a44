"""The study's results pages (docs/results.md): each experiment writes its tables into its own section of a page,
between ``<!-- results: <name> -->`` and ``<!-- /results: <name> -->`` (name: its output_dir's last part), so that the
page's figures are what the experiments wrote."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from mpp.errors import ConfigError
from mpp.experiments.config import ExperimentConfig
from mpp.run import write_whole


@dataclass
class PublishedExperimentConfig(ExperimentConfig):
    """An experiment of the study, which may write its tables into a results page's section."""

    FREE_ON_CONTINUE: ClassVar[tuple[str, ...]] = (*ExperimentConfig.FREE_ON_CONTINUE, "results_page")

    results_page: str = ""  # a Markdown file whose section for this experiment gets its tables; empty: none


def section_markers(name: str) -> tuple[str, str]:
    return f"<!-- results: {name} -->", f"<!-- /results: {name} -->"


def check_section(cfg: PublishedExperimentConfig) -> None:
    """A ConfigError unless ``results_page`` (where set) holds the experiment's section once: checked before the
    experiment starts, so that a run is never lost to a page it cannot write."""
    if not cfg.results_page:
        return
    page, (start, end) = Path(cfg.results_page), section_markers(Path(cfg.output_dir).name)
    text = page.read_text() if page.is_file() else ""
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ConfigError(f"results_page={page} needs one section to write the results into: a line {start}, then "
                          f"a line {end}; add them, or leave results_page empty")


def write_section(cfg: PublishedExperimentConfig, content: str) -> None:
    """``results_page`` (where set) with the experiment's section holding ``content``, written whole or not at all."""
    if not cfg.results_page:
        return
    check_section(cfg)
    page, (start, end) = Path(cfg.results_page), section_markers(Path(cfg.output_dir).name)
    before, rest = page.read_text().split(start, 1)
    after = rest.split(end, 1)[1]
    write_whole(page, lambda partial: partial.write_text(f"{before}{start}\n{content}{end}{after}"))
