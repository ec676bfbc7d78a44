"""The results as the pages state them cannot drift from the results: every table of docs/results.md is what its
experiment's command writes from the published results.json today, and every interval the prose of README.md and
docs/results.md quotes is one of those tables' cells (or the default run's own comparison, recomputed from its
metrics.json), followed by the verdict its cell gives."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from mpp.experiments.config import PretrainingCurveConfig, ReproductionConfig
from mpp.config.building import build_config
from mpp.evaluation.statistics import describe_difference, paired_difference
from mpp.experiments.curve import pretraining_curve
from mpp.experiments.reproduction import reproduce

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "results.md"
SECTION = re.compile(r"<!-- results: (\S+) -->\n(.*?)<!-- /results: \1 -->", flags=re.S)
# A bracketed interval of two signed figures, as the tables and the prose write it.
BRACKETS = re.compile(r"\[[+-]?\d+(?:\.\d+)?, [+-]?\d+(?:\.\d+)?\]")
QUOTED = re.compile(r"([+-]\d+\.\d) (\[[+-]\d+\.\d, [+-]\d+\.\d\]), (the opposite shown|not shown|shown)\b")
MEAN_BEFORE = re.compile(r"([+-]\d+\.\d) $")
VERDICT_AFTER = re.compile(r", (the opposite shown|not shown|shown)\b")


def published_presets() -> dict[str, Path]:
    """{experiment: preset} of every experiment that writes a section of docs/results.md."""
    presets = {}
    for preset in sorted((ROOT / "recipes" / "configs").glob("*.yaml")):
        settings = preset.read_text()
        if preset.stem.split("_")[0] in ("reproduce", "curve") and "results_page: docs/results.md" in settings:
            presets[re.search(r"^output_dir: runs/(\S+)", settings, flags=re.M)[1]] = preset
    return presets


def test_every_section_of_the_results_page_is_what_its_command_writes_from_the_published_results(tmp_path,
                                                                                                 monkeypatch):
    monkeypatch.chdir(ROOT)  # the presets name their data and stage presets from the repository root
    page = tmp_path / "results.md"
    shutil.copyfile(PAGE, page)
    presets = published_presets()
    sections = [match[1] for match in SECTION.finditer(PAGE.read_text())]
    assert set(presets) == set(sections), "every section of the page has its experiment's preset"
    for name, preset in presets.items():
        published = tmp_path / name
        shutil.copytree(ROOT / "results" / name, published)
        overrides = ["tables_only=true", f"publish_dir={published}", f"results_page={page}"]
        if preset.stem.startswith("curve"):
            pretraining_curve(build_config(PretrainingCurveConfig, preset, overrides), ROOT)
        else:
            reproduce(build_config(ReproductionConfig, preset, overrides), ROOT)
        assert (published / "results.md").read_text() == (ROOT / "results" / name / "results.md").read_text(), name
    assert page.read_text() == PAGE.read_text(), ("docs/results.md's tables differ from what the experiments' "
                                                  "commands write now: run each with tables_only=true")


def default_run_comparison() -> str:
    """The default run's closing comparison, recomputed from its metrics.json as the run describes it."""
    comparison = json.loads((ROOT / "results" / "default-run" / "metrics.json").read_text())["few_shot_comparison"]
    return describe_difference(paired_difference(comparison["trained"], comparison["at_init"], scale=100),
                               claimed=True)


def table_cells() -> dict[str, set[str]]:
    """{"+3.7 [-1.6, +8.9]": {verdicts}} of every cell in the page's generated sections, and the default run's."""
    cells: dict[str, set[str]] = {}
    generated = " ".join(match[2] for match in SECTION.finditer(PAGE.read_text())) + " " + default_run_comparison()
    for mean, interval, verdict in QUOTED.findall(generated):
        cells.setdefault(f"{mean} {interval}", set()).add(verdict)
    return cells


def prose(path: Path) -> str:
    """The page's own words: its generated sections left out, lines joined."""
    return " ".join(SECTION.sub(" ", path.read_text()).split())


@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_every_interval_the_prose_quotes_is_a_table_cell_with_the_cells_verdict(page):
    text, cells = prose(ROOT / page), table_cells()
    wrong = []
    for brackets in BRACKETS.finditer(text):
        mean = MEAN_BEFORE.search(text, max(0, brackets.start() - 8), brackets.start())
        verdict = VERDICT_AFTER.match(text, brackets.end())
        context = text[max(0, brackets.start() - 60):brackets.end() + 30]
        if not (mean and verdict):
            wrong.append(f"not quoted as '<mean> [<low>, <high>], <verdict>': ...{context}...")
        elif verdict[1] not in cells.get(f"{mean[1]} {brackets[0]}", set()):
            wrong.append(f"no table cell reads {mean[1]} {brackets[0]}, {verdict[1]}: ...{context}...")
    assert not wrong, "\n".join(wrong)


def test_the_default_runs_comparison_is_what_its_log_printed():
    metrics = json.loads((ROOT / "results" / "default-run" / "metrics.json").read_text())["few_shot_comparison"]
    recomputed = paired_difference(metrics["trained"], metrics["at_init"])
    assert [recomputed.mean, recomputed.low, recomputed.high] == pytest.approx(
        [metrics["gain_mean"], *metrics["gain_interval"]])
