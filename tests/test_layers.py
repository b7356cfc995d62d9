"""The import structure: shared services sit beneath their users, and no import runs back up."""

from __future__ import annotations

import ast
import functools
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tide_dspy"
ROOT = PACKAGE.parent

# The layers, lowest first: a unit imports only units of lower layers. A new module or subpackage gets a place here.
LAYERS = [
    {"tide_dspy.util", "tide_dspy.schemas", "tide_dspy.lexical", "tide_dspy.workspace_actions"},
    {"tide_dspy.signatures", "tide_dspy.abstraction", "tide_dspy.shipped", "tide_dspy.sandbox"},
    {"tide_dspy.cost"},
    {"tide_dspy.backbones"},
    {"tide_dspy.domains", "tide_dspy.retry", "tide_dspy.refinement", "tide_dspy.tracing", "tide_dspy.batch",
     "tide_dspy.testing"},
    {"tide_dspy.scan", "tide_dspy.templates", "tide_dspy.tracking", "tide_dspy.data"},
    {"tide_dspy.discovery", "tide_dspy.metrics"},
    {"tide_dspy.methods"},
    {"tide_dspy.programs"},
    {"tide_dspy.evaluation", "tide_dspy.product", "tide_dspy.floors"},
    {"tide_dspy.trials"},
    {"tide_dspy.optimize"},
    {"tide_dspy.workflows"},
    {"tide_dspy.cli"},
]
LAYER = {unit: n for n, units in enumerate(LAYERS) for unit in units}


def unit_of(module: str) -> str:
    """The layer unit of a module: its subpackage (tide_dspy.metrics), or itself when it is a top-level module."""
    parts = module.split(".")
    return ".".join(parts[:2])


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imported(path: Path) -> set[str]:
    """The tide_dspy modules a file imports, at any depth (function-level imports count); `from package import
    submodule` names the submodule, `from package import name` the package."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in MODULES else node.module
                         for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m.split(".")[0] == "tide_dspy"}


def imports() -> dict[str, set[str]]:
    """Module -> the tide_dspy modules it imports."""
    return {module: imported(path) for module, path in MODULES.items()}


@functools.cache
def unit_graph() -> dict[str, set[str]]:
    units: dict[str, set[str]] = {}
    for module, targets in imports().items():
        if module == "tide_dspy":  # the package's front door re-exports from every layer
            continue
        units.setdefault(unit_of(module), set()).update(unit_of(t) for t in targets if unit_of(t) != "tide_dspy")
    for unit, targets in units.items():
        targets.discard(unit)
    return units


def test_the_layers_have_no_cycle():
    try:
        tuple(TopologicalSorter(unit_graph()).static_order())
    except CycleError as exc:
        pytest.fail(f"these import each other, so neither sits beneath the other: {' -> '.join(exc.args[1])}")


@pytest.mark.parametrize("low, high", [
    ("tide_dspy.metrics", "tide_dspy.product"),
    ("tide_dspy.metrics", "tide_dspy.cli"),
    ("tide_dspy.metrics", "tide_dspy.workflows"),
    ("tide_dspy.util", "tide_dspy.backbones"),
    ("tide_dspy.backbones", "tide_dspy.discovery"),
    ("tide_dspy.discovery", "tide_dspy.evaluation"),
])
def test_a_shared_service_never_imports_its_users(low, high):
    graph, seen, todo = unit_graph(), set(), [low]
    while todo:
        unit = todo.pop()
        assert unit != high, f"{low} imports {high} (directly or through another layer), which sits above it"
        seen.add(unit)
        todo += [t for t in graph.get(unit, ()) if t not in seen]


def test_every_unit_has_a_layer():
    unplaced = set(unit_graph()) - set(LAYER)
    assert unplaced == set(), f"place {', '.join(sorted(unplaced))} in LAYERS"


def test_no_unit_imports_one_on_its_own_layer_or_above():
    upward = sorted(f"{unit} (layer {LAYER[unit]}) imports {target} (layer {LAYER[target]})"
                    for unit, targets in unit_graph().items() for target in targets
                    if unit in LAYER and target in LAYER and LAYER[target] >= LAYER[unit])
    assert upward == []


def test_the_modules_have_no_cycle():
    graph = {module: {t for t in targets if t in MODULES and t != module} for module, targets in imports().items()}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        pytest.fail(f"these modules import each other: {' -> '.join(exc.args[1])}")


@pytest.mark.parametrize("folder", ["experiments", "examples", "scripts"])
def test_scripts_reach_the_cli_only_through_its_entry_point_and_options(folder):
    """Scripts build on the library; from the CLI they may only run a command (tide_dspy.cli.main) and share its
    option groups (tide_dspy.cli.options)."""
    allowed = {"tide_dspy.cli.main", "tide_dspy.cli.options"}
    reached = {f"{path.relative_to(ROOT)}: {module}" for path in (ROOT / folder).rglob("*.py")
               for module in imported(path) if unit_of(module) == "tide_dspy.cli" and module not in allowed}
    assert reached == set()


def test_util_imports_only_util():
    util = {m: t for m, t in imports().items() if unit_of(m) == "tide_dspy.util"}
    assert {unit_of(t) for targets in util.values() for t in targets} <= {"tide_dspy.util"}


def test_argparse_lives_under_the_cli_only():
    """Options are defined, typed and read in tide_dspy/cli/ (and by the experiment scripts): nowhere else."""
    users = sorted(module for module, path in MODULES.items() if unit_of(module) != "tide_dspy.cli" and any(
        (isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names))
        or (isinstance(node, ast.ImportFrom) and node.module == "argparse")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))))
    assert users == []


def test_every_cli_module_is_at_most_250_lines():
    long = {module: n for module, path in MODULES.items() if unit_of(module) == "tide_dspy.cli"
            for n in [len(path.read_text(encoding="utf-8").splitlines())] if n > 250}
    assert long == {}
