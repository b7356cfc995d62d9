"""`tide discover repo --verify` and `tide evaluate --verify-repo`: real git, real pytest runs in throwaway copies."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import dspy
import pytest
from dspy.utils.dummies import DummyLM

from tide_dspy.cli.main import main
from tide_dspy.data.candidates import parse_candidates, python_files
from tide_dspy.product import DiscoverResult, discover_repository, write_report
from tide_dspy.product.verify import (
    BREAKS,
    FLAGGED,
    NO_CHANGE,
    NOT_RUN,
    TIMED_OUT,
    VERIFIED,
    Verifier,
    VerifyError,
    classify,
)
from tide_dspy.sandbox import Sandbox, nodeid_key, run_tests, sandbox_unavailable

# The runs happen inside bubblewrap; where it cannot run, so do these tests not (tests/test_sandbox.py checks
# that --verify then refuses).
needs_bwrap = pytest.mark.skipif(sandbox_unavailable() is not None, reason=f"no sandbox: {sandbox_unavailable()}")

FIXTURE = Path(__file__).parent / "fixtures" / "verify_repo"
PYTEST = f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider"

MEAN_FIX = """diff --git a/calc/ops.py b/calc/ops.py
--- a/calc/ops.py
+++ b/calc/ops.py
@@ -1,3 +1,3 @@
 def mean(values):
-    return sum(values) / (len(values) - 1)
+    return sum(values) / len(values)

"""
CLAMP_BREAK = """diff --git a/calc/ops.py b/calc/ops.py
--- a/calc/ops.py
+++ b/calc/ops.py
@@ -5,2 +5,2 @@
 def clamp(x, low, high):
-    return max(low, min(x, high))
+    return min(low, max(x, high))
"""
SHOUT_STALE = """diff --git a/calc/text.py b/calc/text.py
--- a/calc/text.py
+++ b/calc/text.py
@@ -1,3 +1,3 @@
 def shout(text):
-    return text.lower()
+    return text.upper()

"""
WHISPER_LOOP = """diff --git a/calc/text.py b/calc/text.py
--- a/calc/text.py
+++ b/calc/text.py
@@ -5,2 +5,3 @@
 def whisper(s):
+    while True: pass
     return s.lower()
"""
SHOUT_FIX = """diff --git a/calc/text.py b/calc/text.py
--- a/calc/text.py
+++ b/calc/text.py
@@ -1,3 +1,3 @@
 def shout(s):
-    return s.lower()
+    return s.upper()

"""
SHOUT_WRONG = SHOUT_FIX.replace("s.upper()", "s.title()")
SHOUT_TEST_PATCH = """diff --git a/tests/test_text.py b/tests/test_text.py
--- a/tests/test_text.py
+++ b/tests/test_text.py
@@ -1,5 +1,9 @@
-from calc.text import whisper
+from calc.text import shout, whisper


 def test_whisper():
     assert whisper("Hi") == "hi"
+
+
+def test_shout():
+    assert shout("Hi") == "HI"
"""


def run_git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout


def make_repo(tmp_path: Path) -> Path:
    """The fixture repository as a real git repository, plus an untracked file, an ignored file and a link out."""
    root = tmp_path / "repo"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / ".gitignore").write_text("ignored.txt\n")
    run_git(root, "init", "-q")
    run_git(root, "add", ".")
    run_git(root, "commit", "-qm", "calc with planted bugs")
    (root / "notes.txt").write_text("untracked, copied\n")
    (root / "ignored.txt").write_text("ignored, not copied\n")
    (tmp_path / "outside.txt").write_text("outside the tree\n")
    os.symlink(tmp_path / "outside.txt", root / "link_out")
    return root


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path)


def tree_digest(root: Path) -> str:
    """A hash over every file and link under root, .git included, never following links."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]):
            path = Path(dirpath) / name
            h.update(str(path.relative_to(root)).encode() + b"\0")
            h.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
            h.update(oct(path.lstat().st_mode).encode())
    return h.hexdigest()


def porcelain(root: Path) -> str:
    return run_git(root, "--no-optional-locks", "status", "--porcelain", "--ignored")


def finding(description, evidence, patch):
    return {"description": description, "evidence_ids": evidence, "patch": patch, "used_template_id": "", "why": ""}


FOUR_FINDINGS = [
    finding("mean divides by n - 1", ["calc/ops.py::mean"], MEAN_FIX),
    finding("clamp bounds look swapped", ["calc/ops.py::clamp"], CLAMP_BREAK),
    finding("shout lower-cases", ["calc/text.py::shout"], SHOUT_STALE),
    finding("whisper should wait for input", ["calc/text.py::whisper"], WHISPER_LOOP),
]


@pytest.fixture
def scratch(tmp_path, monkeypatch) -> Path:
    """Temporary directories go here, so a test can see that every copy was removed."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


# ---- the run ----

@dataclass
class VerifiedRun:
    """A discovery with --verify over FOUR_FINDINGS (a fix, a breaking patch, a stale one, a hanging one)."""

    before: tuple[str, str]  # tree digest and git status of the repository before the run
    after: tuple[str, str]
    left_in_scratch: list[Path]  # what the run left in the temporary directory
    result: DiscoverResult
    lines: list[str]  # progress
    paths: dict[str, Path]  # write_report's files

    def verification(self, description: str):
        return {f.description: v for f, v in zip(self.result.findings, self.result.verifications)}[description]


@pytest.fixture(scope="module")
def verified(tmp_path_factory) -> VerifiedRun:
    root = tmp_path_factory.mktemp("verified")
    repo = make_repo(root)
    scratch = root / "scratch"
    scratch.mkdir()
    before = (tree_digest(repo), porcelain(repo))
    lm = DummyLM([{"findings": json.dumps(FOUR_FINDINGS)}, {"findings": "[]"}])
    lines = []
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(scratch))
        result = discover_repository(repo, lm=lm, backbone="none-shipped", per_round=4, verify=PYTEST,
                                     verify_timeout=6, progress=lines.append)
    after = (tree_digest(repo), porcelain(repo))
    left = list(scratch.iterdir())
    return VerifiedRun(before, after, left, result, lines, write_report(result, root / "out"))


@needs_bwrap
def test_verify_leaves_the_tree_untouched(verified):
    assert verified.after == verified.before


@needs_bwrap
def test_verify_removes_every_temporary_copy(verified):
    assert verified.left_in_scratch == []


@needs_bwrap
def test_a_patch_that_fixes_a_failing_test_is_verified(verified):
    fix = verified.verification("mean divides by n - 1")
    assert fix.status == VERIFIED and fix.label == "verified: fixes 1, breaks 0"
    assert fix.fixed == ["tests.test_ops::test_mean"] and fix.broken == []


@needs_bwrap
def test_a_patch_that_breaks_a_passing_test_is_marked_breaks(verified):
    breaks = verified.verification("clamp bounds look swapped")
    assert breaks.status == BREAKS and breaks.broken == ["tests.test_ops::test_clamp"] and breaks.fixed == []


@needs_bwrap
def test_a_patch_that_does_not_apply_is_not_run(verified):
    stale = verified.verification("shout lower-cases")
    assert stale.status == NOT_RUN and stale.label == "not run: does not apply"


@needs_bwrap
def test_a_patch_whose_tests_hang_times_out(verified):
    loop = verified.verification("whisper should wait for input")
    assert loop.status == TIMED_OUT and 5 < loop.seconds < 30


@needs_bwrap
def test_findings_are_ordered_by_verification_status(verified):
    # The fix first, the known-bad patches last.
    assert [v.status for v in verified.result.verifications] == [VERIFIED, NOT_RUN, BREAKS, TIMED_OUT]


@needs_bwrap
def test_what_the_copy_leaves_out_is_listed(verified):
    assert verified.result.verify["left_out"] == ["link_out"]


@needs_bwrap
def test_the_baseline_outcome_of_each_test_is_recorded(verified):
    assert verified.result.verify["baseline"]["outcomes"] == {"tests.test_ops::test_mean": "failed",
                                                              "tests.test_ops::test_clamp": "passed",
                                                              "tests.test_text::test_whisper": "passed"}


@needs_bwrap
def test_the_progress_reports_the_baseline(verified):
    assert any(line.startswith("verify: baseline exit 1, 1 failed, 2 passed") for line in verified.lines)


@needs_bwrap
def test_the_last_progress_line_counts_applied_and_fixing_patches(verified):
    assert "done: 4 findings, 3/4 patches apply, 1/3 tested patches fix a test" in verified.lines[-1]


@needs_bwrap
def test_the_report_shows_only_the_verified_patch_as_a_fix(verified):
    md = verified.paths["report.md"].read_text()
    assert md.count("Tests: **verified") == 1
    assert "Tests: **verified: fixes 1, breaks 0 (" in md and "fixed: tests.test_ops::test_mean" in md


@needs_bwrap
def test_the_report_shows_broken_timed_out_and_unrun_patches(verified):
    md = verified.paths["report.md"].read_text()
    assert "Tests: **breaks tests (" in md and "broke: tests.test_ops::test_clamp" in md
    assert "Tests: **timed out (" in md and "Tests: **not run: does not apply**" in md


@needs_bwrap
def test_the_report_lists_the_verified_fix_first(verified):
    md = verified.paths["report.md"].read_text()
    assert md.index("mean divides by n - 1") < md.index("clamp bounds look swapped")


@needs_bwrap
def test_findings_json_carries_each_verification_and_the_command(verified):
    data = json.loads(verified.paths["findings.json"].read_text())
    assert [f["verification"]["status"] for f in data["findings"]] == [VERIFIED, NOT_RUN, BREAKS, TIMED_OUT]
    assert data["verify"]["command"] == PYTEST


@needs_bwrap
def test_report_html_shows_the_verification(verified):
    assert "class='applies'>verified: fixes 1" in verified.paths["report.html"].read_text()


@needs_bwrap
def test_copy_is_what_git_lists_from_the_working_tree(repo, scratch):
    (repo / "calc" / "ops.py").write_text((repo / "calc" / "ops.py").read_text().replace("- 1)", "- 0)"))
    with Verifier(repo, PYTEST) as verifier:
        tree = verifier.pristine.tree
        copied = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
        assert "- 0)" in (tree / "calc" / "ops.py").read_text()  # working-tree changes are included
        assert not (tree / ".git").exists() and not (tree / "link_out").exists()
        assert verifier.run_baseline().passed  # the edit fixed mean
    assert copied == [".gitignore", "README.md", "calc/__init__.py", "calc/ops.py", "calc/text.py", "notes.txt",
                      "tests/test_ops.py", "tests/test_text.py"]


@needs_bwrap
def test_a_plain_folder_is_copied_without_links_out(tmp_path, scratch):
    root = tmp_path / "plain"
    shutil.copytree(FIXTURE, root)
    os.symlink("calc/ops.py", root / "inside_link.py")
    os.symlink(tmp_path, root / "dir_out")
    from tide_dspy.product.patches import git_toplevel

    if git_toplevel(root) is not None:
        pytest.skip("the temporary folder lies inside a git repository")
    with Verifier(root, PYTEST) as verifier:
        assert verifier.left_out == ["dir_out"]
        assert os.readlink(verifier.pristine.tree / "inside_link.py") == "calc/ops.py"


@needs_bwrap
def test_a_command_other_than_pytest_is_one_check(repo, scratch):
    command = f"{shlex.quote(sys.executable)} -c 'import calc.ops as o; assert o.mean([1, 2, 3]) == 2'"
    with Verifier(repo, command) as verifier:
        assert not verifier.run_baseline().outcomes
        fix, other = verifier.verify(MEAN_FIX), verifier.verify(CLAMP_BREAK)
    assert fix.label == "verified: fixes 1, breaks 0" and fix.fixed == [command]
    assert other.status == NO_CHANGE and other.returncode == 1


# A patch that makes the failing test pass by editing the test itself, and a real fix that also adds a test.
MEAN_TEST_REWRITE = """diff --git a/tests/test_ops.py b/tests/test_ops.py
--- a/tests/test_ops.py
+++ b/tests/test_ops.py
@@ -4,3 +4,3 @@
 def test_mean():
-    assert mean([1, 2, 3]) == 2
+    assert mean([1, 2, 3]) == 3

"""


@needs_bwrap
def test_a_patch_that_edits_tests_is_flagged_never_verified_nor_first(repo, scratch):
    lm = DummyLM([{"findings": json.dumps([
        finding("the mean test expects the wrong value", ["calc/ops.py::mean"], MEAN_TEST_REWRITE),
        finding("clamp bounds look swapped", ["calc/ops.py::clamp"], CLAMP_BREAK),
        finding("mean divides by n - 1", ["calc/ops.py::mean"], MEAN_FIX),
    ])}, {"findings": "[]"}])
    result = discover_repository(repo, lm=lm, backbone="none-shipped", per_round=3, verify=PYTEST,
                                 verify_timeout=30, progress=lambda line: None)
    statuses = {f.description: v for f, v in zip(result.findings, result.verifications)}
    rewrite = statuses["the mean test expects the wrong value"]
    assert rewrite.status == FLAGGED and rewrite.fixed == ["tests.test_ops::test_mean"]
    assert rewrite.label == ("not verified (flagged: touches tests: tests/test_ops.py; touches files outside the "
                             "finding's evidence: tests/test_ops.py): fixes 1, breaks 0")
    assert [v.status for v in result.verifications] == [VERIFIED, FLAGGED, BREAKS]
    assert "1/3 tested patches fix a test" in result.summary_line()


@needs_bwrap
def test_total_time_limit_leaves_later_patches_unrun(repo, scratch):
    with Verifier(repo, PYTEST, total_timeout=0.5) as verifier:
        verifier.baseline = run_tests(verifier.argv, verifier.pristine.tree, 30, sandbox=verifier.sandbox)
        assert verifier.verify(MEAN_FIX).label == "not run: the total --verify time limit was used up"


# ---- bounds ----

@needs_bwrap
def test_command_not_found_is_a_clear_error(repo, scratch, monkeypatch, capsys):
    with pytest.raises(VerifyError, match="'no-such-test-runner' was not found on PATH"):
        Verifier(repo, "no-such-test-runner -q")
    assert list(scratch.iterdir()) == []
    dspy.configure(lm=DummyLM([]))
    assert main(["discover", "repo", str(repo), "--verify", "./run-tests.sh", "--out", str(repo.parent / "o")]) == 2
    assert "'./run-tests.sh' was not found; give its full path" in capsys.readouterr().err
    assert main(["discover", "repo", str(repo), "--verify", "", "--out", str(repo.parent / "o")]) == 2
    assert "--verify needs a test command" in capsys.readouterr().err
    assert main(["discover", "repo", str(repo), "--verify-timeout", "3"]) == 2
    assert "need --verify CMD" in capsys.readouterr().err


@needs_bwrap
def test_the_test_environment_is_an_allow_list(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-do-not-leak")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-do-not-leak")
    monkeypatch.setenv("DATABASE_URL", "postgres://me:hunter2@db.example.org/x")
    monkeypatch.setenv("TIDE_PLAIN_SETTING", "not on the list")
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    monkeypatch.setenv("PYTHON_SECRET_TOKEN", "do-not-leak")
    run = run_tests([sys.executable, "-c", "import os; print(sorted(os.environ))"], tmp_path, 30,
                    sandbox=Sandbox(tmp_path, [sys.executable]))
    assert run.passed
    names = set(eval(run.output))
    assert {"OPENAI_API_KEY", "GITHUB_TOKEN", "DATABASE_URL", "TIDE_PLAIN_SETTING", "PYTHON_SECRET_TOKEN"}.isdisjoint(
        names
    )
    assert {"PATH", "HOME", "TMPDIR", "PYTHONHASHSEED"} <= names


@needs_bwrap
def test_output_is_capped_to_its_tail(tmp_path):
    script = "import sys; sys.stdout.write('x' * 1_000_000); sys.stdout.write('THE END')"
    run = run_tests([sys.executable, "-c", script], tmp_path, 30, output_cap=1000,
                    sandbox=Sandbox(tmp_path, [sys.executable]))
    assert run.output_bytes == 1_000_007 and len(run.output) == 1000 and run.output.endswith("THE END")


@needs_bwrap
def test_timeout_kills_the_command_and_its_children(tmp_path):
    marker = tmp_path / "child-was-here"
    child = (f"import os, sys, time\nwhile os.path.exists(f'/proc/{{sys.argv[1]}}'):\n    time.sleep(0.1)\n"
             f"open({str(marker)!r}, 'w')")  # written once its parent is gone, were it still alive
    script = ("import os, subprocess, sys, time; "
              f"subprocess.Popen([sys.executable, '-c', {child!r}, str(os.getpid())]); time.sleep(60)")
    started = time.monotonic()
    run = run_tests([sys.executable, "-c", script], tmp_path, 1, sandbox=Sandbox(tmp_path, [sys.executable]))
    assert run.timed_out and run.returncode is None and time.monotonic() - started < 10
    time.sleep(4)
    assert not marker.exists()


def test_classify_and_node_ids():
    assert classify({"a": False, "b": True, "c": True}, {"a": True, "b": False}) == (["a"], ["b", "c"])
    assert nodeid_key("tests/test_a.py::TestX::test_y[1-2]") == "tests.test_a.TestX::test_y[1-2]"
    assert nodeid_key("tests/test_a.py::test_z") == "tests.test_a::test_z"


# ---- tide evaluate --verify-repo ----

def instance_record(repo: Path) -> dict:
    files = python_files(repo)
    candidates = [
        {"id": a.id, **a.payload} for a in parse_candidates(repo, [f for f in files if f.startswith("calc/")])
    ]
    return {
        "instance_id": "calc-1", "repo": "example/calc", "split": "test",
        "anchor_commit": run_git(repo, "rev-parse", "HEAD").strip(), "candidates": candidates,
        "problems": [
            {"problem_id": "calc-mean", "description": "mean divides by n - 1", "evidence": ["calc/ops.py::mean"],
             "patch": MEAN_FIX, "fail_to_pass": ["tests/test_ops.py::test_mean"],
             "pass_to_pass": ["tests/test_ops.py::test_clamp"], "test_patch": None},
            {"problem_id": "calc-shout", "description": "shout lower-cases", "evidence": ["calc/text.py::shout"],
             "patch": SHOUT_FIX, "fail_to_pass": ["tests/test_text.py::test_shout"],
             "pass_to_pass": ["tests/test_text.py::test_whisper"], "test_patch": SHOUT_TEST_PATCH},
        ],
    }


@needs_bwrap
def test_evaluate_reports_execution_based_resolution(repo, tmp_path, monkeypatch, capsys):
    data = tmp_path / "calc.jsonl"
    data.write_text(json.dumps(instance_record(repo)) + "\n")
    before = (tree_digest(repo), porcelain(repo))
    lm = DummyLM([{"findings": json.dumps([
        finding("mean divides by n - 1", ["calc/ops.py::mean"], MEAN_FIX),
        finding("shout lower-cases", ["calc/text.py::shout"], SHOUT_WRONG),
    ])}, {"findings": "[]"}])
    dspy.configure(lm=lm)
    out = tmp_path / "eval"
    rc = main(["evaluate", "--setting", "repository", "--data", str(data), "--method", "iter", "--per-round", "2",
               "--rounds", "2", "--judge", "proxy", "--no-track", "--out", str(out), "--verify-repo", str(repo),
               "--verify-command", PYTEST, "--verify-timeout", "30"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "execution-based resolution: 1/2 gold problems resolved by tests (50.00%) over 1 instance(s); " \
           "judge (proxy-lexical) resolution coverage: " in printed
    assert (tree_digest(repo), porcelain(repo)) == before  # the clone is only read

    row = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    runs = {r["problem_id"]: r for r in row["execution"]["runs"]}
    assert runs["calc-mean"]["status"] == "resolved" and runs["calc-mean"]["finding"] == 0
    assert runs["calc-shout"]["status"] == "unresolved"
    assert runs["calc-shout"]["failing"] == ["tests/test_text.py::test_shout"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["execution"] == {"resolved": 1, "problems": 2, "rate": 0.5, "instances": 1}


# Written against the tree with the problem's test patch, as by a model that saw the failing test: it makes the
# fail_to_pass test expect the bug.
SHOUT_TEST_REWRITE = """diff --git a/tests/test_text.py b/tests/test_text.py
--- a/tests/test_text.py
+++ b/tests/test_text.py
@@ -8,2 +8,2 @@
 def test_shout():
-    assert shout("Hi") == "HI"
+    assert shout("Hi") == "hi"
"""
# A real fix of shout that also edits a line of the test file that the test patch rewrites too.
SHOUT_FIX_AND_TEST_EDIT = SHOUT_FIX + """diff --git a/tests/test_text.py b/tests/test_text.py
--- a/tests/test_text.py
+++ b/tests/test_text.py
@@ -1,2 +1,2 @@
-from calc.text import whisper
+from calc.text import whisper  # noqa

"""


def execution_runs(repo: Path, tmp_path: Path, patch: str) -> dict:
    from tide_dspy.data.records import instance_from_record
    from tide_dspy.metrics.execution import ExecutionJudge
    from tide_dspy.schemas import Finding

    instance = instance_from_record(instance_record(repo))
    found = [Finding(description="shout lower-cases", evidence=["calc/text.py::shout"], patch=patch)]
    judged = ExecutionJudge(repo, PYTEST, timeout=60)(instance, found)
    return {r["problem_id"]: r for r in judged["runs"]}


@needs_bwrap
def test_verify_repo_applies_the_test_patch_after_the_models_patch(repo, tmp_path, scratch):
    shout = execution_runs(repo, tmp_path, SHOUT_TEST_REWRITE)["calc-shout"]
    assert shout["status"] != "resolved"
    assert shout["status"].startswith("patch does not apply")  # it only fits the tests it rewrote


@needs_bwrap
def test_verify_repo_restores_the_test_files_before_the_test_patch(repo, tmp_path, scratch):
    shout = execution_runs(repo, tmp_path, SHOUT_FIX_AND_TEST_EDIT)["calc-shout"]
    assert shout["failing"] == []  # the problem's own tests ran, and the fix passes them
    assert shout["status"] == "flagged" and shout["concerns"] == ["touches tests: tests/test_text.py"]


SHOUT_FIX_AND_ANOTHER_FILE = SHOUT_FIX + """diff --git a/calc/ops.py b/calc/ops.py
--- a/calc/ops.py
+++ b/calc/ops.py
@@ -1,2 +1,3 @@
+# The helpers below take lists of numbers.
 def mean(values):
     return sum(values) / (len(values) - 1)
"""


@needs_bwrap
def test_verify_repo_resolves_a_fix_that_spans_files_outside_the_evidence(repo, tmp_path, scratch):
    shout = execution_runs(repo, tmp_path, SHOUT_FIX_AND_ANOTHER_FILE)["calc-shout"]
    assert shout["status"] == "resolved" and shout["concerns"] == []


def test_evaluate_verify_repo_needs_the_repository_setting_a_clone_and_pytest(repo, tmp_path, capsys):
    rc = main(["evaluate", "--setting", "workspace", "--data", str(tmp_path), "--method", "iter",
               "--verify-repo", str(tmp_path)])
    assert rc == 2 and "does not apply to the workspace setting" in capsys.readouterr().err
    rc = main(["evaluate", "--setting", "repository", "--data", str(tmp_path), "--method", "iter",
               "--verify-repo", str(tmp_path / "nope")])
    assert rc == 2 and "not a git repository" in capsys.readouterr().err
    rc = main(["evaluate", "--setting", "repository", "--data", str(tmp_path), "--method", "iter",
               "--verify-repo", str(repo), "--verify-command", "make test"])
    assert rc == 2 and "the command must run pytest" in capsys.readouterr().err


# ---- "verified" means fixed: every name git reads, and no skipped test as a pass ----

PASS_EVERYTHING = ("import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
                   "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")


def new_file(header_old: str, header_new: str, body: str) -> str:
    lines = body.splitlines()
    return (f"diff --git {header_old} {header_new}\nnew file mode 100644\n--- /dev/null\n+++ {header_new}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines))


HIDDEN_TEST_EDITS = {
    "quoted names": new_file('"a/tests/conftest.py"', '"b/tests/conftest.py"', PASS_EVERYTHING),
    "other prefixes": new_file("x/tests/conftest.py", "y/tests/conftest.py", PASS_EVERYTHING),
    "quoted test edit": ('diff --git "a/tests/test_ops.py" "b/tests/test_ops.py"\n--- "a/tests/test_ops.py"\n'
                         '+++ "b/tests/test_ops.py"\n@@ -4,3 +4,3 @@\n def test_mean():\n'
                         '-    assert mean([1, 2, 3]) == 2\n+    assert mean([1, 2, 3]) == 3\n \n'),
}


@needs_bwrap
@pytest.mark.parametrize("name", list(HIDDEN_TEST_EDITS))
def test_a_test_edit_in_any_header_git_takes_is_flagged_not_verified(repo, scratch, name):
    with Verifier(repo, PYTEST) as verifier:
        verifier.run_baseline()
        v = verifier.verify(HIDDEN_TEST_EDITS[name], ["calc/ops.py"])
    assert v.status == FLAGGED and v.fixed == ["tests.test_ops::test_mean"], v
    assert "touches" in v.label and "tests/" in v.label


SKIP_MEAN = ("diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1,3 +1,3 @@\n"
             " def mean(values):\n-    return sum(values) / (len(values) - 1)\n+    MARK\n \n")


@needs_bwrap
@pytest.mark.parametrize("mark", ["raise __import__('unittest').SkipTest('later')",
                                  "__import__('pytest').xfail('known')",
                                  "__import__('pytest').skip('later')"])
def test_a_test_skipped_or_xfailed_after_the_patch_is_not_a_fix(repo, scratch, mark):
    with Verifier(repo, PYTEST) as verifier:
        verifier.run_baseline()
        v = verifier.verify(SKIP_MEAN.replace("MARK", mark), ["calc/ops.py"])
    assert v.status == NO_CHANGE and v.fixed == [], v


@needs_bwrap
def test_a_patch_whose_only_file_has_a_non_ascii_name_is_checked_and_verified(repo, scratch):
    (repo / "calc" / "caf\u00e9.py").write_text("def brew():\n    return 'tea'\n")
    (repo / "tests" / "test_cafe.py").write_text(
        "import importlib\n\n\ndef test_brew():\n"
        "    assert importlib.import_module('calc.caf\u00e9').brew() == 'coffee'\n")
    run_git(repo, "add", ".")
    run_git(repo, "commit", "-qm", "cafe")
    patch = run_git_diff(repo, "calc/caf\u00e9.py", "'tea'", "'coffee'")
    assert patch.startswith('diff --git "a/calc/caf\\303\\251.py"')  # git quotes the name
    from tide_dspy.product.patches import PatchChecker

    assert PatchChecker(repo).check(patch).applies
    with Verifier(repo, PYTEST) as verifier:
        verifier.run_baseline()
        v = verifier.verify(patch, ["calc/caf\u00e9.py"])
    assert v.status == VERIFIED and v.fixed == ["tests.test_cafe::test_brew"], v


def run_git_diff(repo: Path, rel: str, old: str, new: str) -> str:
    """The patch git itself writes for replacing `old` with `new` in `rel` (the tree is left as it was)."""
    path = repo / rel
    before = path.read_text()
    path.write_text(before.replace(old, new))
    try:
        return run_git(repo, "diff", "--", rel)
    finally:
        path.write_text(before)


@needs_bwrap
def test_verify_env_values_are_scrubbed_from_every_output_whatever_their_name(repo, tmp_path, scratch, monkeypatch):
    value = "corp-deploy-credential-4711"
    monkeypatch.setenv("MYCORP_DEPLOY_CRED", value)
    (repo / "tests" / "test_env.py").write_text(
        "import os\n\ndef test_env():\n    print('cred is', os.environ['MYCORP_DEPLOY_CRED'])\n    assert False\n")
    run_git(repo, "add", ".")
    run_git(repo, "commit", "-qm", "env")
    from tide_dspy.sandbox import SandboxOptions

    lm = DummyLM([{"findings": json.dumps([finding("mean divides by n - 1", ["calc/ops.py::mean"], MEAN_FIX)])},
                  {"findings": "[]"}])
    result = discover_repository(repo, lm=lm, backbone="none-shipped", per_round=1, verify=PYTEST,
                                 verify_sandbox=SandboxOptions(env=("MYCORP_DEPLOY_CRED",)), progress=print)
    assert "cred is" in result.verifications[0].reason  # the tests printed it
    paths = write_report(result, tmp_path / "out")
    for path in paths.values():
        assert value not in path.read_text(), path.name
