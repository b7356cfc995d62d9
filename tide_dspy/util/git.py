"""The one way tide-dspy runs git. Rules: user text never reaches git as an option (refs are resolved with
`--end-of-options` and only a validated sha is passed on; paths follow `--`), and a scratch directory never
discovers a repository above it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

SHA = re.compile(r"[0-9a-f]{40,64}")


def run_git(args: list[str], cwd: str | Path | None = None, *, input: bytes | str | None = None, text: bool = True,
            check: bool = False, isolated: bool = False) -> subprocess.CompletedProcess:
    """`git *args` in `cwd`, output captured. `isolated`: no repository discovery above `cwd`, so `git apply`
    works on plain files in a scratch directory. `check`: a failure raises RuntimeError with git's message."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(Path(cwd).parent)} if isolated and cwd else None
    if isinstance(input, str) and not text:
        input = input.encode()
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, env=env, text=text)
    except OSError as exc:
        if check:
            raise RuntimeError(f"git {' '.join(args[:3])} could not run: {exc}") from None
        return subprocess.CompletedProcess(["git", *args], 127, "" if text else b"", str(exc) if text else b"")
    if check and proc.returncode != 0:
        err = proc.stderr if text else proc.stderr.decode(errors="replace")
        raise RuntimeError(f"git {' '.join(args[:3])} failed: {err.strip()}")
    return proc


def git_toplevel(folder: str | Path) -> Path | None:
    """The top level of the git work tree that contains folder, or None outside any repository."""
    out = run_git(["rev-parse", "--show-toplevel"], folder)
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def resolve_commit(root: str | Path, ref: str) -> str | None:
    """The full sha of the commit `ref` (user text) names in `root`, or None; `ref` is never read as an option."""
    out = run_git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"], root)
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and SHA.fullmatch(sha) else None


def head_sha(cwd: str | Path, dirty_mark: bool = True) -> str | None:
    """HEAD of the repository at `cwd` (with "-dirty" when tracked files changed and `dirty_mark`), or None."""
    head = run_git(["rev-parse", "HEAD"], cwd)
    if head.returncode != 0:
        return None
    sha = head.stdout.strip()
    if not dirty_mark:
        return sha
    status = run_git(["status", "--porcelain", "--untracked-files=no"], cwd)
    if status.returncode != 0:
        return None
    return sha + ("-dirty" if status.stdout.strip() else "")
