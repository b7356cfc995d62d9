"""`tide data build-repo` on a small git repository with a few bug-fix commits, created in tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest

from tide_dspy.cli.main import main
from tide_dspy.data import load_instances
from tide_dspy.data.repo_builder import build_repository_instances, load_rows

OPS = textwrap.dedent('''\
    """Arithmetic helpers."""

    SCALE = 1


    def add(a, b):
        return a - b


    def sub(a, b):
        return a - b


    class Stats:
        def __init__(self, xs):
            self.xs = xs

        @staticmethod
        def mean(xs):
            total = sum(xs)
            return total / len(xs)

        def median(self):
            xs = sorted(self.xs)
            return xs[len(xs) // 2]
''')

UTIL = textwrap.dedent('''\
    def clamp(x, lo, hi):
        return max(lo, x)


    def fmt(x):
        return str(x)
''')

TESTS = "from calc.ops import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"

# Each fix: (file, old text, new text, whether it touches the test file)
FIXES = [
    ("calc/ops.py", "    return a - b\n\n\ndef sub", "    return a + b\n\n\ndef sub", True),
    (
        "calc/ops.py",
        "        total = sum(xs)\n",
        "        if not xs:\n            return 0.0\n        total = sum(xs)\n",
        False,
    ),
    ("calc/util.py", "    return max(lo, x)\n", "    return min(hi, max(lo, x))\n", False),
    ("calc/util.py", "    return str(x)\n", "    return str(x)\n\n\ndef parse(s):\n    return float(s)\n", False),
    ("calc/ops.py", "SCALE = 1\n", "SCALE = 10\n", False),
]


def _git(repo, *args, day=0):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_AUTHOR_DATE": f"2024-01-{day + 1:02d}T12:00:00+00:00",
           "GIT_COMMITTER_DATE": f"2024-01-{day + 1:02d}T12:00:00+00:00"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


@pytest.fixture
def bugfix_repo(tmp_path):
    """A clone whose history is: buggy code, then one commit per fix; and the SWE-bench rows of those fixes."""
    repo = tmp_path / "calc-repo"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "calc" / "__init__.py").write_text("")
    (repo / "calc" / "ops.py").write_text(OPS)
    (repo / "calc" / "util.py").write_text(UTIL)
    (repo / "tests" / "test_ops.py").write_text(TESTS)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "initial")
    rows = []
    for k, (path, old, new, touches_tests) in enumerate(FIXES, 1):
        base = _git(repo, "rev-parse", "HEAD").strip()
        text = (repo / path).read_text()
        assert old in text
        (repo / path).write_text(text.replace(old, new, 1))
        if touches_tests:
            (repo / "tests" / "test_ops.py").write_text(TESTS + "\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n")
        _git(repo, "commit", "-q", "-am", f"fix {k}", day=k)
        rows.append({"instance_id": f"acme__calc-{k}", "repo": "acme/calc", "base_commit": base,
                     "problem_statement": f"bug {k}", "created_at": f"2024-01-{k + 1:02d}T12:00:00Z",
                     "patch": _git(repo, "diff", base, "HEAD", "--", "calc"),
                     "test_patch": _git(repo, "diff", base, "HEAD", "--", "tests"),
                     "FAIL_TO_PASS": json.dumps(["tests/test_ops.py::test_add"]) if touches_tests else "[]",
                     "PASS_TO_PASS": "[]", "version": "1.0"})
    rows_path = tmp_path / "rows.jsonl"
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return repo, rows_path, rows


def test_builds_one_group_with_function_evidence(bugfix_repo, tmp_path):
    repo, rows_path, rows = bugfix_repo
    head = _git(repo, "rev-parse", "HEAD")
    out = tmp_path / "out.jsonl"
    report = build_repository_instances(rows_path, repo, out)
    assert (report.instances, report.grouped, report.dropped_no_evidence, report.not_groupable) == (1, 3, 2, 0)

    [instance] = load_instances(out)
    assert instance.setting == "repository" and instance.split == "test"
    assert instance.instance_id == "acme__calc__multi-01"
    assert instance.anchor_commit == rows[0]["base_commit"]  # the initial commit: all three bugs unfixed
    evidence = {p.problem_id: p.evidence for p in instance.problems}
    assert evidence == {"acme__calc-1": ["calc/ops.py::add"],
                        "acme__calc-2": ["calc/ops.py::Stats.mean"],  # a pure insertion inside the body
                        "acme__calc-3": ["calc/util.py::clamp"]}
    ids = [a.id for a in instance.artifacts]
    assert ids == ["calc/ops.py::add", "calc/ops.py::sub", "calc/ops.py::Stats.__init__", "calc/ops.py::Stats.mean",
                   "calc/ops.py::Stats.median", "calc/util.py::clamp", "calc/util.py::fmt"]
    mean = next(a for a in instance.artifacts if a.id.endswith("Stats.mean")).payload
    assert mean["code"].splitlines()[0].strip() == "@staticmethod"

    record = json.loads(out.read_text())
    first = record["problems"][0]
    assert first["fail_to_pass"] == ["tests/test_ops.py::test_add"] and first["test_patch_applies_at_anchor"] is True
    assert [p["anchor_minus_base_days"] for p in record["problems"]] == [0.0, -1.0, -2.0]
    assert all(p["buggy_code_identical_to_base_commit"] for p in record["problems"])
    assert record["num_buggy_functions"] == 3 and record["num_candidates"] == 7
    # The user's clone is untouched.
    assert _git(repo, "rev-parse", "HEAD") == head and _git(repo, "status", "--porcelain") == ""


def test_limits_split_groups(bugfix_repo, tmp_path):
    repo, rows_path, _ = bugfix_repo
    report = build_repository_instances(rows_path, repo, tmp_path / "a.jsonl", max_problems=2)
    assert (report.instances, report.grouped, report.not_groupable) == (1, 2, 1)
    # ops.py alone has 5 functions; util.py adds 2, which breaks a limit of 6.
    report = build_repository_instances(rows_path, repo, tmp_path / "b.jsonl", max_candidates=6)
    [instance] = load_instances(tmp_path / "b.jsonl")
    assert sorted(p.problem_id for p in instance.problems) == ["acme__calc-1", "acme__calc-2"]
    assert len(instance.artifacts) == 5


def test_rows_errors_name_line_and_field(tmp_path, bugfix_repo):
    _, rows_path, rows = bugfix_repo
    bad = tmp_path / "bad.jsonl"
    broken = {k: v for k, v in rows[1].items() if k != "patch"}
    bad.write_text(json.dumps(rows[0]) + "\n" + json.dumps(broken) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl line 2: patch: field required"):
        load_rows(bad)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**rows[1], "repo": "other/x"}) + "\n")
    with pytest.raises(ValueError, match="--repo-name"):
        load_rows(mixed)
    assert len(load_rows(mixed, "acme/calc")[1]) == 1


def test_cli(bugfix_repo, tmp_path, capsys):
    repo, rows_path, _ = bugfix_repo
    out = tmp_path / "cli.jsonl"
    assert main(["data", "build-repo", "--rows", str(rows_path), "--repo", str(repo), "--out", str(out),
                 "--split", "train"]) == 0
    assert "-> 1 instances" in capsys.readouterr().out
    assert load_instances(out)[0].split == "train"
    assert main(["data", "build-repo", "--rows", str(rows_path), "--repo", str(tmp_path), "--out", str(out)]) == 2
    assert "not a git repository" in capsys.readouterr().err
