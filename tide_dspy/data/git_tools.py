"""Read-only access to a git clone, and scratch copies of a commit's files to try patches on.

The user's clone is only read (`git ls-tree`, `git archive`, `git log`); every patch is applied inside a temporary
directory that is not part of any repository.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from tide_dspy.util.diffs import hunks
from tide_dspy.util.git import run_git
from tide_dspy.util.safe_write import remove_tree


def _git(args: list[str], *, cwd: Path | None = None, input: bytes | None = None,
         check: bool = True) -> subprocess.CompletedProcess:
    # No repository discovery above a scratch directory: `git apply` then works on plain files.
    return run_git(args, cwd, input=input, text=False, check=check, isolated=True)


class GitClone:
    """A local clone, read but never written."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_dir() or _git(["rev-parse", "--git-dir"], cwd=self.path, check=False).returncode != 0:
            raise FileNotFoundError(f"{self.path}: not a git repository; pass a local clone with --repo")
        self._has_commit: dict[str, bool] = {}  # per clone: a clone's commits do not change while it is read
        self._commit_time: dict[str, int] = {}

    def git(self, *args: str, input: bytes | None = None) -> bytes:
        return _git(list(args), cwd=self.path, input=input).stdout

    def has_commit(self, sha: str) -> bool:
        if sha not in self._has_commit:
            self._has_commit[sha] = _git(["cat-file", "-e", "--end-of-options", f"{sha}^{{commit}}"], cwd=self.path,
                                         check=False).returncode == 0
        return self._has_commit[sha]

    def commit_time(self, sha: str) -> int:
        if sha not in self._commit_time:
            self._commit_time[sha] = int(self.git("log", "-1", "--format=%ct", "--end-of-options", sha, "--"))
        return self._commit_time[sha]

    def commit_date(self, sha: str) -> str:
        return datetime.fromtimestamp(self.commit_time(sha), UTC).isoformat()

    def existing(self, sha: str, paths: list[str]) -> list[str]:
        if not paths:
            return []
        listed = self.git("ls-tree", "-r", "--name-only", "--end-of-options", sha, "--", *paths).decode().splitlines()
        return [p for p in paths if p in set(listed)]

    def snapshot(self, sha: str, paths: list[str] | None) -> Snapshot:
        """A scratch directory holding those of `paths` that exist at `sha`, or (paths None) the commit's whole
        tree, via `git archive`."""
        if sha.startswith("-"):  # git archive (2.39) takes no --end-of-options before a pathspec
            raise ValueError(f"{sha!r} is not a commit")
        snap = Snapshot(Path(tempfile.mkdtemp(prefix="tide-snap-")))
        present = self.existing(sha, paths) if paths is not None else None
        if present is None or present:
            archive = self.git("archive", sha, *(["--", *present] if present else []))
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(snap.root / "tree", filter="data")
        else:
            (snap.root / "tree").mkdir()
        return snap


class Snapshot:
    """Files of one commit in a temporary directory (`root/tree`), where patches are checked and applied."""

    def __init__(self, root: Path):
        self.root = root

    @property
    def tree(self) -> Path:
        return self.root / "tree"

    def applies(self, patch: str, reverse: bool = False) -> bool:
        """`git apply --check` (no fuzz), forward or in reverse."""
        args = ["apply", "--check", *(["-R"] if reverse else []), "-"]
        return _git(args, cwd=self.tree, input=patch.encode(), check=False).returncode == 0

    def apply(self, patch: str, recount: bool = False) -> None:
        """Apply a unified diff; `recount` ignores the hunk headers' line counts, as `tide discover`'s check does."""
        text = patch if patch.endswith("\n") else patch + "\n"
        _git(["apply", *(["--recount"] if recount else []), "-"], cwd=self.tree, input=text.encode())

    def copy(self) -> Snapshot:
        other = Snapshot(Path(tempfile.mkdtemp(prefix="tide-snap-")))
        shutil.copytree(self.tree, other.tree, symlinks=True)
        return other

    def close(self) -> None:
        """Remove the directory, however deep, also where tests that ran in it (unsandboxed) took away their own
        permissions (util.safe_write.remove_tree)."""
        remove_tree(self.root)

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def changed_old_lines(old: Path, new: Path) -> list[tuple[int, int, list[str]]]:
    """Hunks of `git diff --no-index -U0 old new` as (first old line, old line count, inserted lines).

    A count of 0 is a pure insertion after old line `first`.
    """
    out = _git(["diff", "--no-index", "--no-color", "--no-ext-diff", "--no-textconv", "-U0", "--", str(old), str(new)],
               check=False).stdout
    return hunks(out.decode(errors="replace"))
