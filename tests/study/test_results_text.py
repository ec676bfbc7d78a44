"""The results as the pages state them cannot drift from the results: every table of docs/results.md is what its
experiment's command writes from the published results.json today, and every figure the prose of README.md,
docs/results.md and docs/measured.md quotes from them is a figure of the experiment it is about.

Which experiment a passage is about (a paragraph, a list item, a row of measured.md's first table):
- the one it names: a published experiment's preset (``reproduce_shapes_cpu.yaml``) or results folder
  (``results/reproduce-shapes-cpu/``, ``results/default-run/``);
- else, on the results page, the section it follows under the same heading (a section's reading);
- else the sections under the headings of the page it links to (``[Shapes (colour)](#shapes-colour)``);
- on README.md, each interval is about the experiment whose column of the front page's table the sentence names
  last before it ("on shapes ...").

What is checked there:
- every interval is quoted as its cell reads it, ``<mean> [<low>, <high>], <verdict>``, and is a cell of that
  experiment's tables (the default run's: its own comparison, recomputed from its metrics.json) with that verdict;
  a parenthesis after it that opens with a p-value (``(p 0.029; ...)``) gives the cell's p-value, and one that
  speaks of Holm says "fails Holm" or "stays shown after Holm" as the experiment's Holm line says (and "across its
  <n> comparisons" gives the family's size); an interval shown on its own always says which;
- every p-value is such a parenthesis, and every other mention of Holm is "<count> of the <n> comparisons stay(s)
  shown after the Holm correction", checked against the Holm line, or the method's description ("a Holm
  correction");
- every "mean ± SD" is a figure of that experiment's tables (or of its few-shot curve during pre-training); on the
  results page, one of another run (the supervised preset's) may be quoted where docs/measured.md records it with
  its command;
- the results page's ``wall_seconds`` are results.json's; measured.md's rows give their experiment's number of runs
  and minutes of wall time, and every percentage they give is one of its tables' figures;
- the default run's MPP accuracy, loss and most-frequent-class score are its metrics.json's.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mpp.config.building import build_config
from mpp.evaluation.statistics import describe_difference, paired_difference
from mpp.experiments.publishing import percent
from study.confirmatory import ConfirmatoryConfig, confirmatory_test
from study.curve import pretraining_curve
from study.curve_config import PretrainingCurveConfig
from study.reproduction import reproduce
from study.reproduction_config import ReproductionConfig
from tests.test_docs import FRONT_PAGE_EXPERIMENTS

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "results.md"
MEASURED = ROOT / "docs" / "measured.md"
DEFAULT_RUN = "default-run"
# The front page's columns, as its sentences name them, and the experiment each is; and the curve a sentence names.
FRONT_PAGE_COLUMNS = {**{column.lower(): name for column, name in FRONT_PAGE_EXPERIMENTS.items()},
                      "the clip-art curve": "curve-openclipart-finetuned-cpu",  # named by a sentence, not a column
                      "the registered test": "confirm-openclipart-cpu",
                      "the regularised test": "confirm-openclipart-regularised-cpu"}

SECTION = re.compile(r"<!-- results: (\S+) -->\n(.*?)<!-- /results: \1 -->", flags=re.S)
SECTION_START = re.compile(r"^<!-- results: (\S+) -->$")
SECTION_END = re.compile(r"^<!-- /results: (\S+) -->$")
HEADING = re.compile(r"^(#{1,6}) (.+)$")
PAGE_LINK = re.compile(r"\]\(#([^)\s]+)\)")
# A bracketed interval of two signed figures, as the tables and the prose write it.
BRACKETS = re.compile(r"\[[+-]?\d+(?:\.\d+)?, [+-]?\d+(?:\.\d+)?\]")
VERDICT = r"(the opposite shown|not shown|shown)"
# A quoted interval, its verdict and the parenthesis right after it, if any.
QUOTED = re.compile(r"([+-]\d+\.\d) (\[[+-]\d+\.\d, [+-]\d+\.\d\]), " + VERDICT + r"\b(?: \(([^()]*)\))?")
# A table cell: the same, with the cell's p-value.
CELL = re.compile(r"^([+-]\d+\.\d) (\[[+-]\d+\.\d, [+-]\d+\.\d\]), " + VERDICT + r"(?: \(p ([^;)]+))?")
P_VALUE = re.compile(r"^p ([0-9][^;:,)\s]*)")
HOLM_SAID = re.compile(r"(fails Holm|stays shown after Holm)(?: across (?:its|the experiment's|that experiment's"
                       r"|this experiment's) (\d+) comparisons)?")
HOLM_COUNT = re.compile(r"\b(none|one|two|three|four|five|six|seven|eight|nine|ten|\d+) of (?:the table's|the "
                        r"tables'|the|its|this experiment's|that experiment's|the experiment's) (\d+) comparisons "
                        r"stays? shown after the Holm correction", flags=re.I)
COUNT_WORDS = ["none", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
HOLM_LINE = re.compile(r"after a Holm correction across (?:all|these) (\d+)(?: alone)? \(5% family-wise\), "
                       r"(?:none stays shown|\d+ stays? shown: (.*))\.$", flags=re.M)
HOLM_KEPT = re.compile(r"(.+?) \(([^():]+): (?:the opposite, )?Holm p [^)]+\)(?:; |$)")
PLUS_MINUS = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?) ± (\d+(?:\.\d+)?)")
FIGURE = re.compile(r"^(\d+\.\d{1,3})(?: ± \d+\.\d{1,3})?$")  # a percentage, or a CKA to 3 decimals


def published_presets() -> dict[str, Path]:
    """{experiment: preset} of every experiment that writes a section of docs/results.md."""
    presets = {}
    for preset in sorted((ROOT / "study" / "configs").glob("*.yaml")):
        settings = preset.read_text()
        kind = preset.stem.split("_")[0]
        if kind in ("reproduce", "curve", "confirm") and "results_page: docs/results.md" in settings:
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
        if preset.stem.startswith("confirm"):  # it writes to its output_dir too: not the runs'
            confirmatory_test(build_config(ConfirmatoryConfig, preset,
                                           [*overrides, f"output_dir={tmp_path / 'runs' / name}"]))
        elif preset.stem.startswith("curve"):
            pretraining_curve(build_config(PretrainingCurveConfig, preset, overrides))
        else:
            reproduce(build_config(ReproductionConfig, preset, overrides))
        assert (published / "results.md").read_text() == (ROOT / "results" / name / "results.md").read_text(), name
    assert page.read_text() == PAGE.read_text(), ("docs/results.md's tables differ from what the experiments' "
                                                  "commands write now: run each with tables_only=true")


# --- What each experiment's tables say -----------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """One comparison cell: its verdict, p-value and whether it stays shown after the experiment's Holm correction
    (None where the experiment has no Holm line: the default run's single comparison)."""

    verdict: str
    p: str | None
    kept: bool | None


@dataclass
class Experiment:
    name: str
    comparisons: dict[str, list[Comparison]] = field(default_factory=dict)  # "+3.7 [-1.6, +8.9]": its cells
    figures: set[str] = field(default_factory=set)  # "67.2 ± 0.6" and "84.8": every figure of its tables
    families: list[tuple[int, int]] = field(default_factory=list)  # each Holm line's comparisons, and those kept
    results: dict = field(default_factory=dict)  # its results.json (the default run: its metrics.json)

    @property
    def means(self) -> set[str]:
        return {figure.split(" ± ")[0] for figure in self.figures}


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Each table of ``text`` as its rows of cells, the header first, the rule left out."""
    tables, rows = [], []
    for line in [*text.splitlines(), ""]:
        if re.fullmatch(r"\|[-:| ]+\|?", line.strip()):
            continue  # the rule under the header
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def finding_of(title: str, row: str) -> str:
    """The name the Holm line gives a row's comparisons: the row's label, or the curve tables' "<length> over
    <length>"."""
    if title.startswith("Gain over initialisation"):
        return f"{row} over initialisation"
    longer = re.match(r"Gain of (.+) over a shorter pre-training", title)
    return f"{longer[1]} over {row.removeprefix('against ')}" if longer else row


def parse_section(name: str, text: str) -> Experiment:
    experiment = Experiment(name, results=json.loads((ROOT / "results" / name / "results.json").read_text()))
    kept = set()
    for holm in HOLM_LINE.finditer(text):  # one per family of comparisons corrected together
        family = set(HOLM_KEPT.findall(holm[2] or ""))
        assert len(family) == (holm[2] or "").count("Holm p"), f"{name}: a Holm line unread"
        experiment.families.append((int(holm[1]), len(family)))
        kept |= family
    # A registered confirmatory test reads its comparisons in a fixed sequence instead of a Holm family.
    assert experiment.families or text.lstrip().startswith("Registered in"), f"{name}: no Holm line under its tables"
    for header, *rows in markdown_tables(text):
        for cells in rows:
            for column, cell in zip(header[1:], cells[1:], strict=True):
                quoted = CELL.match(cell)
                if quoted:
                    mean, interval, verdict, p = quoted.groups()
                    is_kept = (finding_of(header[0], cells[0]), column) in kept
                    experiment.comparisons.setdefault(f"{mean} {interval}", []).append(
                        Comparison(verdict, p, is_kept))
                else:  # a figure, or two in one cell ("+6.1 ± 0.8; +1.2 ± 0.2"), read without their signs as quoted
                    experiment.figures |= {part.lstrip("+-") for part in cell.split("; ")
                                           if FIGURE.match(part.lstrip("+-"))}
    for row in experiment.results.get("rows", {}).values():  # the few-shot curve during pre-training, first and last
        curves = list(row.get("few_shot_during_pretraining", {}).values())
        if curves:
            experiment.figures |= {percent([curve[0][1] for curve in curves]),
                                   percent([curve[-1][1] for curve in curves])}
    return experiment


def default_run_metrics() -> dict:
    return json.loads((ROOT / "results" / DEFAULT_RUN / "metrics.json").read_text())


def default_run_comparison() -> str:
    """The default run's closing comparison, recomputed from its metrics.json as the run describes it."""
    comparison = default_run_metrics()["few_shot_comparison"]
    return describe_difference(paired_difference(comparison["trained"], comparison["at_init"], scale=100),
                               claimed=True)


def default_run() -> Experiment:
    metrics = default_run_metrics()
    mean, interval, verdict, p = CELL.match(default_run_comparison()).groups()
    comparison = metrics["few_shot_comparison"]
    figures = {f"{100 * statistics.fmean(side):.2f} ± {100 * statistics.stdev(side):.2f}"
               for side in (comparison["trained"], comparison["at_init"])}
    return Experiment(DEFAULT_RUN, {f"{mean} {interval}": [Comparison(verdict, p, None)]}, figures, results=metrics)


def experiments() -> dict[str, Experiment]:
    """Every published experiment, read from the results page's sections, and the default run."""
    found = {match[1]: parse_section(match[1], match[2]) for match in SECTION.finditer(PAGE.read_text())}
    return found | {DEFAULT_RUN: default_run()}


# --- Which experiment each passage is about -----------------------------------------------------------------


@dataclass
class Passage:
    page: str
    text: str  # its lines joined
    experiments: list[str]  # what it is about, by the rules above; empty where none


def anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def named_experiments(text: str) -> list[str]:
    """The experiments a passage names by their preset or their results folder."""
    named = [name for name, preset in published_presets().items()
             if re.search(rf"(?<![\w-]){re.escape(preset.name)}", text) or f"results/{name}/" in text]
    return named + ([DEFAULT_RUN] if f"results/{DEFAULT_RUN}/" in text else [])


def results_page_passages(text: str) -> list[Passage]:
    """The results page's paragraphs and list items outside its generated sections and code blocks."""
    lines = text.splitlines()
    # The sections under each heading, its subheadings' included, for the links to it.
    headings, under, in_code = [], {}, False
    for line in lines:
        in_code ^= line.startswith("```")
        heading, start = HEADING.match(line), SECTION_START.match(line)
        if in_code:
            continue
        if heading:
            headings = [(level, name) for level, name in headings if level < len(heading[1])]
            headings.append((len(heading[1]), anchor(heading[2])))
            under.setdefault(anchor(heading[2]), [])
        elif start:
            for _, name in headings:
                under[name].append(start[1])
    passages, current, follows, in_code, in_section = [], [], None, False, False

    def close():
        if current:
            joined = " ".join(" ".join(current).split())
            about = named_experiments(joined) or ([follows] if follows else [])
            if not about:
                about = [name for link in PAGE_LINK.findall(joined) for name in under.get(link, [])]
            passages.append(Passage("docs/results.md", joined, list(dict.fromkeys(about))))
            current.clear()

    for line in lines:
        if line.startswith("```"):
            close()
            in_code = not in_code
        elif in_code:
            continue
        elif SECTION_START.match(line):
            close()
            in_section = True
        elif SECTION_END.match(line):
            in_section, follows = False, SECTION_END.match(line)[1]
        elif in_section:
            continue
        elif HEADING.match(line):
            close()
            follows = None
        elif not line.strip() or line.startswith("- "):
            close()
            if line.strip():
                current.append(line)
        else:
            current.append(line)
    close()
    return passages


def measured_passages(text: str) -> list[Passage]:
    """The rows of docs/measured.md's first table (every figure with its command), each about the experiments it
    names."""
    rows = markdown_tables(text)[0][1:]
    return [Passage("docs/measured.md", " | ".join(cells), named_experiments(" | ".join(cells))) for cells in rows]


def readme_passages(text: str) -> list[Passage]:
    """The front page's paragraphs outside code blocks; their intervals are each about the column named before it."""
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    return [Passage("README.md", " ".join(block.split()), []) for block in re.split(r"\n\s*\n", prose)
            if block.strip() and not block.lstrip().startswith("|")]


def passages_of(page: str, text: str) -> list[Passage]:
    return {"README.md": readme_passages, "docs/results.md": results_page_passages,
            "docs/measured.md": measured_passages}[page](text)


def readme_experiment(text: str, before: int) -> list[str]:
    """The experiment of the front page's column named last before ``before`` in ``text``."""
    lowered, best = text[:before].lower(), None
    for column, name in FRONT_PAGE_COLUMNS.items():
        at = lowered.rfind(column)
        if at >= 0 and (best is None or at > best[0]):
            best = (at, name)
    return [best[1]] if best else []


# --- The checks ---------------------------------------------------------------------------------------------


def excerpt(text: str, start: int, end: int) -> str:
    return f"...{text[max(0, start - 70):end + 40]}..."


def interval_errors(page: str, text: str, known: dict[str, Experiment]) -> tuple[list[str], int]:
    """What is wrong with the intervals ``text`` (the page ``page``) quotes, and how many it quotes."""
    wrong, checked = [], 0
    for passage in passages_of(page, text):
        quotes = {match.start(2): match for match in QUOTED.finditer(passage.text)}
        for brackets in BRACKETS.finditer(passage.text):
            quoted = quotes.get(brackets.start())
            where = excerpt(passage.text, brackets.start(), brackets.end())
            about = (readme_experiment(passage.text, brackets.start()) if page == "README.md"
                     else passage.experiments)
            if page == "docs/measured.md" and not about:
                continue  # a row about no published result: history, benchmarks
            checked += 1
            if not quoted:
                wrong.append(f"{page}: not quoted as '<mean> [<low>, <high>], <verdict>': {where}")
                continue
            if not about:
                wrong.append(f"{page}: the passage names no experiment this interval is about: {where}")
                continue
            wrong += [f"{page}: {error}: {where}" for error in quote_errors(quoted, [known[name] for name in about])]
    return wrong, checked


def quote_errors(quoted: re.Match, about: list[Experiment]) -> list[str]:
    mean, interval, verdict, parenthesis = quoted.groups()
    key, names = f"{mean} {interval}", ", ".join(experiment.name for experiment in about)
    cells = [(experiment, cell) for experiment in about for cell in experiment.comparisons.get(key, [])]
    if not cells:
        return [f"no cell of {names} reads {key}"]
    cells = [(experiment, cell) for experiment, cell in cells if cell.verdict == verdict]
    if not cells:
        return [f"{key}: its cell in {names} is not '{verdict}'"]
    parenthesis = parenthesis or ""
    if verdict != "not shown" and "Holm" not in parenthesis and any(experiment.families for experiment in about):
        return [f"{key}: shown on its own, quoted without whether it stays shown after the Holm correction"]
    p = P_VALUE.match(parenthesis)
    if p:
        cells = [(experiment, cell) for experiment, cell in cells if cell.p == p[1]]
        if not cells:
            return [f"{key}: its cell in {names} does not give p {p[1]}"]
    if "Holm" in parenthesis:
        said = HOLM_SAID.search(parenthesis)
        if not said:
            return [f"{key}: Holm is said otherwise than 'fails Holm' or 'stays shown after Holm'"]
        kept = said[1].startswith("stays")
        if not [cell for _, cell in cells if cell.kept == kept]:
            return [f"{key}: '{said[1]}', where the Holm line of {names} says otherwise"]
        if said[2] and not [experiment for experiment, _ in cells
                            if int(said[2]) in {size for size, _ in experiment.families}]:
            return [f"{key}: the Holm correction of {names} is not across {said[2]} comparisons"]
    return []


def holm_and_p_errors(page: str, text: str, known: dict[str, Experiment]) -> list[str]:
    """Every p-value is an interval's, and every mention of Holm an interval's, a checked count or the method's."""
    wrong = []
    for passage in passages_of(page, text):
        parentheses = [(quoted.start(4), quoted.end(4)) for quoted in QUOTED.finditer(passage.text)
                       if quoted[4] is not None]
        counts = list(HOLM_COUNT.finditer(passage.text))
        for p in re.finditer(r"\bp (?=\d)", passage.text):
            if p.start() not in {start for start, _ in parentheses}:
                wrong.append(f"{page}: a p-value not given right after its interval's verdict: "
                             f"{excerpt(passage.text, p.start(), p.end())}")
        spans = parentheses + [(count.start(), count.end()) for count in counts]
        for holm in re.finditer(r"Holm", passage.text):
            if not any(start <= holm.start() < end for start, end in spans) and not (
                    passage.text[max(0, holm.start() - 2):holm.start()] == "a "):
                wrong.append(f"{page}: Holm said outside '<interval>, <verdict> (p <p>; fails Holm | stays shown "
                             f"after Holm)' and '<count> of the <n> comparisons stay shown after the Holm "
                             f"correction': {excerpt(passage.text, holm.start(), holm.end())}")
        for count in counts:
            where = excerpt(passage.text, count.start(), count.end())
            stays = COUNT_WORDS.index(count[1].lower()) if count[1].lower() in COUNT_WORDS else int(count[1])
            about = [known[name] for name in passage.experiments if known[name].families]
            if len(about) != 1:
                wrong.append(f"{page}: a Holm count in a passage about {passage.experiments}, not one experiment: "
                             f"{where}")
            elif (int(count[2]), stays) not in about[0].families:
                wrong.append(f"{page}: {about[0].name}'s Holm lines: (comparisons, kept) {about[0].families}: "
                             f"{where}")
    return wrong


def measured_figures() -> set[str]:
    """The "mean ± SD" figures docs/measured.md records in rows about no published result (with the command that
    printed them)."""
    return {match[0] for passage in measured_passages(MEASURED.read_text()) if not passage.experiments
            for match in PLUS_MINUS.finditer(passage.text)}


def spread_errors(page: str, text: str, known: dict[str, Experiment]) -> tuple[list[str], int]:
    """Every "mean ± SD" is a figure of the experiment its passage is about; elsewhere one measured.md records."""
    wrong, checked, recorded = [], 0, measured_figures()
    for passage in passages_of(page, text):
        for figure in PLUS_MINUS.finditer(passage.text):
            checked += 1
            where = excerpt(passage.text, figure.start(), figure.end())
            if any(figure[0] in known[name].figures for name in passage.experiments):
                continue
            if passage.experiments and page == "docs/measured.md":
                wrong.append(f"{page}: {figure[0]} is no figure of {passage.experiments}: {where}")
            elif figure[0] not in recorded and page != "docs/measured.md":
                wrong.append(f"{page}: {figure[0]} is no figure of {passage.experiments or 'a result'}, nor one "
                             f"docs/measured.md records: {where}")
    return wrong, checked


def default_run_errors(page: str, text: str, known: dict[str, Experiment]) -> tuple[list[str], int]:
    """The default run's MPP accuracy, most-frequent-class score and loss, where a passage cites its metrics.json."""
    metrics, wrong, checked = known[DEFAULT_RUN].results, [], 0
    expected = {r"MPP accuracy (\d+\.\d+)%": metrics["mpp_accuracy"],
                r"most frequent[^.;|]*? scores (\d+\.\d+)%": metrics["mpp_majority_class_accuracy"]}
    for passage in passages_of(page, text):
        if DEFAULT_RUN not in passage.experiments:
            continue
        for pattern, value in expected.items():
            for found in re.finditer(pattern, passage.text):
                checked += 1
                if found[1] != f"{100 * value:.{len(found[1].split('.')[1])}f}":
                    wrong.append(f"{page}: {found[0]}, where metrics.json gives {100 * value:.4f}%")
        for found in re.finditer(r"\bloss (\d+\.\d+)", passage.text):
            checked += 1
            if found[1] != f"{metrics['loss']:.{len(found[1].split('.')[1])}f}":
                wrong.append(f"{page}: {found[0]}, where metrics.json gives loss {metrics['loss']:.4f}")
    return wrong, checked


def wall_time_errors(page: str, text: str, known: dict[str, Experiment]) -> tuple[list[str], int]:
    """The results page's ``wall_seconds`` and measured.md's runs, minutes of wall time and percentages, against the
    experiment's results.json and tables."""
    wrong, checked = [], 0
    for passage in passages_of(page, text):
        about = [known[name] for name in passage.experiments if name != DEFAULT_RUN]
        if len(about) != 1:
            continue
        experiment = about[0]
        seconds = experiment.results["wall_seconds"]
        for found in re.finditer(r"`wall_seconds`(?: in `results\.json` is)? (\d[\d,]*)", passage.text):
            checked += 1
            if int(found[1].replace(",", "")) != round(seconds):
                wrong.append(f"{page}: {found[0]}, where {experiment.name}'s results.json gives {seconds:.1f}")
        if page != "docs/measured.md":
            continue
        runs, minutes = re.search(r"\b(\d[\d,]*) runs\b", passage.text), re.search(
            r"\bin (\d+) min of wall time", passage.text)
        checked += 2
        if not runs or int(runs[1].replace(",", "")) != experiment.results["runs"]:
            wrong.append(f"{page}: {experiment.name} ran {experiment.results['runs']} runs: {passage.text[:80]}")
        if not minutes or int(minutes[1]) != round(seconds / 60):
            wrong.append(f"{page}: {experiment.name} took {seconds / 60:.0f} min of wall time: {passage.text[:80]}")
        for found in re.finditer(r"(?<![\d.])(?<!± )(\d+\.\d)%", passage.text):
            checked += 1
            if found[1] not in experiment.means:
                wrong.append(f"{page}: {found[0]} is no figure of {experiment.name}'s tables: "
                             f"{excerpt(passage.text, found.start(), found.end())}")
    return wrong, checked


PAGES = ["README.md", "docs/results.md", "docs/measured.md"]


@pytest.fixture(scope="module")
def known() -> dict[str, Experiment]:
    return experiments()


@pytest.mark.parametrize("page", PAGES)
def test_every_interval_quoted_is_a_cell_of_its_own_experiment_with_its_verdict_p_value_and_holm(page, known):
    wrong, checked = interval_errors(page, (ROOT / page).read_text(), known)
    assert not wrong, "\n".join(wrong)
    assert checked >= {"README.md": 1, "docs/results.md": 100, "docs/measured.md": 10}[page]


@pytest.mark.parametrize("page", PAGES)
def test_every_p_value_and_holm_statement_is_one_the_tables_give(page, known):
    wrong = holm_and_p_errors(page, (ROOT / page).read_text(), known)
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("page", ["docs/results.md", "docs/measured.md"])
def test_every_mean_and_sd_quoted_is_a_figure_of_its_experiment(page, known):
    wrong, checked = spread_errors(page, (ROOT / page).read_text(), known)
    assert not wrong, "\n".join(wrong)
    assert checked >= 10


@pytest.mark.parametrize("page", ["docs/results.md", "docs/measured.md"])
def test_wall_times_runs_and_the_default_runs_figures_are_the_files(page, known):
    text = (ROOT / page).read_text()
    wrong, checked = wall_time_errors(page, text, known)
    default_wrong, default_checked = default_run_errors(page, text, known)
    assert not wrong + default_wrong, "\n".join(wrong + default_wrong)
    assert checked >= 5 and default_checked >= 2


def test_every_passage_of_the_results_page_that_quotes_an_interval_is_about_an_experiment():
    """The rule that ties a reading to its experiment, on passages of each kind."""
    passages = [passage for passage in results_page_passages(PAGE.read_text()) if BRACKETS.search(passage.text)]

    def about(opening: str) -> list[str]:
        [passage] = [passage for passage in passages if passage.text.startswith(opening)]
        return passage.experiments

    assert about("- **Fine-tuned, MPP against scratch") == ["reproduce-fashion-mnist-cpu"]  # the section it follows
    assert about("- **The data.**") == ["reproduce-shapes-cpu"]  # a link to the section's heading
    assert about("- **Perhaps not the method.**") == [  # a link to a heading over two sections
        "reproduce-openclipart-cpu", "reproduce-openclipart-64-cpu"]
    assert about("The second command's output") == ["curve-openclipart-cpu"]  # named by its preset
    assert about("The default run") == [DEFAULT_RUN]  # by its results folder
    assert [passage.text[:60] for passage in passages if not passage.experiments] == []


# Each check, made to fail: one figure of a page changed in a copy, and the check that must see it.
BROKEN = [
    ("docs/results.md", "an interval moved to another experiment's reading", interval_errors,
     "  shown, at 25; through the [class] token +0.2 [-0.3, +0.7], not shown",
     "  shown, at 25; through the [class] token +13.0 [+7.4, +18.7], shown"),
    ("docs/results.md", "a verdict", interval_errors, "+0.4 [-1.7, +2.5], not shown (p 0.53; a power of 0.8",
     "+0.4 [-1.7, +2.5], shown (p 0.53; a power of 0.8"),
    ("docs/results.md", "a p-value", interval_errors, "shown (p 0.0038; fails Holm)", "shown (p 0.038; fails Holm)"),
    ("docs/results.md", "a Holm verdict", interval_errors, "+9.3], shown (p 0.0038; fails Holm)",
     "+9.3], shown (p 0.0038; stays shown after Holm)"),
    ("docs/results.md", "a shown interval without its Holm verdict", interval_errors,
     "+9.3], shown (p 0.0038; fails Holm)", "+9.3], shown (p 0.0038)"),
    ("docs/results.md", "a Holm statement in other words", holm_and_p_errors, "+9.3], shown (p 0.0038; fails Holm)",
     "+9.3], shown (p 0.0038), not after the Holm correction"),
    ("docs/results.md", "a Holm count", holm_and_p_errors, "Two of the table's 21 comparisons stay shown",
     "Two of the table's 44 comparisons stay shown"),
    ("docs/results.md", "a Holm count's number kept", holm_and_p_errors, "Two of the table's 21 comparisons stay shown",
     "Three of the table's 21 comparisons stay shown"),
    ("docs/results.md", "a p-value away from its interval", holm_and_p_errors, "(p 0.0038; fails Holm)",
     "(fails Holm; p 0.0038)"),
    ("docs/results.md", "a mean ± SD", spread_errors, "scores 18.1 ± 1.0%", "scores 18.1 ± 1.3%"),
    ("docs/results.md", "a wall time", wall_time_errors, "`wall_seconds` 602)", "`wall_seconds` 601)"),
    ("docs/results.md", "the default run's MPP accuracy", default_run_errors, "MPP accuracy 33.54%",
     "MPP accuracy 33.56%"),
    ("README.md", "an interval given to another column", interval_errors, "(on shapes it", "(on Fashion-MNIST it"),
    ("README.md", "a Holm family", interval_errors, "fails Holm across its 38", "fails Holm across its 13"),
    ("docs/measured.md", "a like-with-like figure read unlike", interval_errors,
     "+9.6 [+6.0, +13.3], shown (p 0.0077; fails Holm)", "+5.4 [+1.9, +8.9], shown (p 0.022; fails Holm)"),
    ("docs/measured.md", "an interval of the wrong experiment", interval_errors,
     "balanced, -4.1 [-7.3, -0.9], the opposite shown", "balanced, -0.7 [-5.7, +4.3], not shown"),
    ("docs/measured.md", "a mean ± SD", spread_errors, "63.9 ± 1.3%", "63.9 ± 1.4%"),
    ("docs/measured.md", "a percentage", wall_time_errors, "kNN on all pixels 46.8%", "kNN on all pixels 46.9%"),
    ("docs/measured.md", "minutes of wall time", wall_time_errors, "in 41 min of wall time", "in 40 min of wall time"),
    ("docs/measured.md", "the default run's MPP accuracy", default_run_errors, "loss 2.369, MPP accuracy 33.54%",
     "loss 2.369, MPP accuracy 33.56%"),
    ("docs/measured.md", "the default run's loss", default_run_errors, "loss 2.369,", "loss 2.367,"),
]


@pytest.mark.parametrize("page, what, check, good, bad", BROKEN, ids=[f"{row[0]}: {row[1]}" for row in BROKEN])
def test_each_check_fails_when_a_figure_is_changed(page, what, check, good, bad, known):
    text = (ROOT / page).read_text()
    assert text.count(good) == 1, f"{page} no longer reads {good!r}: choose another figure to change"
    result = check(page, text.replace(good, bad), known)
    assert result[0] if isinstance(result, tuple) else result, f"changing {what} went unseen"


def test_the_default_runs_comparison_is_what_its_log_printed():
    metrics = default_run_metrics()["few_shot_comparison"]
    recomputed = paired_difference(metrics["trained"], metrics["at_init"])
    assert [recomputed.mean, recomputed.low, recomputed.high] == pytest.approx(
        [metrics["gain_mean"], *metrics["gain_interval"]])


def test_no_page_says_how_many_seeds_would_settle_a_comparison_only_the_power_a_plan_would_have():
    # "N seeds would settle it" read as a promise; at those seeds a true mean that size is shown only about half the
    # time. A seed count beside a result is the plan for a power of 0.8 at 5%, and says so.
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "results").glob("*/*.md"))]:
        text = " ".join(path.read_text().split())
        assert not re.search(r"would settle|settle[sd]? it", text), f"{path.name} says seeds would settle a result"
        for planned in re.finditer(r"\d+ (?:seeds|draws)\b[^.;)]*at th(?:is|ese) means?", text):
            before = text[max(0, planned.start() - 40):planned.end()]
            assert re.search(r"power (?:of )?0\.8", before), f"{path.name}: {before!r}"
