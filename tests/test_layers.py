"""The import structure: shared services sit beneath their users, and no import runs back up."""

from __future__ import annotations

import ast
import functools
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tide_dspy"


def unit_of(module: str) -> str:
    """The layer unit of a module: its subpackage (tide_dspy.metrics), or itself when it is a top-level module."""
    parts = module.split(".")
    return ".".join(parts[:2])


def imports() -> dict[str, set[str]]:
    """Module -> the tide_dspy modules it imports, at any depth (function-level imports count)."""
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        graph[module] = {m for m in found if m.split(".")[0] == "tide_dspy"}
    return graph


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


def test_util_imports_only_util():
    util = {m: t for m, t in imports().items() if unit_of(m) == "tide_dspy.util"}
    assert {unit_of(t) for targets in util.values() for t in targets} <= {"tide_dspy.util"}
