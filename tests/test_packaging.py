"""The wheel's contents: every subpackage, and the shipped programs and optimizer configs."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_subpackage_is_listed_for_the_wheel():
    listed = {p for p in pyproject()["tool"]["setuptools"]["packages"] if not p.startswith("tide_dspy._shipped")}
    found = {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "tide_dspy").rglob("__init__.py")}
    assert listed == found


def test_the_shipped_folders_map_to_the_top_level_programs_optimizers_and_data():
    setuptools = pyproject()["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"tide_dspy._shipped.programs": "programs",
                                         "tide_dspy._shipped.optimizers": "optimizers",
                                         "tide_dspy._shipped.data": "data"}
    shipped = [p for p in (ROOT / "programs").rglob("*") if p.is_file()]
    assert {p.suffix for p in shipped} <= {".json", ".jsonl"}
    assert {p.suffix for p in (ROOT / "optimizers").iterdir()} == {".yaml"}


def test_every_benchmark_set_file_matches_a_pattern_the_wheel_carries():
    patterns = pyproject()["tool"]["setuptools"]["package-data"]["tide_dspy._shipped.data"]
    data = ROOT / "data"
    sets = [p for p in data.glob("*/v*/*") if p.is_file()]
    assert sets and all(p.name.endswith(".jsonl.xz") for p in sets)
    wanted = [*sets, data / "README.md", *data.glob("*/README.md"), *data.glob("*/SHA256SUMS")]
    carried = {p for pattern in patterns for p in data.glob(pattern)}
    assert set(wanted) <= carried
    assert not {p for p in carried if p.suffix in (".py", ".yaml")}  # the build script and sources stay out


def test_requires_python_is_the_first_version_with_the_tarfile_filter_we_use():
    """GitClone.snapshot extracts `git archive` with tarfile's filter="data", which 3.11.0-3.11.3 do not have."""
    source = (ROOT / "tide_dspy" / "data" / "git_tools.py").read_text()
    assert 'filter="data"' in source
    assert pyproject()["project"]["requires-python"] == ">=3.11.4"
