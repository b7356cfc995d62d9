"""The candidate parser reproduces the candidates of a (hand-written) repository instance and follows the data
README's rules."""

from __future__ import annotations

import logging
import textwrap

from tide_dspy.data import estimate_tokens
from tide_dspy.data.candidates import parse_candidates, python_files


def _place(code: str, start_line: int, header: str | None) -> str:
    """A file with `code` at `start_line`, optionally under a one-line class header just above it."""
    pad = start_line - 1 - (1 if header else 0)
    return "\n" * pad + (header + "\n" if header else "") + code + "\n"


def test_reproduces_the_fixture_candidates(tmp_path, repository_instance):
    checked = 0
    for cand in repository_instance.artifacts:
        p = cand.payload
        parts = p["qualname"].split(".")
        if len(parts) > 2 or (len(parts) == 2 and p["start_line"] < 2):
            continue
        header = f"class {parts[0]}:" if len(parts) == 2 else None
        target = tmp_path / str(checked) / p["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_place(p["code"], p["start_line"], header))
        parsed = parse_candidates(tmp_path / str(checked), files=[p["path"]])
        match = [a for a in parsed if a.payload["qualname"] == p["qualname"]]
        assert len(match) == 1
        assert match[0].payload == p
        assert match[0].id == cand.id.split("#")[0]
        checked += 1
    assert checked >= 5
    assert any(a.payload["code"].lstrip().startswith("@") for a in repository_instance.artifacts)


SOURCE = textwrap.dedent('''\
    import sys

    def top(x):
        def inner():
            return x
        class Local:
            def hidden(self):
                pass
        return inner


    class Outer:
        class Inner:
            @staticmethod
            @decorated(1)
            def deep():
                return 1

        @property
        def value(self):
            return 1

        @value.setter
        def value(self, v):
            pass


    if sys.version_info >= (3, 8):
        def compat():
            return 1
    else:
        def compat():
            return 2

    async def fetch():
        return await other()
''')


def test_readme_rules(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(SOURCE)
    by_id = {a.id: a for a in parse_candidates(tmp_path)}
    assert list(by_id) == [
        "pkg/mod.py::top", "pkg/mod.py::Outer.Inner.deep", "pkg/mod.py::Outer.value", "pkg/mod.py::Outer.value#2",
        "pkg/mod.py::compat", "pkg/mod.py::compat#2", "pkg/mod.py::fetch",
    ]
    deep = by_id["pkg/mod.py::Outer.Inner.deep"].payload
    assert (deep["start_line"], deep["end_line"]) == (14, 17)
    assert deep["code"].splitlines()[0].strip() == "@staticmethod"
    top = by_id["pkg/mod.py::top"].payload
    assert (top["start_line"], top["end_line"]) == (3, 9)
    assert "def hidden" in top["code"]
    assert by_id["pkg/mod.py::Outer.value#2"].payload["qualname"] == "Outer.value"


def test_unparseable_file_is_reported_and_skipped(tmp_path, caplog):
    (tmp_path / "good.py").write_text("def ok():\n    return 1\n")
    (tmp_path / "bad.py").write_text("x = 1\ndef broken(:\n    pass\n")
    with caplog.at_level(logging.WARNING):
        found = parse_candidates(tmp_path)
    assert [a.id for a in found] == ["good.py::ok"]
    assert "bad.py line 2" in caplog.text


def test_default_files_skip_hidden_venv_and_build_dirs(tmp_path):
    for rel in ["a.py", "src/b.py", ".git/c.py", "build/d.py", "myenv/e.py", "x.egg-info/f.py", "src/notes.txt"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    (tmp_path / "myenv" / "pyvenv.cfg").write_text("")
    assert python_files(tmp_path) == ["a.py", "src/b.py"]


def test_estimate_tokens():
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
