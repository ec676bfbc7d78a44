"""Every command the README and docs/ show runs as written, every link between them leads somewhere, and the front
page's results are those the experiments wrote.

A command is a line of a code block, or an inline code span, that runs a script of recipes/ or eval/ (by `python`,
`accelerate launch`, `torchrun` or `sbatch recipes/slurm.sbatch`) or a module of the package or the checkout
(`python -m mpp...`, `python -m study...`, `python -m tools...`). Its script or module must exist, and its arguments
must parse without anything being run: a recipe's (or a study module's) preset and `key=value` overrides into its
config (by its own `cli`, with the run left out), another module's flags by its own argument parser (a module named
without arguments only has to exist). A value the reader fills in is marked `<like this>` (or
`key=...`): a preset so marked is not read, a text override so marked is parsed with a stand-in value, any
other override so marked has its key checked, and in a module's arguments
it stands for 1. `[...]` marks what may be left out, and `...` more of the same. Shell variables set in the same
code block (`C="--config ..."`) are expanded.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import re
import runpy
import shlex
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from mpp import command_line
from mpp.commands import COMMANDS as command_table
from mpp.config.building import config_keys, parse_command_line
from mpp.errors import ConfigError
from mpp.experiments.publishing import percent
from tests.launching import load_script

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDER = "__placeholder__"
CODE_BLOCK = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE_CODE = re.compile(r"`([^`]+)`")
ASSIGNMENT = re.compile(r'^([A-Za-z_]\w*)="([^"]*)"$')
ENVIRONMENT_VARIABLE = re.compile(r"^[A-Z_][A-Z0-9_]*=")
MODULES = ("mpp", "study", "tools")  # the package's, and the checkout's beside it
STARTS = re.compile(r"(^|\s)(accelerate launch|torchrun|sbatch|(\S*/)?python3? (-m (mpp|study|tools)\b|recipes/|eval/)"
                    r")")


@dataclass(frozen=True)
class Command:
    page: str
    text: str  # as the page shows it
    program: tuple[str, ...]  # ("script", "recipes/mpp.py") or ("module", "mpp.benchmark")
    arguments: tuple[str, ...]  # placeholders as PLACEHOLDER, optional-part brackets removed

    def __str__(self) -> str:
        return f"{self.page}: {self.text}"


def shell_lines(page_text: str) -> list[str]:
    """The page's code-block lines (continuations joined, variables set in the block expanded) and inline spans."""
    found = []
    for block in CODE_BLOCK.findall(page_text):
        variables: dict[str, str] = {}
        for line in block.replace("\\\n", " ").splitlines():
            statements = [part.strip() for part in line.split(";")]
            assigned = [ASSIGNMENT.match(part) for part in statements]
            if all(assigned) and statements != [""]:
                variables.update(match.groups() for match in assigned)
                continue
            for name, value in variables.items():
                line = line.replace("${" + name + "}", value).replace("$" + name, value)
            found.append(line)
    prose = CODE_BLOCK.sub("", page_text)
    found += [span.replace("\n", " ") for span in INLINE_CODE.findall(prose)]
    return [line for line in found if STARTS.search(line)]


def without_brackets(token: str) -> str:
    """``[--resume]`` -> ``--resume``: the brackets of an optional part, not those of a value (``data.mean=[0.5]``)."""
    if token.startswith("["):
        token = token[1:]
    while token.endswith("]") and token.count("]") > token.count("["):
        token = token[:-1]
    return token


def commands_of(page: Path) -> list[Command]:
    commands = []
    for line in shell_lines(page.read_text()):
        marked = re.sub(r"<[^<>]+>|(?<=\S)\.\.\.", PLACEHOLDER, line)  # <run dir>, output_dir=...
        lexer = shlex.shlex(marked, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split, lexer.commenters = True, "#"
        tokens, segment = [], []
        for token in [*lexer, ";"]:
            if token in {";", "&&", "||", "|", "&"}:
                tokens.append(segment)
                segment = []
            else:
                segment.append(token)
        for segment in tokens:
            command = parse_segment(segment)
            if command:
                commands.append(Command(page.relative_to(ROOT).as_posix(), line.strip(), *command))
    return commands


def parse_segment(tokens: list[str]) -> tuple[tuple[str, str], tuple[str, ...]] | None:
    """(program, arguments) of one shell command, or None where it runs nothing of this repository."""
    tokens = [without_brackets(token) for token in tokens]
    tokens = [token for token in tokens if token not in {"", "..."}]
    while tokens and (ENVIRONMENT_VARIABLE.match(tokens[0]) or tokens[0] in {"sudo", "nohup"}):
        tokens = tokens[1:]
    if tokens[:1] == ["timeout"]:
        tokens = tokens[2:]
    if not tokens:
        return None
    program = Path(tokens[0]).name
    if program.startswith("python") and tokens[1:2] == ["-m"]:
        return (("module", tokens[2]), tuple(tokens[3:])) if tokens[2].split(".")[0] in MODULES else None
    if program.startswith("python") or program in {"accelerate", "torchrun", "sbatch"}:
        module_style = "--module" in tokens  # accelerate launch --module recipes.mpp
        for index, token in enumerate(tokens[1:], start=1):
            if token in ("-m", "--module") and tokens[index + 1:index + 2] == ["mpp"]:  # accelerate launch -m mpp
                return ("module", "mpp"), tuple(tokens[index + 2:])
            if token.endswith(".py") or (module_style and re.fullmatch(r"(recipes|eval)\.\w+", token)):
                script = token if token.endswith(".py") else token.replace(".", "/") + ".py"
                return ("script", script), tuple(tokens[index + 1:])
    return None


COMMANDS = [command for page in PAGES for command in commands_of(page)]


class ParsedArguments(Exception):
    """Raised in place of running a module, once its argument parser has accepted the arguments."""


def key_annotations(config_class: type, prefix: str = "") -> dict[str, Any]:
    """Every dotted key of a config dataclass and the type it is declared with."""
    found = {}
    for name, annotation in typing.get_type_hints(config_class).items():
        if name not in {field.name for field in dataclasses.fields(config_class)}:
            continue  # a ClassVar
        if dataclasses.is_dataclass(annotation):
            found.update(key_annotations(annotation, prefix=f"{prefix}{name}."))
        else:
            found[f"{prefix}{name}"] = annotation
    return found


def check_recipe(cli: Callable[[], None], arguments: tuple[str, ...], monkeypatch: pytest.MonkeyPatch,
                 module: Any = None) -> None:
    """A command line (a script's or a study module's ``cli``, or a command of ``python -m mpp``) parses
    ``arguments`` into its config; ``run_recipe`` is replaced so nothing runs."""
    arguments = list(arguments)
    if "--config" in arguments:
        at = arguments.index("--config")
        if PLACEHOLDER in arguments[at + 1]:  # a preset the reader chooses: the recipe's default stands in
            del arguments[at:at + 2]

    def parse_only(main, config_class, default_preset, description, *unused, **unused_too):
        # A text value the reader fills in (data.source=folder:<images>, init=<run dir>) is parsed with a stand-in,
        # so that a preset that needs it is checked with it; any other filled-in argument only by its key.
        text_keys = {key for key, annotation in key_annotations(config_class).items() if annotation is str}
        filled_in, checked = [], []
        for argument in arguments:
            key, _, value = argument.partition("=")
            if PLACEHOLDER not in argument:
                checked.append(argument)
            elif key in text_keys:
                checked.append(f"{key}={value.replace(PLACEHOLDER, 'filled-in')}")
            else:
                filled_in.append(argument)
        parse_command_line(config_class, checked, str(default_preset), description=description)
        keys = config_keys(config_class)
        for argument in filled_in:  # <overrides>, <key>=<value>, init=<run dir>
            key = argument.partition("=")[0]
            assert key in keys or key.startswith(PLACEHOLDER), f"{argument}: not a key of {keys}"

    monkeypatch.setattr(command_line, "run_recipe", parse_only)
    if module is not None and hasattr(module, "run_recipe"):  # a study's module, which imported it by name
        monkeypatch.setattr(module, "run_recipe", parse_only)
    try:
        cli()
    except SystemExit as stop:  # --help
        assert stop.code in (0, None), f"the command line was refused (exit {stop.code})"


def check_module(name: str, arguments: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """The module's own argument parser accepts ``arguments``; it is stopped there, before it does anything."""
    name = name.split("." + PLACEHOLDER)[0]  # python -m tools.<name>: the package must exist
    assert importlib.util.find_spec(name) is not None, f"no module {name}"
    if not arguments:  # the module named in the text, not a command line to run
        return
    if name == "mpp":  # python -m mpp <command> ...: a command of the table
        if arguments[0] in ("-h", "--help"):  # the table itself
            with pytest.raises(SystemExit) as stop:
                command_line.main([arguments[0]])
            assert stop.value.code == 0
        elif PLACEHOLDER not in arguments[0]:
            assert arguments[0] in command_table, f"{arguments[0]} is not a command of mpp/commands.py"
            check_recipe(lambda: command_line.run_command(arguments[0], ["-m", "mpp", arguments[0]], []),
                         arguments[1:], monkeypatch)
        return
    module = importlib.import_module(name)
    if hasattr(module, "run_recipe"):  # a study's experiment: a recipe's command line
        check_recipe(module.cli, arguments, monkeypatch, module)
        return
    parse_args = argparse.ArgumentParser.parse_args

    def parse_and_stop(parser, args=None, namespace=None):
        parse_args(parser, args, namespace)
        raise ParsedArguments

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_and_stop)
    monkeypatch.delitem(sys.modules, name, raising=False)  # run_module runs it afresh as __main__
    monkeypatch.setattr(sys, "argv", [name, *(argument.replace(PLACEHOLDER, "1") for argument in arguments)])
    try:
        runpy.run_module(name, run_name="__main__", alter_sys=True)
    except ParsedArguments:
        return
    except SystemExit as stop:  # --help
        assert stop.code in (0, None), f"the command line was refused (exit {stop.code})"
        return
    pytest.fail(f"{name} did not parse a command line")


def test_the_pages_show_commands_of_every_kind():
    kinds = {command.program for command in COMMANDS}
    assert {("script", "recipes/mpp.py"), ("script", "recipes/finetune.py"), ("script", "eval/few_shot.py"),
            ("module", "study.reproduce"), ("module", "mpp.benchmark"), ("module", "mpp.data.prepare")} <= kinds
    assert len(COMMANDS) > 50


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: f"{command.page}:{command.text[:60]}")
def test_every_command_shown_exists_and_its_arguments_parse(command, monkeypatch):
    monkeypatch.chdir(ROOT)  # the pages name presets from the repository root
    kind, target = command.program
    try:
        if kind == "module":
            check_module(target, command.arguments, monkeypatch)
        else:
            script = ROOT / target
            assert script.is_file(), f"{command}: no file {target}"
            if script.parent.name in {"recipes", "eval"} and script.suffix == ".py":
                check_recipe(load_script(script, f"docs_check_{script.stem}").cli, command.arguments, monkeypatch)
    except (ConfigError, AssertionError) as error:
        pytest.fail(f"{command}\n{error}")


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def anchors_of(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#{1,6} (.+)$", CODE_BLOCK.sub("", page.read_text()), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_every_link_between_the_pages_and_to_the_repository_leads_somewhere():
    broken = []
    for page in PAGES:
        for target in LINK.findall(CODE_BLOCK.sub("", page.read_text())):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and anchor not in anchors_of(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


FRONT_PAGE_EXPERIMENTS = {"Fashion-MNIST": "reproduce-fashion-mnist-cpu", "Shapes": "reproduce-shapes-cpu",
                          "Clip art, 32 px": "reproduce-openclipart-cpu",
                          "Clip art, 64 px": "reproduce-openclipart-64-cpu"}
FRONT_PAGE_ROWS = {"from scratch": "scratch", "MPP, 3-bit mean colour, 50% corrupted": "mpp-colour-50",
                   "supervised, all labels": "supervised",
                   "logistic regression on the raw pixels": "linear_probe_labelled"}
CHANCE_ROW = "chance (any one class always)"


def front_page_results_table() -> str:
    """The front page's results table, computed from each experiment's results/<experiment>/results.json: balanced
    accuracy (clip art's classes are unbalanced), so every column reads against the same chance."""
    results = {column: json.loads((ROOT / "results" / name / "results.json").read_text())
               for column, name in FRONT_PAGE_EXPERIMENTS.items()}
    lines = ["| Fine-tuned from | " + " | ".join(FRONT_PAGE_EXPERIMENTS) + " |",
             "|---|" + "---:|" * len(FRONT_PAGE_EXPERIMENTS)]
    for label, row in FRONT_PAGE_ROWS.items():
        cells = [percent(result["pixels"][f"{row}_balanced"] if row in result["pixels"]
                         else result["rows"][row]["finetune_balanced_accuracy"]) for result in results.values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append(f"| {CHANCE_ROW} | " + " | ".join(f"{100 / result['classes']:.1f}"
                                                  for result in results.values()) + " |")
    return "\n".join(lines) + "\n"


def test_the_front_pages_sentence_on_its_results_holds_for_their_intervals():
    """"fine-tuned MPP is not shown ahead of a ViT trained from scratch as long in any of the four (on shapes it is
    behind, <interval>), nor of logistic regression on the raw pixels of the real images": each recomputed from
    results.json in balanced accuracy, the table's figure."""
    from mpp.evaluation.statistics import paired_difference

    readme = (ROOT / "README.md").read_text()
    for column, name in FRONT_PAGE_EXPERIMENTS.items():
        result = json.loads((ROOT / "results" / name / "results.json").read_text())
        mpp = result["rows"]["mpp-colour-50"]["finetune_balanced_accuracy"]
        against_scratch = paired_difference(mpp, result["rows"]["scratch"]["finetune_balanced_accuracy"], scale=100)
        assert not (against_scratch.shown and against_scratch.mean > 0), column
        if column == "Shapes":  # the one shown the other way, quoted with its interval
            assert against_scratch.shown and against_scratch.mean < 0
            assert (f"{against_scratch.mean:+.1f} [{against_scratch.low:+.1f}, {against_scratch.high:+.1f}], the "
                    "opposite shown") in " ".join(readme.split())
        else:
            pixels = result["pixels"]["linear_probe_labelled_balanced"]
            against_pixels = paired_difference(mpp, pixels, scale=100)
            assert not (against_pixels.shown and against_pixels.mean > 0), column


def test_the_front_pages_table_says_over_how_many_seeds_and_labels_its_figures_are():
    """"mean ± SD over 3 seeds (5 on shapes), on 100 labelled images per class (50 on clip art)": each column's
    seeds and labelled images per class as its results.json gives them."""
    said = re.search(r"mean ± SD over (\d+) seeds \((\d+) on shapes\), on (\d+) labelled images per class \((\d+) on "
                     r"clip art\)", " ".join((ROOT / "README.md").read_text().split()))
    assert said, "the front page's table no longer says over how many seeds and labelled images it is"
    seeds, shapes_seeds, labelled, clip_art_labelled = map(int, said.groups())
    for column, name in FRONT_PAGE_EXPERIMENTS.items():
        result = json.loads((ROOT / "results" / name / "results.json").read_text())
        assert len(result["seeds"]) == (shapes_seeds if column == "Shapes" else seeds), column
        clip_art = column.startswith("Clip art")
        assert result["labelled_per_class"] == (clip_art_labelled if clip_art else labelled), column


def test_the_front_page_is_short_and_narrow():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 90, f"README.md has {len(lines)} lines; the front page keeps to 90 (details go to docs/)"
    assert [n for n, line in enumerate(lines, 1) if len(line) > 120] == []


def test_the_front_pages_results_are_those_the_experiments_wrote():
    assert front_page_results_table() in (ROOT / "README.md").read_text(), (
        "README.md's results table differs from results/*/results.json; it should read:\n" + front_page_results_table())


def test_the_package_its_citation_and_an_exports_card_give_the_version_pyproject_gives():
    import tomllib

    import mpp
    from mpp.models.model_card import PACKAGE_CITATION

    assert mpp.__version__ == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"\nversion: {mpp.__version__}\n" in (ROOT / "CITATION.cff").read_text()
    assert f"  version = {{{mpp.__version__}}},\n" in PACKAGE_CITATION


COMMIT = re.compile(r"(?<![\w#./-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w/-])")  # 7+ hex digits
USER_PAGES = [page for page in PAGES if page.parent.name == "docs" and page.name != "measured.md"
              or page.name == "README.md"]


def test_every_file_the_layout_table_names_is_in_the_folder_its_row_stands_in():
    """A name without a folder in the table's first column is in its section's folder (a bold row), or beside the
    first name of its cell that has one; so a file renamed or moved fails here, not only a path written out whole."""
    section, missing, rows = ROOT, [], 0
    for line in (ROOT / "docs" / "layout.md").read_text().splitlines():
        if not line.startswith("| ") or line.startswith("| ---") or line.startswith("| Where"):
            continue
        rows += 1
        first = line.split(" | ")[0]
        names = re.findall(r"`([\w./-]+)`", first)
        if first.startswith("| **"):
            folder = ROOT / names[0]
            section = folder if names[0].endswith("/") else ROOT
            missing += [] if folder.exists() else [names[0]]
            continue
        folder = section
        for name in names:
            path = ROOT / name if "/" in name else folder / name
            folder = path.parent
            missing += [] if path.exists() else [str(path.relative_to(ROOT))]
    assert rows > 40 and missing == [], f"docs/layout.md names files that are not there: {missing}"


PRESET_NAME = re.compile(r"\b(?:mpp|finetune|supervised|eval|compare|reproduce|confirm|curve)_[a-z0-9_]+?"
                         r"(?:\.yaml\b|_(?:cpu|gpu|paper)\b)")


def test_every_preset_named_in_the_code_and_the_pages_exists():
    """Presets live in mpp/presets/ (the package's) and study/configs/ (the study's); the changelog may name a preset
    of an earlier version."""
    presets = {path.stem for folder in (ROOT / "mpp" / "presets", ROOT / "study" / "configs")
               for path in folder.glob("*.yaml")}
    files = [*(page for page in PAGES if page.name != "CHANGELOG.md"),
             *(path for folder in ("mpp", "recipes", "eval", "study", "tools", ".ci") for path in
               (ROOT / folder).rglob("*") if path.suffix in {".py", ".yaml", ".sbatch", ".md", ""} and path.is_file())]
    named = {(path.relative_to(ROOT).as_posix(), name.removesuffix(".yaml"))
             for path in files for name in PRESET_NAME.findall(path.read_text(errors="replace"))}
    assert len({name for _, name in named}) > 20
    assert sorted((where, name) for where, name in named if name not in presets) == []


def test_no_user_page_names_a_commit():
    """What was measured at which commit is history, kept in docs/measured.md (and CHANGELOG.md); a user page reads
    it as a fact about their own copy."""
    named = [f"{page.relative_to(ROOT)}:{number}: {found}" for page in USER_PAGES
             for number, line in enumerate(page.read_text().splitlines(), 1) for found in COMMIT.findall(line)]
    assert not named, "commits named on user pages (move them to docs/measured.md):\n" + "\n".join(named)
    assert COMMIT.findall("measured at 9b91d4d (see 0.982, 1e-4, #1f77b4, vit_b16)") == ["9b91d4d"]


def test_the_front_pages_table_of_commands_is_the_packages():
    """README's table names every command of mpp/commands.py, each once, with its summary and default preset (the
    frozen-encoder protocols share a row)."""
    section = (ROOT / "README.md").read_text().split("## Commands")[1].split("\n## ")[0]
    rows = [line.split("|")[1:4] for line in section.splitlines() if line.startswith("| `")]
    named = [(name, what.strip(), preset.strip().strip("`"), len(re.findall(r"`(\w+)`", names)))
             for names, what, preset in rows for name in re.findall(r"`(\w+)`", names)]
    assert sorted(name for name, *_ in named) == sorted(command_table)  # each once
    for name, what, preset, sharing in named:
        assert preset == command_table[name].preset, name
        assert sharing > 1 or what == command_table[name].summary, name  # a row of its own: the table's summary
