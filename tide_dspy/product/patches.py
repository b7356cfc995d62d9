"""Check proposed patches against a working tree with `git apply --check`. Nothing is ever applied.

Patch paths are relative to the folder the user named. Inside a git repository, git apply reads patch paths
relative to the top level and silently skips paths outside the current directory, so the check runs from the top
level with `--directory=<folder relative to top>`. Outside any repository, git apply works on plain files in the
folder itself. `--recount` ignores the hunk headers' line counts, which LMs often get wrong; the hunk content still
has to match the tree.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from tide_dspy.util.diffs import patch_paths
from tide_dspy.util.git import git_toplevel, run_git

APPLIES = "applies"
DOES_NOT_APPLY = "does not apply"
NO_PATCH = "no patch"
CHECK_COMMAND = "git apply --check --recount"


@dataclass(frozen=True)
class PatchCheck:
    status: str  # APPLIES | DOES_NOT_APPLY | NO_PATCH
    reason: str = ""

    @property
    def applies(self) -> bool:
        return self.status == APPLIES


class PatchChecker:
    """Checks patches against one folder; finds the folder's repository once."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder).resolve()
        top = git_toplevel(self.folder)
        self.cwd = top.resolve() if top else self.folder
        prefix = self.folder.relative_to(self.cwd).as_posix() if top else "."
        self.args = CHECK_COMMAND.split()[1:] + ([f"--directory={prefix}"] if prefix != "." else [])

    def check(self, patch: str | None) -> PatchCheck:
        if not patch or not patch.strip():
            return PatchCheck(NO_PATCH, "the finding carries no patch")
        if not patch_paths(patch):
            return PatchCheck(DOES_NOT_APPLY, "not a unified diff (no 'diff --git a/... b/...' header with an @@ hunk)")
        text = patch if patch.endswith("\n") else patch + "\n"
        with tempfile.NamedTemporaryFile("w", suffix=".diff", delete=False, encoding="utf-8") as f:
            f.write(text)
            patch_file = Path(f.name)
        try:
            out = run_git([*self.args, "--", str(patch_file)], self.cwd)
        finally:
            patch_file.unlink(missing_ok=True)
        if out.returncode == 0:
            return PatchCheck(APPLIES)
        reason = " ".join(line.strip() for line in (out.stderr or out.stdout).splitlines() if line.strip())
        return PatchCheck(
            DOES_NOT_APPLY, reason.replace(str(patch_file), "<patch>")[:500] or f"git apply exited {out.returncode}"
        )
