"""Execution-based resolution of repository instances: run each gold problem's tests with the matched finding's patch.

For each gold problem, the finding that retrieval matching pairs with it (the one the judge's resolution coverage
scores) is taken. The commit `anchor_commit` of the user's local clone is copied to a temporary directory (the clone
is only read), the problem's `test_patch` is applied, and its `fail_to_pass` and `pass_to_pass` tests (pytest node
ids) run once without the finding's patch and once with it. The problem is resolved when every one of those tests
passes with the patch and some `fail_to_pass` test failed without it. The clone, and an environment in which its
tests run, are the user's to provide; running the tests executes the repository's code.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from tide_dspy.data.git_tools import GitClone, Snapshot
from tide_dspy.product.verify import (DEFAULT_RUN_TIMEOUT, TestRun, is_pytest, nodeid_key, parse_command,
                                      require_executable, run_tests, test_environment)
from tide_dspy.metrics.scoring import as_findings, match
from tide_dspy.schemas import Finding, GoldProblem, Instance

RESOLVED = "resolved"
UNRESOLVED = "unresolved"
DEFAULT_TEST_COMMAND = "python -m pytest -q -p no:cacheprovider"


@dataclass(frozen=True)
class ProblemRun:
    """The tests of one gold problem, run with the patch of the finding matched to it."""

    problem_id: str
    status: str  # resolved | unresolved | a reason it could not be judged by execution
    finding: int | None = None  # index of the matched finding
    failing: list[str] = field(default_factory=list)  # fail_to_pass / pass_to_pass tests that did not pass
    seconds: float = 0.0

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


def passing(run: TestRun, tests: list[str]) -> tuple[list[str], list[str]]:
    """(passed, not passed) of these node ids in a run."""
    ok = [t for t in tests if run.outcomes.get(nodeid_key(t)) == "passed"]
    return ok, [t for t in tests if t not in ok]


class ExecutionJudge:
    """Runs instances' tests in copies of a local clone; `None` for instances without `anchor_commit`."""

    def __init__(self, clone: str | Path, command: str = DEFAULT_TEST_COMMAND,
                 timeout: float = DEFAULT_RUN_TIMEOUT):
        self.clone = GitClone(clone)
        self.command, self.argv, self.timeout = command, parse_command(command), timeout
        if not is_pytest(self.argv):
            raise ValueError(f"--verify-command {command!r}: the tests are pytest node ids, so the command must run "
                             "pytest (e.g. \"python -m pytest -q\")")
        self.env = test_environment()
        require_executable(self.argv, self.clone.path, self.env)

    def _run(self, snap: Snapshot, tests: list[str]) -> TestRun:
        return run_tests(self.argv, snap.tree, self.timeout, env=self.env, junit=snap.root / "junit.xml", tests=tests)

    def problem(self, base: Snapshot, problem: GoldProblem, finding: Finding | None, index: int | None) -> ProblemRun:
        f2p, p2p = problem_tests(problem)
        pid = problem.problem_id
        if not f2p:
            return ProblemRun(pid, "no fail_to_pass tests", index)
        if finding is None or not (finding.patch or "").strip():
            return ProblemRun(pid, "no matched finding with a patch", index)
        test_patch = (problem.model_extra or {}).get("test_patch")
        with base.copy() as without:
            try:
                if test_patch:
                    without.apply(test_patch)
            except RuntimeError as exc:
                return ProblemRun(pid, f"test_patch does not apply at the anchor ({exc})"[:300], index)
            with without.copy() as patched:
                before = self._run(without, f2p)
                if not passing(before, f2p)[1]:
                    return ProblemRun(pid, "fail_to_pass tests pass without the patch", index, seconds=before.seconds)
                try:
                    patched.apply(finding.patch, recount=True)
                except RuntimeError as exc:
                    return ProblemRun(pid, f"patch does not apply ({exc})"[:300], index)
                after = self._run(patched, f2p + p2p)
        if after.timed_out:
            return ProblemRun(pid, "timed out", index, f2p + p2p, after.seconds)
        failing = passing(after, f2p + p2p)[1]
        return ProblemRun(pid, UNRESOLVED if failing else RESOLVED, index, failing, after.seconds)

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
