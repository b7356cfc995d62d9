"""The one way tide-dspy runs git. Rules: user text never reaches git as an option (refs are resolved with
`--end-of-options` and only a validated sha is passed on; paths follow `--`), a scratch directory never discovers
a repository above it, and nothing a checkout's own configuration names is ever run.

A checkout can come from a stranger, `.git/config` included, and git runs commands that config names even for
read-only work: `core.fsmonitor` on every index read, clean/smudge filters when it compares or exports file
contents (`git diff`, `git status`, `git apply`, `git archive`), hooks, `gpg.program` for signatures. Every call
therefore overrides those keys on the command line (the scope that wins), with every filter driver the config
defines emptied, and reads neither the system nor the user's global config, so that what git does depends on
nothing outside the repository and tide-dspy.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

SHA = re.compile(r"[0-9a-f]{40,64}")

# Command-line config that switches off everything a repository's config could make git run in the commands
# tide-dspy uses. Filter drivers are named by the config itself, so those are found per repository (_filters).
SAFE_CONFIG = ("core.fsmonitor=false", f"core.hooksPath={os.devnull}", "log.showSignature=false",
               "core.untrackedCache=false")
SAFE_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_OPTIONAL_LOCKS": "0",
            "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}


def _environment(cwd: str | Path | None, isolated: bool) -> dict[str, str]:
    env = {**os.environ, **SAFE_ENV}
    if isolated and cwd:
        env["GIT_CEILING_DIRECTORIES"] = str(Path(cwd).parent)
    return env


def _filters(cwd: str | Path | None, env: dict[str, str]) -> list[str]:
    """`-c` options that empty every filter driver the repository's config defines (an empty command is no
    filter). Reading config runs nothing."""
    try:
        out = subprocess.run(["git", "config", "-z", "--name-only", "--get-regexp", r"^filter\."], cwd=cwd,
                             env=env, capture_output=True)
    except OSError:
        return []
    drivers = {key.split(".", 1)[1].rsplit(".", 1)[0] for key in out.stdout.decode(errors="replace").split("\0")
               if key.count(".") >= 2}
    return [arg for name in sorted(drivers) for key in ("clean", "smudge", "process")
            for arg in ("-c", f"filter.{name}.{key}=")]


def safe_config(cwd: str | Path | None, env: dict[str, str] | None = None) -> list[str]:
    """The `-c` options every git call on a checkout starts with."""
    env = env if env is not None else _environment(cwd, False)
    return [arg for c in SAFE_CONFIG for arg in ("-c", c)] + _filters(cwd, env)


def run_git(args: list[str], cwd: str | Path | None = None, *, input: bytes | str | None = None, text: bool = True,
            check: bool = False, isolated: bool = False) -> subprocess.CompletedProcess:
    """`git *args` in `cwd`, output captured, with the safe config above. `isolated`: no repository discovery
    above `cwd`, so `git apply` works on plain files in a scratch directory. `check`: a failure raises
    RuntimeError with git's message."""
    env = _environment(cwd, isolated)
    if isinstance(input, str) and not text:
        input = input.encode()
    try:
        proc = subprocess.run(["git", *safe_config(cwd, env), *args], cwd=cwd, input=input, capture_output=True,
                              env=env, text=text)
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
