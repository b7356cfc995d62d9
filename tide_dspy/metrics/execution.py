"""Execution-based resolution of repository instances: run each gold problem's tests with the matched finding's patch.

For each gold problem, the finding that retrieval matching pairs with it (the one the judge's resolution coverage
scores) is taken. The commit `anchor_commit` of the user's local clone is copied to a temporary directory (the clone
is only read), and the problem's `fail_to_pass` and `pass_to_pass` tests (pytest node ids) run twice, in the
sandbox of tide_dspy.sandbox (the copy is seen at the clone's path, so an editable install of the clone finds it):
once with only the problem's `test_patch` applied, and once with the finding's patch applied first, then the files
`test_patch` touches restored to the anchor and `test_patch` applied last, as the SWE-bench harness does, so a
patch cannot pass by rewriting the tests that judge it. The problem is resolved when every one of those tests
passes with the patch, some `fail_to_pass` test failed without it, and the patch touches nothing that decides its
own result (sandbox.patch_concerns: tests, conftest.py, config or binary files); such a patch is "flagged"
instead. Files outside the finding's evidence are not a concern here: the problem's own tests judge the patch, and
a gold fix often spans more files than a finding cites. The clone, and an environment in which its tests run, are the
user's to provide; running the tests executes the repository's code and the model's patch.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tide_dspy.data.git_tools import GitClone, Snapshot
from tide_dspy.metrics.scoring import as_findings, match
from tide_dspy.sandbox import (
    DEFAULT_RUN_TIMEOUT,
    Sandbox,
    SandboxOptions,
    TestRun,
    is_pytest,
    nodeid_key,
    parse_command,
    patch_concerns,
    run_tests,
)
from tide_dspy.schemas import Finding, GoldProblem, Instance
from tide_dspy.util.diffs import patch_files

RESOLVED = "resolved"
UNRESOLVED = "unresolved"
FLAGGED = "flagged"  # the tests pass, but the patch touches what decides its own result
DEFAULT_TEST_COMMAND = "python -m pytest -q -p no:cacheprovider"


@dataclass(frozen=True)
class ProblemRun:
    """The tests of one gold problem, run with the patch of the finding matched to it."""

    problem_id: str
    status: str  # resolved | unresolved | flagged | a reason it could not be judged by execution
    finding: int | None = None  # index of the matched finding
    failing: list[str] = field(default_factory=list)  # fail_to_pass / pass_to_pass tests that did not pass
    seconds: float = 0.0
    concerns: list[str] = field(default_factory=list)  # why the patch cannot count as resolving (patch_concerns)

    @property
    def resolved(self) -> bool:
        return self.status == RESOLVED


def problem_tests(problem: GoldProblem) -> tuple[list[str], list[str]]:
    extra = problem.model_extra or {}
    f2p, p2p = list(extra.get("fail_to_pass") or []), list(extra.get("pass_to_pass") or [])
    bad = [t for t in f2p + p2p if not isinstance(t, str) or t.startswith("-")]
    if bad:
        raise ValueError(f"problem {problem.problem_id}: fail_to_pass/pass_to_pass hold {bad[:3]}, which are not "
                         "pytest node ids")
    return f2p, p2p


def reset_tests(snap: Snapshot, base: Snapshot, test_patch: str) -> None:
    """Restore the files `test_patch` touches to the anchor's version (removing those it creates), as the SWE-bench
    harness's `git checkout <base> <files>; rm -f <new files>` before it applies the test patch
    (swebench/harness/test_spec/python.py, make_eval_script_list_py)."""
    for rel in patch_files(test_patch):
        if rel == "/dev/null" or ".." in Path(rel).parts or Path(rel).is_absolute():
            continue
        original, copy = base.tree / rel, snap.tree / rel
        if copy.is_symlink() or copy.is_file():
            copy.unlink()
        if original.is_file() and not original.is_symlink():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(original, copy)


def passing(run: TestRun, tests: list[str]) -> tuple[list[str], list[str]]:
    """(passed, not passed) of these node ids in a run."""
    ok = [t for t in tests if run.outcomes.get(nodeid_key(t)) == "passed"]
    return ok, [t for t in tests if t not in ok]


class ExecutionJudge:
    """Runs instances' tests in copies of a local clone; `None` for instances without `anchor_commit`."""

    def __init__(self, clone: str | Path, command: str = DEFAULT_TEST_COMMAND,
                 timeout: float = DEFAULT_RUN_TIMEOUT, sandbox: SandboxOptions = SandboxOptions()):
        self.clone = GitClone(clone)
        self.command, self.argv, self.timeout = command, parse_command(command), timeout
        if not is_pytest(self.argv):
            raise ValueError(f"--verify-command {command!r}: the tests are pytest node ids, so the command must run "
                             "pytest (e.g. \"python -m pytest -q\")")
        self.sandbox = Sandbox(self.clone.path, self.argv, sandbox)
        self.sandbox.require_executable(self.argv, self.clone.path)

    def _run(self, snap: Snapshot, tests: list[str]) -> TestRun:
        return run_tests(self.argv, snap.tree, self.timeout, sandbox=self.sandbox, tests=tests)

    def problem(self, base: Snapshot, problem: GoldProblem, finding: Finding | None, index: int | None) -> ProblemRun:
        f2p, p2p = problem_tests(problem)
        pid = problem.problem_id
        if not f2p:
            return ProblemRun(pid, "no fail_to_pass tests", index)
        if finding is None or not (finding.patch or "").strip():
            return ProblemRun(pid, "no matched finding with a patch", index)
        test_patch = (problem.model_extra or {}).get("test_patch")
        with base.copy() as without, base.copy() as patched:
            try:
                if test_patch:
                    without.apply(test_patch)
            except RuntimeError as exc:
                return ProblemRun(pid, f"test_patch does not apply at the anchor ({exc})"[:300], index)
            before = self._run(without, f2p)
            if not passing(before, f2p)[1]:
                return ProblemRun(pid, "fail_to_pass tests pass without the patch", index, seconds=before.seconds)
            try:
                patched.apply(finding.patch, recount=True)
            except RuntimeError as exc:
                return ProblemRun(pid, f"patch does not apply ({exc})"[:300], index)
            if test_patch:  # the model's patch first, then the tests as the problem states them
                reset_tests(patched, base, test_patch)
                patched.apply(test_patch)
            after = self._run(patched, f2p + p2p)
        concerns = patch_concerns(finding.patch)
        if after.timed_out:
            return ProblemRun(pid, "timed out", index, f2p + p2p, after.seconds, concerns)
        failing = passing(after, f2p + p2p)[1]
        status = UNRESOLVED if failing else FLAGGED if concerns else RESOLVED
        return ProblemRun(pid, status, index, failing, after.seconds, concerns)

    def __call__(self, instance: Instance, findings) -> dict | None:
        if not instance.anchor_commit:
            return None
        if not self.clone.has_commit(instance.anchor_commit):
            raise ValueError(f"{self.clone.path}: commit {instance.anchor_commit} (anchor of {instance.instance_id}) "
                             f"is not in this clone; fetch it or pass a clone of {instance.repo}")
        findings = as_findings(findings)
        best = match(instance.problems, findings).gold_best
        with self.clone.snapshot(instance.anchor_commit, None) as base:
            runs = [self.problem(base, p, findings[j] if j is not None else None, j)
                    for p, j in zip(instance.problems, best)]
        return {"resolved": sum(r.resolved for r in runs), "problems": len(runs),
                "runs": [asdict(r) for r in runs]}


def execution_rate(rows: list[dict]) -> dict | None:
    """Resolved / gold problems over the rows that were run with tests."""
    runs = [r["execution"] for r in rows if r.get("execution")]
    if not runs:
        return None
    resolved, problems = sum(r["resolved"] for r in runs), sum(r["problems"] for r in runs)
    return {"resolved": resolved, "problems": problems, "rate": resolved / problems if problems else 0.0,
            "instances": len(runs)}
