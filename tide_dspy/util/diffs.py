"""Unified diffs: which paths a patch touches, and the hunks of a diff. The one parser of `diff --git` text."""

from __future__ import annotations

import re

DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.M)
HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", re.M)


def looks_like_diff(text: str) -> bool:
    """Whether `text` starts like a unified diff (a `diff --git`, `--- ` or `@@` line)."""
    return text.lstrip().startswith(("diff --git", "--- ", "@@"))


def patch_paths(patch: str) -> list[str]:
    """New-side paths a unified diff touches, or [] when it does not parse as one (no @@ hunk)."""
    if not HUNK_HEADER.search(patch or ""):
        return []
    paths = [m.group(2) for m in DIFF_HEADER.finditer(patch)]
    paths += [p for p in re.findall(r"^\+\+\+ b/(\S+)", patch, re.M) if p not in paths]
    return paths


def touched_paths(patch: str) -> list[str]:
    """Old and new paths of every file a unified diff touches."""
    old = re.findall(r"^--- a/(\S+)", patch, re.M)
    return list(dict.fromkeys(old + patch_paths(patch)))


def patch_files(patch: str) -> list[str]:
    """Every path a patch names, with or without hunks (binary, mode-only and rename entries too): both sides of
    each `diff --git` header and each `--- a/` / `+++ b/` line."""
    header = [p for m in DIFF_HEADER.finditer(patch or "") for p in m.groups()]
    return list(dict.fromkeys(header + touched_paths(patch or "")))


def hunks(diff: str) -> list[tuple[int, int, list[str]]]:
    """Hunks of a diff as (first old line, old line count, inserted lines); a count of 0 is a pure insertion after
    old line `first`. Lines before the first hunk (the file header) are ignored."""
    found: list[tuple[int, int, list[str]]] = []
    for line in diff.splitlines():
        if m := HUNK_HEADER.match(line):
            found.append((int(m.group(1)), int(m.group(2) or 1), []))
        elif found and line.startswith("+"):
            found[-1][2].append(line[1:])
    return found


def diff_problem(patch: str) -> str | None:
    """Why `patch` is not a well-formed unified diff, or None: it needs a file header with an @@ hunk, and each
    hunk's lines must add up to the counts of its @@ header (as `git apply` requires)."""
    if not patch_paths(patch):
        return "no 'diff --git a/... b/...' or '+++ b/...' header with an @@ hunk"
    old = new = 0
    in_file = False  # after a hunk of the current file, before the next header
    for number, line in enumerate(patch.splitlines(), 1):
        if old > 0 or new > 0:
            if line.startswith("\\"):  # "\ No newline at end of file"
                continue
            mark = line[:1] or " "  # an empty line is a blank context line
            if mark not in " -+":
                return f"line {number}: the hunk ends {old} old and {new} new lines short of its @@ counts"
            old -= mark in " -"
            new -= mark in " +"
            if old < 0 or new < 0:
                return f"line {number}: the hunk runs past the counts of its @@ header"
        elif m := HUNK_HEADER.match(line):
            old, new, in_file = int(m.group(2) or 1), int(m.group(4) or 1), True
        elif line.startswith(("diff --git ", "--- ", "+++ ")):
            in_file = False
        elif in_file and line[:1] in ("+", "-", " ") and line.strip():
            return f"line {number}: the hunk runs past the counts of its @@ header"
    if old > 0 or new > 0:
        return f"the last hunk ends {old} old and {new} new lines short of its @@ counts"
    return None
