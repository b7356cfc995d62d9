"""Run a project's own tests against proposed patches, each in a throwaway copy of the tree.

Running the tests executes the project's code and the model's patch, so this only happens when the user asks
(`--verify CMD`), and inside the sandbox of tide_dspy.sandbox (bubblewrap: no network, nothing of the machine
writable but the copy, none of the user's files or environment visible). The tree is copied once into a temporary
directory outside it (the files git lists, tracked or untracked-but-not-ignored, as they are in the working tree;
every file outside a git repository); symlinks that leave the tree are not copied, and neither is `.git`. Nothing
is ever written to the tree or its `.git`. CMD runs on the copy once unpatched (the baseline), then once per patch
in a fresh copy, without a shell, with per-run and total time limits, keeping only the tail of its output.

When CMD is pytest, `--junitxml` is added and the per-test outcomes are compared with the baseline's; otherwise
the command as a whole is the one check. A patch is a fix ("verified") only when a check that failed in the
baseline passes with it, and the patch touches neither tests, conftest.py, build or config files, binary files,
nor files outside its finding's evidence (sandbox.patch_concerns): such a patch is run, but "flagged".
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tide_dspy.data.git_tools import Snapshot
from tide_dspy.sandbox import (
    DEFAULT_RUN_TIMEOUT,
    OUTPUT_CAP,
    Sandbox,
    SandboxOptions,
    TestRun,
    VerifyError,
    parse_command,
    patch_concerns,
    run_tests,
    size_text,
)
from tide_dspy.util.git import git_toplevel, run_git

VERIFIED = "verified"
NO_CHANGE = "no change"
BREAKS = "breaks tests"
TIMED_OUT = "timed out"
NOT_RUN = "not run"
FLAGGED = "flagged"  # ran, but touches what decides its own result (tests, config, ...): never a verified fix
# Report order: fixes first, never-run patches before flagged and known-bad ones.
STATUS_RANK = {VERIFIED: 0, NO_CHANGE: 1, NOT_RUN: 2, FLAGGED: 3, BREAKS: 4, TIMED_OUT: 5}

DEFAULT_TOTAL_TIMEOUT = 900.0


@dataclass(frozen=True)
class PatchVerification:
    """What running the tests with one patch showed."""

    status: str  # VERIFIED | NO_CHANGE | FLAGGED | BREAKS | TIMED_OUT | NOT_RUN
    fixed: list[str] = field(default_factory=list)  # checks that failed in the baseline and pass with the patch
    broken: list[str] = field(default_factory=list)  # checks that passed in the baseline and fail with it
    seconds: float = 0.0
    returncode: int | None = None
    reason: str = ""  # why it was not run, or the tail of a failing run's output
    output_bytes: int = 0
    concerns: list[str] = field(default_factory=list)  # sandbox.patch_concerns: why it cannot count as a fix

    @property
    def label(self) -> str:
        flagged = f" (flagged: {'; '.join(self.concerns)})" if self.concerns else ""
        if self.status == VERIFIED:
            return f"verified: fixes {len(self.fixed)}, breaks {len(self.broken)}"
        if self.status == FLAGGED:
            return f"not verified{flagged}: fixes {len(self.fixed)}, breaks {len(self.broken)}"
        if self.status == NOT_RUN:
            return f"not run: {self.reason}{flagged}"
        return self.status + flagged

    def to_dict(self) -> dict:
        return {"label": self.label, **asdict(self)}


def classify(baseline: dict[str, bool], patched: dict[str, bool]) -> tuple[list[str], list[str]]:
    """(fixed, broken) checks between two runs; a check missing from the patched run counts as failing."""
    fixed = [c for c, ok in baseline.items() if not ok and patched.get(c, False)]
    broken = [c for c, ok in baseline.items() if ok and not patched.get(c, False)]
    return fixed, broken


# ---- the copy ----

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


def check_size(root: Path, files: list[str], disk: int | None) -> None:
    """Refuse a tree whose files hold more than `disk` bytes in all (the quota of the copy and the run, --verify-limit
    disk), before anything is copied. Sizes are the files' apparent sizes: a sparse file is written out whole by
    the copy, so it counts whole."""
    if disk is None:
        return
    sizes = []
    for rel in files:
        try:
            st = os.lstat(root / rel)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            sizes.append((st.st_size, rel, st.st_blocks * 512 < st.st_size))
    total = sum(size for size, _, _ in sizes)
    if total <= disk:
        return
    largest = ", ".join(f"{rel} ({size_text(size)}{', sparse' if sparse else ''})"
                        for size, rel, sparse in sorted(sizes, reverse=True)[:3])
    raise VerifyError(f"--verify: the tree to copy holds {size_text(total)} in {len(sizes)} files, more than the "
                      f"{size_text(disk)} the copy and the run may use (largest: {largest}; a sparse file counts at "
                      "its full size, since the copy writes it out whole); leave the large files out of the tree "
                      "(git ignores them, or move them), or raise --verify-limit disk=SIZE")


def copy_tree(root: Path, dest: Path, disk: int | None = None) -> list[str]:
    """Copy root's files into dest (which must be outside root), refusing a tree over `disk` bytes (check_size).
    Returns the links left out because they point outside root (or are absolute)."""
    root = root.resolve()
    if dest.resolve().is_relative_to(root):
        raise VerifyError(f"the temporary directory {dest} lies inside {root}; set TMPDIR to a folder outside it")
    files = tree_files(root)
    check_size(root, files, disk)
    left_out = []
    for rel in files:
        src, dst = root / rel, dest / rel
        if not src.parent.resolve().is_relative_to(root):
            left_out.append(rel)
            continue
        if src.is_symlink():
            target = os.readlink(src)
            if os.path.isabs(target) or not (src.parent / target).resolve().is_relative_to(root):
                left_out.append(rel)
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, dst)
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    return left_out


class Verifier:
    """Copies `root` once, runs `command` there unpatched, then verifies patches one fresh copy at a time, each
    run in the sandbox `sandbox` describes.

    Use as a context manager; the temporary copies are removed on exit."""

    def __init__(self, root: str | Path, command: str, *, run_timeout: float = DEFAULT_RUN_TIMEOUT,
                 total_timeout: float = DEFAULT_TOTAL_TIMEOUT, output_cap: int = OUTPUT_CAP,
                 sandbox: SandboxOptions = SandboxOptions()):
        self.command = command
        self.argv = parse_command(command)
        self.run_timeout, self.output_cap = run_timeout, output_cap
        self.deadline = time.monotonic() + total_timeout
        self.pristine = Snapshot(Path(tempfile.mkdtemp(prefix="tide-verify-")))
        try:
            self.pristine.tree.mkdir()
            self.left_out = copy_tree(Path(root), self.pristine.tree, sandbox.limits.disk)
            self.sandbox = Sandbox(root, self.argv, sandbox)
            self.sandbox.require_executable(self.argv, self.pristine.tree)
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
        return run_tests(self.argv, snap.tree, timeout, sandbox=self.sandbox, output_cap=self.output_cap)

    def run_baseline(self) -> TestRun:
        with self.pristine.copy() as snap:
            self.baseline = self._run(snap, min(self.run_timeout, self._time_left()))
        if self.baseline.timed_out:
            raise VerifyError(f"--verify: the unpatched run of {self.command!r} timed out after "
                              f"{self.baseline.seconds:.0f} s, so no patch can be compared with it; raise "
                              f"--verify-timeout or choose a faster command")
        return self.baseline

    def verify(self, patch: str | None, evidence: list[str] | None = None) -> PatchVerification:
        """The outcome of the tests with `patch`; `evidence`: the files of its finding (None: not checked)."""
        if self.baseline is None:
            raise RuntimeError("run_baseline() first")
        if not patch or not patch.strip():
            return PatchVerification(NOT_RUN, reason="no patch")
        concerns = patch_concerns(patch, evidence)
        left = min(self.run_timeout, self._time_left())
        if left <= 1:
            return PatchVerification(NOT_RUN, reason="the total --verify time limit was used up", concerns=concerns)
        with self.pristine.copy() as snap:
            try:
                snap.apply(patch, recount=True)
            except RuntimeError as exc:
                return PatchVerification(NOT_RUN, reason=f"the patch does not apply ({exc})"[:500], concerns=concerns)
            run = self._run(snap, left)
        if run.timed_out:
            return PatchVerification(TIMED_OUT, seconds=run.seconds, reason=f"killed after {run.seconds:.1f} s",
                                output_bytes=run.output_bytes, concerns=concerns)
        base = self.baseline.checks(self.command)
        fixed, broken = classify(
            base, run.checks(self.command) if self.baseline.outcomes else {self.command: run.passed}
        )
        status = VERIFIED if fixed else BREAKS if broken else NO_CHANGE
        if concerns and status != BREAKS:
            status = FLAGGED
        return PatchVerification(status, fixed=fixed, broken=broken, seconds=run.seconds, returncode=run.returncode,
                            reason="" if run.passed else run.output[-2000:], output_bytes=run.output_bytes,
                            concerns=concerns)
