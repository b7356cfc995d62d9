"""Unified diffs: which files a patch touches, read the way `git apply` reads them, and the hunks of a diff. The one
parser of patch text: every check of a patch (what it touches, whether it is a diff at all) goes through
`parse_patch`.

`git apply` (run with its default -p1) strips the first path component of the names in a `diff --git` line and in
`---`/`+++` lines, whatever that component is (`a/`, `x/`, ...); it reads names quoted C-style (`"a/caf\\303\\251.py"`,
as git writes any name with a non-ASCII byte, a quote or a control character), takes the names of `rename from`,
`rename to`, `copy from` and `copy to` lines as they are, and applies sections with no hunk at all (a rename, a
copy, a mode change, an empty new file). A parser that knows less than git would let a patch change a file the
checks never saw, so this one follows git's rules, and takes every name a section gives (the union, when they
disagree; git itself refuses such a patch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", re.M)
_HUNK_LINE = re.compile(r"@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")
DEV_NULL = "/dev/null"
# git's extended header lines (apply.c, parse_git_diff_header) and what each tells about the section.
_NAME_LINES = {"rename from ": "old", "rename old ": "old", "copy from ": "old",
               "rename to ": "new", "rename new ": "new", "copy to ": "new"}
_EXTENDED = ("old mode ", "new mode ", "deleted file mode ", "new file mode ", "similarity index ",
             "dissimilarity index ", "index ", *_NAME_LINES)
_ESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, '"': 34}


@dataclass
class FilePatch:
    """One file's section of a patch: its names before and after (None for /dev/null: created or deleted), how
    many hunks it has, and whether git would apply it without one (binary data, a rename, copy or mode change)."""

    old: str | None = None
    new: str | None = None
    hunks: int = 0
    binary: bool = False
    extended: bool = False  # a git extended header line that changes the file by itself (rename, copy, mode, ...)
    names: tuple[str, ...] = ()  # every name the section gives, stripped as git strips it

    @property
    def applies_without_hunks(self) -> bool:
        return self.binary or self.extended


def unquote(text: str) -> tuple[str, str]:
    """(name, rest) of a C-style quoted name at the start of `text` (git's unquote_c_style): escapes and octal
    bytes decoded, the bytes read as UTF-8. A name without a closing quote is returned as it stands."""
    if not text.startswith('"'):
        return text, ""
    out, i = bytearray(), 1
    while i < len(text):
        c = text[i]
        if c == '"':
            return out.decode("utf-8", errors="replace"), text[i + 1:]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
            if re.fullmatch(r"[0-3][0-7][0-7]", text[i + 1:i + 4]):
                out.append(int(text[i + 1:i + 4], 8))
                i += 4
                continue
        out += c.encode("utf-8")
        i += 1
    return text, ""


def strip_prefix(name: str | None) -> str | None:
    """The name git applies with -p1: its first path component removed (`a/x.py`, `x/x.py` -> `x.py`); a name with
    no `/` stays as it is; /dev/null is None."""
    if name is None or name == DEV_NULL:
        return None
    return name.split("/", 1)[1] if "/" in name else name


def _plain_name(text: str) -> str | None:
    """The name of a `---`/`+++` or `rename from` line: quoted, or up to a tab (a traditional diff's timestamp)."""
    text = text.rstrip("\n")
    if text.startswith('"'):
        return unquote(text)[0]
    return text.split("\t", 1)[0].rstrip() or None


def _header_names(rest: str) -> list[str]:
    """The names of a `diff --git` line, prefixes stripped, as git_header_name reads them: quoted names, or two
    equal halves (a name with spaces); else both halves of the first space (git would ask the other lines)."""
    rest = rest.rstrip("\n")
    if rest.startswith('"'):
        first, tail = unquote(rest)
        second = unquote(tail.lstrip(" "))[0] if tail.lstrip(" ").startswith('"') else tail.strip()
        return [n for n in (strip_prefix(first), strip_prefix(second)) if n]
    if ' "' in rest:
        first, _, second = rest.partition(' "')
        return [n for n in (strip_prefix(first), strip_prefix(unquote('"' + second)[0])) if n]
    for i, ch in enumerate(rest):
        if ch == " " and strip_prefix(rest[:i]) and strip_prefix(rest[:i]) == strip_prefix(rest[i + 1:]):
            return [strip_prefix(rest[:i])]
    left, _, right = rest.partition(" ")
    return [n for n in (strip_prefix(left), strip_prefix(right)) if n]


def parse_patch(patch: str | None) -> list[FilePatch]:
    """The file sections of a patch, as `git apply` would find them: each `diff --git` section, and each
    traditional `---`/`+++` pair followed by a hunk. Text before the first section is ignored, as git ignores it."""
    files: list[FilePatch] = []
    current: FilePatch | None = None
    in_git_header = False
    lines = (patch or "").splitlines()
    for n, line in enumerate(lines):
        if line.startswith("diff --git "):
            current = FilePatch()
            current.names = tuple(_header_names(line[len("diff --git "):]))
            files.append(current)
            in_git_header = True
            continue
        if line.startswith("--- ") and n + 1 < len(lines) and lines[n + 1].startswith("+++ "):
            old = strip_prefix(_plain_name(line[4:]))
            new = strip_prefix(_plain_name(lines[n + 1][4:]))
            if not in_git_header:  # a traditional diff: a section only when a hunk follows
                if n + 2 >= len(lines) or not _HUNK_LINE.match(lines[n + 2]):
                    continue
                current = FilePatch()
                files.append(current)
            current.old, current.new = old, new
            current.names += tuple(x for x in (old, new) if x)
            in_git_header = False
            continue
        if current is None:
            continue
        if line.startswith("@@ ") and _HUNK_LINE.match(line):
            current.hunks += 1
            in_git_header = False
        elif line.startswith("GIT binary patch") or (line.startswith("Binary files ") and line.endswith(" differ")):
            current.binary = True
        elif in_git_header and line.startswith(_EXTENDED):
            prefix = next(p for p in _EXTENDED if line.startswith(p))
            if prefix in _NAME_LINES:
                name = _plain_name(line[len(prefix):])
                if name:
                    current.names += (name,)
                    setattr(current, _NAME_LINES[prefix], name)
            if prefix not in ("index ", "similarity index ", "dissimilarity index "):
                current.extended = True
    for f in files:
        f.names = tuple(dict.fromkeys(f.names))
        if f.new is None and f.old is None and f.names:  # a git section without ---/+++ lines: its header names
            f.old = f.new = f.names[-1]
    return files


def looks_like_diff(text: str) -> bool:
    """Whether `text` starts like a unified diff (a `diff --git`, `--- ` or `@@` line)."""
    return text.lstrip().startswith(("diff --git", "--- ", "@@"))


def patch_paths(patch: str | None) -> list[str]:
    """The paths a patch leaves changed (the new side; the old one for a deletion), or [] when it is not a patch
    `git apply` would take: no file section with a hunk, or with a rename, copy, mode change or binary data."""
    files = [f for f in parse_patch(patch) if f.hunks or f.applies_without_hunks]
    return list(dict.fromkeys(p for f in files for p in [f.new or f.old] if p))


def patch_files(patch: str | None) -> list[str]:
    """Every path a patch names, on either side of every section (binary, mode-only, rename and copy entries
    too), as git applies it."""
    return list(dict.fromkeys(name for f in parse_patch(patch) for name in f.names))


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
