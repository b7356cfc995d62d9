"""Window splitting: related files stay together, every artifact lands in exactly one window, clear errors."""

from __future__ import annotations

import pytest

from tide_dspy.product.windows import WindowTooSmall, make_units, split_windows, window_budget
from tide_dspy.schemas import Artifact


def function(path: str, name: str, tokens: int) -> Artifact:
    """A function whose code is `tokens` tokens long (" a" is one o200k token)."""
    return Artifact(id=f"{path}::{name}", kind="function",
                    payload={"path": path, "qualname": name, "start_line": 1, "end_line": 2, "code": " a" * tokens})


def render(a: Artifact) -> str:
    return a.payload["code"]


def by_file(a: Artifact) -> tuple[str, str]:
    path = a.payload["path"]
    return path, path.rsplit("/", 1)[0]


@pytest.fixture
def artifacts():
    # each function below costs 100, 100, 150, 200, 50 (+2 joining) tokens
    return [
        function("a/one.py", "f", 100), function("a/one.py", "g", 100),
        function("a/two.py", "h", 150),
        function("b/three.py", "k", 200),
        function("c/four.py", "m", 50),
    ]


def test_context_that_fits_is_one_window(artifacts):
    units = make_units(artifacts, render, by_file)
    assert split_windows(artifacts, units, budget=10_000) == [artifacts]


def test_units_are_files_costed_in_tokens(artifacts):
    units = {u.name: u for u in make_units(artifacts, render, by_file)}
    assert set(units) == {"a/one.py", "a/two.py", "b/three.py", "c/four.py"}
    assert units["a/one.py"].tokens == 204 and units["a/one.py"].group == "a"
    assert [a.id for a in units["a/one.py"].artifacts] == ["a/one.py::f", "a/one.py::g"]


def test_split_keeps_a_package_together_and_covers_everything_once(artifacts):
    units = make_units(artifacts, render, by_file)
    parts = split_windows(artifacts, units, budget=360)
    ids = [a.id for part in parts for a in part]
    assert sorted(ids) == sorted(a.id for a in artifacts)
    assert len(ids) == len(set(ids))
    # package a (356 tokens) fits one window, so its two files are in the same one
    (window_a,) = [p for p in parts if any(a.payload["path"].startswith("a/") for a in p)]
    assert {a.payload["path"] for a in window_a} >= {"a/one.py", "a/two.py"}
    for part in parts:
        assert sum(u.tokens for u in units if u.artifacts[0] in part) <= 360
    # b (202) and c (52) are packed together by size
    assert len(parts) == 2


def test_a_package_larger_than_the_window_is_split_by_file(artifacts):
    units = make_units(artifacts, render, by_file)
    parts = split_windows(artifacts, units, budget=250)
    paths_per_window = [{a.payload["path"] for a in p} for p in parts]
    assert all("a/one.py" not in p or "a/two.py" not in p for p in paths_per_window)  # a (356) cannot stay whole
    # the functions of one file are never separated
    assert any({"a/one.py"} <= p for p in paths_per_window)
    assert sum(len(p) for p in parts) == len(artifacts)


def test_order_inside_a_window_follows_the_input(artifacts):
    units = make_units(artifacts, render, by_file)
    for part in split_windows(artifacts, units, budget=360):
        positions = [artifacts.index(a) for a in part]
        assert positions == sorted(positions)


def test_one_file_larger_than_the_window_names_both_sizes(artifacts):
    units = make_units(artifacts, render, by_file)
    with pytest.raises(WindowTooSmall) as err:
        split_windows(artifacts, units, budget=203)
    message = str(err.value)
    assert "a/one.py" in message and "204 tokens" in message and "203 tokens" in message


def test_budget_subtracts_static_inputs_and_output():
    assert window_budget(10_000, " t" * 1000, output_tokens=1000) == 10_000 - 1000 - 1000 - 1500
    with pytest.raises(WindowTooSmall, match="more than the 3000-token window"):
        window_budget(3000, " t" * 1000, output_tokens=1000)
