"""Run a project's own tests against proposed patches, each in a throwaway copy of the tree.

Running the tests executes the project's code, so this only happens when the user asks (`--verify CMD`). The tree
is copied once into a temporary directory outside it (the files git lists, tracked or untracked-but-not-ignored,
as they are in the working tree; every file outside a git repository); symlinks that leave the tree are not
copied. Nothing is ever written to the tree or its `.git`. CMD runs there once unpatched (the baseline), then once
per patch in a fresh copy, without a shell, with secret-looking variables removed from its environment, in its own
process group (killed whole on timeout), with per-run and total time limits, keeping only the tail of its output.

When CMD is pytest, `--junitxml` is added and the per-test outcomes are compared with the baseline's; otherwise
the command as a whole is the one check. A patch is a fix ("verified") only when a check that failed in the
baseline passes with it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tide_dspy.util.secrets import scrub_secrets
from tide_dspy.data.git_tools import Snapshot
from tide_dspy.util.git import git_toplevel, run_git

VERIFIED = "verified"
NO_CHANGE = "no change"
BREAKS = "breaks tests"
TIMED_OUT = "timed out"
NOT_RUN = "not run"
# Report order: fixes first, never-run patches before known-bad ones.
STATUS_RANK = {VERIFIED: 0, NO_CHANGE: 1, NOT_RUN: 2, BREAKS: 3, TIMED_OUT: 4}

DEFAULT_RUN_TIMEOUT = 120.0
DEFAULT_TOTAL_TIMEOUT = 900.0
OUTPUT_CAP = 64 * 1024  # bytes of output kept per run (the tail)
PASSED, FAILED, ERROR, SKIPPED, MISSING = "passed", "failed", "error", "skipped", "missing"


class VerifyError(ValueError):
    """The verification cannot run at all (command not found, baseline timed out, ...); the message says why."""


@dataclass(frozen=True)
class TestRun:
    """One run of the test command."""

    argv: list[str]
    returncode: int | None  # None when it timed out
    timed_out: bool
    seconds: float
    outcomes: dict[str, str]  # test id -> passed | failed | error | skipped, from pytest's junit XML
    output: str  # the last OUTPUT_CAP bytes of stdout and stderr
    output_bytes: int  # all of it

    @property
    def passed(self) -> bool:
        return not self.timed_out and self.returncode == 0

    def checks(self, command: str) -> dict[str, bool]:
        """Check -> passed: each test when junit XML was read, else the command as a whole."""
        if self.outcomes:
            return {t: o in (PASSED, SKIPPED) for t, o in self.outcomes.items()}
        return {command: self.passed}

    def describe(self) -> str:
        if self.timed_out:
            return f"timed out after {self.seconds:.1f} s"
        counts = {}
        for o in self.outcomes.values():
            counts[o] = counts.get(o, 0) + 1
        tests = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
        return f"exit {self.returncode}" + (f", {tests}" if tests else "") + f", {self.seconds:.1f} s"


@dataclass(frozen=True)
class Verification:
    """What running the tests with one patch showed."""

    status: str  # VERIFIED | NO_CHANGE | BREAKS | TIMED_OUT | NOT_RUN
    fixed: list[str] = field(default_factory=list)  # checks that failed in the baseline and pass with the patch
    broken: list[str] = field(default_factory=list)  # checks that passed in the baseline and fail with it
    seconds: float = 0.0
    returncode: int | None = None
    reason: str = ""  # why it was not run, or the tail of a failing run's output
    output_bytes: int = 0

    @property
    def label(self) -> str:
        if self.status == VERIFIED:
            return f"verified: fixes {len(self.fixed)}, breaks {len(self.broken)}"
        if self.status == NOT_RUN:
            return f"not run: {self.reason}"
        return self.status

    def to_dict(self) -> dict:
        return {"label": self.label, **asdict(self)}


def classify(baseline: dict[str, bool], patched: dict[str, bool]) -> tuple[list[str], list[str]]:
    """(fixed, broken) checks between two runs; a check missing from the patched run counts as failing."""
    fixed = [c for c, ok in baseline.items() if not ok and patched.get(c, False)]
    broken = [c for c, ok in baseline.items() if ok and not patched.get(c, False)]
    return fixed, broken


# ---- the command ----

def parse_command(command: str) -> list[str]:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise VerifyError(f"--verify {command!r}: cannot split it into arguments ({exc}); check the quotes") from None
    if not argv:
        raise VerifyError("--verify needs a test command, e.g. --verify \"python -m pytest -q\"")
    return argv


def is_pytest(argv: list[str]) -> bool:
    name = Path(argv[0]).name
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
    return name in ("pytest", "py.test") or module == "pytest"


def with_junit(argv: list[str], junit: Path) -> list[str]:
    return [*argv, f"--junitxml={junit}"] if is_pytest(argv) else list(argv)


def test_environment() -> dict[str, str]:
    """This process's environment without API keys, tokens, passwords and URL credentials."""
    return {k: str(v) for k, v in scrub_secrets(dict(os.environ)).items()}


def require_executable(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    exe = argv[0]
    if "/" in exe:
        found = (cwd / exe).is_file() and os.access(cwd / exe, os.X_OK)
    else:
        found = shutil.which(exe, path=env.get("PATH", os.defpath)) is not None
    if not found:
        raise VerifyError(f"--verify: the command {exe!r} was not found" + ("" if "/" in exe else " on PATH") +
                          "; give its full path or install it (e.g. --verify \"python -m pytest -q\")")


def junit_id(classname: str, name: str) -> str:
    return f"{classname}::{name}" if classname else name


def nodeid_key(nodeid: str) -> str:
    """The junit_id of a pytest node id (tests/test_a.py::TestX::test_y[1] -> tests.test_a.TestX::test_y[1])."""
    parts = nodeid.split("::")
    module = parts[0].removesuffix(".py").replace("/", ".")
    return junit_id(".".join([module, *parts[1:-1]]), parts[-1]) if len(parts) > 1 else module


def read_junit(path: Path) -> dict[str, str]:
    """Test id -> outcome of a pytest junit XML file; {} when it is missing or unreadable."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    outcomes = {}
    for case in root.iter("testcase"):
        kinds = {child.tag for child in case}
        outcome = ERROR if "error" in kinds else FAILED if "failure" in kinds else SKIPPED if "skipped" in kinds else PASSED
        test = junit_id(case.get("classname", ""), case.get("name", ""))
        if outcomes.get(test) not in (FAILED, ERROR):  # a teardown error is reported as a second entry
            outcomes[test] = outcome
    return outcomes


class _Tail:
    """Reads a pipe to its end in a thread, keeping only the last `cap` bytes."""

    def __init__(self, pipe, cap: int):
        self.data, self.total, self.cap, self.pipe = bytearray(), 0, cap, pipe
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for chunk in iter(lambda: self.pipe.read1(65536), b""):
            self.total += len(chunk)
            self.data += chunk
            del self.data[:-self.cap]
        self.pipe.close()

    def text(self) -> str:
        """The tail so far. A process that left the group (setsid) may hold the pipe open; it is not waited for."""
        self.thread.join(timeout=5)
        return bytes(self.data).decode(errors="replace")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_tests(argv: list[str], cwd: Path, timeout: float, *, env: dict[str, str] | None = None,
              junit: Path | None = None, tests: list[str] = (), output_cap: int = OUTPUT_CAP) -> TestRun:
    """Run argv (then `tests`, e.g. pytest node ids) in cwd, without a shell, in its own process group, which is
    killed whole after `timeout` seconds."""
    env = test_environment() if env is None else env
    require_executable(argv, cwd, env)
    full = [*(with_junit(argv, junit) if junit is not None else argv), *tests]
    started = time.perf_counter()
    try:
        proc = subprocess.Popen(full, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        raise VerifyError(f"--verify: cannot start {argv[0]!r}: {exc.strerror or exc}") from None
    tail = _Tail(proc.stdout, output_cap)
    timed_out = False
    try:
        proc.wait(timeout=max(timeout, 0.1))
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        _kill_group(proc.pid)  # on timeout, and any background child left behind
        proc.wait()
    output = tail.text()
    outcomes = read_junit(junit) if junit is not None and not timed_out else {}
    return TestRun(argv=full, returncode=None if timed_out else proc.returncode, timed_out=timed_out,
                   seconds=round(time.perf_counter() - started, 2), outcomes=outcomes, output=output,
                   output_bytes=tail.total)


# ---- the copy ----

def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def tree_files(root: Path) -> list[str]:
    """Relative paths to copy: in a git work tree, the files git lists under root (tracked, and untracked but not
    ignored), else every file and link below root except .git folders."""
    if git_toplevel(root) is not None:
        out = run_git(["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."], root)
        if out.returncode != 0:
            raise VerifyError(f"{root}: git ls-files failed: {out.stderr.strip()}")
        return sorted(set(p for p in out.stdout.split("\0") if p))
    found = []
    for dirpath, dirnames, filenames in os.walk(root):  # never follows links
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if d != ".git" and not (here / d).is_symlink()]
        links = [d for d in os.listdir(here) if (here / d).is_symlink() and (here / d).is_dir()]
        found += [(here / f).relative_to(root).as_posix() for f in [*filenames, *links]]
    return sorted(found)


def copy_tree(root: Path, dest: Path) -> list[str]:
    """Copy root's files into dest (which must be outside root). Returns the links left out because they point
    outside root (or are absolute)."""
    root = root.resolve()
    if _inside(dest.resolve(), root):
        raise VerifyError(f"the temporary directory {dest} lies inside {root}; set TMPDIR to a folder outside it")
    left_out = []
    for rel in tree_files(root):
        src, dst = root / rel, dest / rel
        if not _inside(src.parent.resolve(), root):
            left_out.append(rel)
            continue
        if src.is_symlink():
            target = os.readlink(src)
            if os.path.isabs(target) or not _inside((src.parent / target).resolve(), root):
                left_out.append(rel)
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, dst)
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    return left_out


class Verifier:
    """Copies `root` once, runs `command` there unpatched, then verifies patches one fresh copy at a time.

    Use as a context manager; the temporary copies are removed on exit."""

    def __init__(self, root: str | Path, command: str, *, run_timeout: float = DEFAULT_RUN_TIMEOUT,
                 total_timeout: float = DEFAULT_TOTAL_TIMEOUT, output_cap: int = OUTPUT_CAP):
        self.command = command
        self.argv = parse_command(command)
        self.run_timeout, self.output_cap = run_timeout, output_cap
        self.deadline = time.monotonic() + total_timeout
        self.env = test_environment()
        self.pristine = Snapshot(Path(tempfile.mkdtemp(prefix="tide-verify-")))
        try:
            self.pristine.tree.mkdir()
            self.left_out = copy_tree(Path(root), self.pristine.tree)
            require_executable(self.argv, self.pristine.tree, self.env)
        except BaseException:
            self.pristine.close()
            raise
        self.baseline: TestRun | None = None

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.pristine.close()

    def _time_left(self) -> float:
        return self.deadline - time.monotonic()

    def _run(self, snap: Snapshot, timeout: float) -> TestRun:
        return run_tests(self.argv, snap.tree, timeout, env=self.env, junit=snap.root / "junit.xml",
                         output_cap=self.output_cap)

    def run_baseline(self) -> TestRun:
        with self.pristine.copy() as snap:
            self.baseline = self._run(snap, min(self.run_timeout, self._time_left()))
        if self.baseline.timed_out:
            raise VerifyError(f"--verify: the unpatched run of {self.command!r} timed out after "
                              f"{self.baseline.seconds:.0f} s, so no patch can be compared with it; raise "
                              f"--verify-timeout or choose a faster command")
        return self.baseline

    def verify(self, patch: str | None) -> Verification:
        if self.baseline is None:
            raise RuntimeError("run_baseline() first")
        if not patch or not patch.strip():
            return Verification(NOT_RUN, reason="no patch")
        left = min(self.run_timeout, self._time_left())
        if left <= 1:
            return Verification(NOT_RUN, reason="the total --verify time limit was used up")
        with self.pristine.copy() as snap:
            try:
                snap.apply(patch, recount=True)
            except RuntimeError as exc:
                return Verification(NOT_RUN, reason=f"the patch does not apply ({exc})"[:500])
            run = self._run(snap, left)
        if run.timed_out:
            return Verification(TIMED_OUT, seconds=run.seconds, reason=f"killed after {run.seconds:.1f} s",
                                output_bytes=run.output_bytes)
        base = self.baseline.checks(self.command)
        fixed, broken = classify(base, run.checks(self.command) if self.baseline.outcomes else {self.command: run.passed})
        status = VERIFIED if fixed else BREAKS if broken else NO_CHANGE
        return Verification(status, fixed=fixed, broken=broken, seconds=run.seconds, returncode=run.returncode,
                            reason="" if run.passed else run.output[-2000:], output_bytes=run.output_bytes)
