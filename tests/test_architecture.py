"""The package's structure: no import cycle anywhere in mpp/, and imports that flow one way, down the layers.

Every ``import`` counts, at module level or inside a function, since a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Optional

PACKAGE = Path(__file__).parents[1] / "mpp"
# A module may import modules of its own unit (a sub-package, or the module itself) and of earlier layers; never a
# later layer, never another unit of its own layer.
LAYERS = (
    ("mpp.commands", "mpp.errors", "mpp.presets"),  # what every layer reads: the table of commands (each one's
    # function, config and presets, by name), the errors every layer raises, the presets' files (no code)
    ("mpp.config", "mpp.images", "mpp.metrics", "mpp.private_apis"),
    # typed configs, their loading from presets and overrides and their --help; raw images and their per-image random
    # draws; accuracy per class; the libraries' private APIs
    ("mpp.run",),  # what every run has: its accelerator, its directory, its start and end
    ("mpp.data", "mpp.models"),  # images in; the ViT and its objectives
    ("mpp.training", "mpp.evaluation"),  # the training loop; frozen-encoder protocols and pictures
    ("mpp.command_line", "mpp.experiments"),  # what entry points share; experiments over the recipes (subprocesses)
    ("mpp.recipes",),  # each recipe's run, and the recipes and comparisons called from Python
    ("mpp.benchmark",),  # tools beside the library: nothing imports them
    ("mpp.__main__",),  # python -m mpp <command>
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``path`` imports: ``from a.b import c`` counts as a.b.c where that is a module."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1 parents
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base
                                                                                                  else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found |= {name for name in names if name in known}
    return found - {module_name(path)}


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported_modules(path, known) for name, path in known.items()}


def find_cycle(graph: dict[str, set[str]]) -> Optional[list[str]]:
    """One import cycle of ``graph`` (its modules in order, the first repeated at the end), or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> Optional[list[str]]:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(graph.get(node, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        path.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        cycle = visit(start)
        if cycle:
            return cycle
    return None


def unit_of(module: str) -> str:
    """The layer entry a module belongs to: the longest one it equals or lies inside."""
    units = [unit for layer in LAYERS for unit in layer if module == unit or module.startswith(unit + ".")]
    if not units:
        raise AssertionError(f"{module} is in no layer of tests/test_architecture.py: place it in one")
    return max(units, key=len)


def layer_of(unit: str) -> int:
    return next(index for index, layer in enumerate(LAYERS) if unit in layer)


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"x"}}) == ["x", "x"]


def test_no_module_of_the_package_is_part_of_an_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_imports_flow_down_the_layers():
    wrong = []
    for module, targets in sorted(import_graph().items()):
        if module == "mpp":  # the package's own __init__: its version, a map of the package and the Python API
            wrong += [f"mpp imports {target}" for target in sorted(targets) if target != "mpp.recipes.python_api"]
            continue
        unit = unit_of(module)
        for target in sorted(targets):
            other = unit_of(target)
            if other != unit and layer_of(other) >= layer_of(unit):
                where = "its own layer" if layer_of(other) == layer_of(unit) else "a later layer"
                wrong.append(f"{module} imports {target} ({where})")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_nothing_imports_the_benchmarks():
    importers = {module for module, targets in import_graph().items() if any(unit_of(target) == "mpp.benchmark"
                                                                            for target in targets)}
    assert {module for module in importers if unit_of(module) != "mpp.benchmark"} == set()


def checkout_paths(path: Path) -> list[str]:
    """The string constants of ``path`` (docstrings left out) that run pytest, name the tests folder, or name the
    recipes folder as a whole (a preset file named as a default, or a recipe script an experiment runs, is fine)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
                  and isinstance(node.value, ast.Constant)}
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings and (node.value == "pytest" or node.value.rstrip("/") in (
                "tests", "recipes", "recipes/configs") or node.value.startswith("tests/"))]


def test_nothing_in_the_package_runs_the_tests_or_lists_the_recipes():
    """What needs a checkout (the GPU acceptance run, the presets page, one experiment's analyses) lives in tools/,
    outside the installed package."""
    found = {name: paths for name, path in modules().items() if (paths := checkout_paths(path))}
    assert not found, f"modules that need a checkout, for tools/: {found}"
    assert checkout_paths(Path(__file__).parents[1] / "tools" / "gpu.py")  # the check sees what it looks for


def test_no_two_modules_share_a_name_in_different_roles():
    """The package, the entry points (recipes/, eval/) and tools/ name each module once: ``few_shot`` is the command,
    ``few_shot_regression`` the protocol. ``config`` is the one name shared, by the package's configs and the
    experiments' beside them: the same role."""
    root = Path(__file__).parents[1]
    names: dict[str, list[str]] = {}
    for folder in ("mpp", "recipes", "eval", "tools", "study"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.stem not in ("__init__", "__main__"):
                names.setdefault(path.stem, []).append(str(path.relative_to(root)))
    shared = {name: paths for name, paths in names.items() if len(paths) > 1 and name != "config"}
    assert not shared, f"one name, two modules: {shared}"


def test_the_library_never_imports_the_study_or_the_tools_beside_it():
    """study/ (this package's own published tests) and tools/ use the package; nothing in mpp/ imports them."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            outside = [name for name in names if name.split(".")[0] in ("study", "tools")]
            if outside:
                found[module_name(path)] = outside
    assert not found, f"the library imports what lives beside it: {found}"


def test_the_study_and_the_tools_use_no_private_name_of_the_package():
    """study/ and tools/ reach mpp by its named modules and names: no ``_private`` module or name, and the libraries'
    private APIs only through mpp/private_apis.py (tests/test_private_apis.py)."""
    root = Path(__file__).parents[1]
    found = {}
    for path in sorted([*(root / "study").rglob("*.py"), *(root / "tools").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mpp":
                names = [*node.module.split("."), *(alias.name for alias in node.names)]
            elif isinstance(node, ast.Import):
                names = [part for alias in node.names if alias.name.split(".")[0] == "mpp"
                         for part in alias.name.split(".")]
            else:
                continue
            private = [name for name in names if name.startswith("_") and not name.startswith("__")]
            if private:
                found[str(path.relative_to(root))] = private
    assert not found, f"private names of the package used beside it: {found}"


def imports_beside_the_package() -> list[tuple[str, str, str]]:
    """(file, module, name) of every name study/ and tools/ import from the package."""
    root = Path(__file__).parents[1]
    found = []
    for path in sorted([*(root / "study").rglob("*.py"), *(root / "tools").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mpp":
                found += [(str(path.relative_to(root)), node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                found += [(str(path.relative_to(root)), alias.name, "") for alias in node.names
                          if alias.name.split(".")[0] == "mpp"]
    return found


def test_the_study_and_the_tools_import_only_what_a_module_declares():
    """study/ and tools/ reach the package through its declared API: each name they import is in its module's
    ``__all__``, which is widened there, on purpose, where they need more; no bare ``import mpp.<module>``."""
    found = imports_beside_the_package()
    assert len(found) > 50  # the check sees what it looks for
    undeclared = [f"{file}: from {module} import {name}" for file, module, name in found
                  if name not in getattr(importlib.import_module(module), "__all__", ())]
    assert not undeclared, "names used beside the package that their module does not declare:\n" + "\n".join(
        undeclared)


def test_every_declared_name_is_defined_in_its_module():
    for module in [name for name in modules() if not name.endswith("__main__")]:  # a __main__ runs when imported
        declared = getattr(importlib.import_module(module), "__all__", ())
        assert [name for name in declared if not hasattr(importlib.import_module(module), name)] == [], module
