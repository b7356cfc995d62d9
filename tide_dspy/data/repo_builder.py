"""Build multi-bug repository instances from SWE-bench-format rows and a local clone (`tide data build-repo`).

The rules are those of the shared repository data set's README:
1. anchors are the rows' distinct base_commits;
2. a row is unresolved at anchor A when its gold patch applies at A (`git apply --check`, no fuzz) and its
   reverse does not;
3. greedy grouping: take the anchor with most unresolved, unused rows; add rows by closeness of their
   base_commit's date to A while the row has a buggy function, all chosen patches still apply jointly, the pool
   stays <= max_candidates functions and the group <= max_problems; keep groups with >= 2 problems on >= 2
   functions, then repeat;
4. functions come from `parse_candidates` on A's files;
5. evidence: functions holding a changed or deleted line of A, or an insertion inside their body, in the
   `git diff --no-index -U0` of A's file against the patched file;
6. candidates: every function in the .py files, existing at A, that the group's patches touch.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tide_dspy.data.candidates import file_candidates, read_source
from tide_dspy.data.git_tools import GitClone, changed_old_lines
from tide_dspy.data.loaders import jsonl_lines, load_instances
from tide_dspy.domains import REPOSITORY
from tide_dspy.schemas import Artifact
from tide_dspy.util.diffs import patch_files
from tide_dspy.util.safe_write import append_text, write_text

logger = logging.getLogger(__name__)

ROW_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement", "patch")


@dataclass
class Row:
    """One SWE-bench row, with the fields the builder reads."""

    raw: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.raw[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def py_paths(self) -> list[str]:
        return [p for p in patch_files(self.patch) if p.endswith(".py")]


@dataclass
class Group:
    anchor: str
    rows: list[Row] = field(default_factory=list)
    evidence: dict[str, list[str]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)


@dataclass
class BuildReport:
    repo: str
    rows: int = 0
    anchors: int = 0
    grouped: int = 0
    dropped_no_evidence: int = 0
    not_groupable: int = 0
    instances: int = 0
    out: str = ""

    def summary(self) -> str:
        return (f"{self.repo}: {self.rows} rows, {self.anchors} anchors -> {self.instances} instances "
                f"({self.grouped} problems grouped, {self.dropped_no_evidence} dropped for no function evidence, "
                f"{self.not_groupable} not groupable); wrote {self.out}")


def load_rows(path: str | Path, repo_name: str | None = None) -> tuple[str, list[Row]]:
    """Rows of one repository. Each row needs ROW_FIELDS; errors name the file, line and field."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such rows file")
    rows: list[Row] = []
    for line_no, text in jsonl_lines(path):
        if not text.strip():
            continue
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} line {line_no}: not valid JSON ({exc.msg} at column {exc.colno})") from exc
        missing = [f for f in ROW_FIELDS if not isinstance(raw, dict) or not raw.get(f)]
        if missing:
            raise ValueError(f"{path} line {line_no}: {', '.join(missing)}: field required in a SWE-bench row; add it")
        rows.append(Row(raw))
    names = sorted({r.repo for r in rows})
    if repo_name is None:
        if len(names) != 1:
            raise ValueError(f"{path}: rows span {len(names)} repositories ({', '.join(names)}); "
                             f"pass --repo-name to pick the one --repo is a clone of")
        repo_name = names[0]
    return repo_name, [r for r in rows if r.repo == repo_name]


class AnchorFiles:
    """The files of one anchor that any row touches, parsed once."""

    def __init__(self, clone: GitClone, anchor: str, rows: list[Row]):
        paths = list(dict.fromkeys(p for r in rows for p in patch_files(r.patch)))
        self.anchor = anchor
        self.snapshot = clone.snapshot(anchor, paths)
        self.present = {p for p in paths if (self.snapshot.tree / p).is_file()}
        self._functions: dict[str, list[Artifact]] = {}

    def functions(self, path: str) -> list[Artifact]:
        if path not in self._functions:
            try:
                self._functions[path] = file_candidates(path, read_source(self.snapshot.tree, path))
            except (SyntaxError, ValueError) as exc:
                logger.warning("%s at %s: does not parse (%s); no functions from it", path, self.anchor[:12], exc)
                self._functions[path] = []
        return self._functions[path]

    def unresolved(self, row: Row) -> bool:
        return self.snapshot.applies(row.patch) and not self.snapshot.applies(row.patch, reverse=True)

    def evidence(self, row: Row) -> list[str]:
        """Ids of the functions the row's patch changes at this anchor (README rule 5)."""
        with self.snapshot.copy() as patched:
            patched.apply(row.patch)
            ids: list[str] = []
            for path in row.py_paths:
                if path not in self.present:
                    continue  # a new file: no function of the anchor
                new = patched.tree / path
                if not new.exists():  # deleted file: every function goes
                    ids += [f.id for f in self.functions(path)]
                    continue
                for first, count, inserted in changed_old_lines(self.snapshot.tree / path, new):
                    ids += [f.id for f in self.functions(path) if _hunk_hits(f, first, count, inserted)]
        return list(dict.fromkeys(ids))

    def close(self) -> None:
        self.snapshot.close()


def _hunk_hits(function: Artifact, first: int, count: int, inserted: list[str]) -> bool:
    start, end = function.payload["start_line"], function.payload["end_line"]
    if count:
        return first <= end and first + count - 1 >= start
    if start <= first < end:
        return True
    if first == end:  # appended right after the last line: inside only if indented under the def
        indent = _indent(function.payload["code"])
        return any(line.strip() and _indent(line) > indent for line in inserted[:1])
    return False


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


class RepoBuilder:
    def __init__(self, clone: GitClone, rows: list[Row], max_candidates: int = 650, max_problems: int = 40):
        self.clone, self.rows = clone, rows
        self.max_candidates, self.max_problems = max_candidates, max_problems
        self.anchors = [a for a in dict.fromkeys(r.base_commit for r in rows) if clone.has_commit(a)]
        for sha in dict.fromkeys(r.base_commit for r in rows if not clone.has_commit(r.base_commit)):
            logger.warning("base_commit %s is not in %s; it cannot be an anchor", sha, clone.path)
        self.no_evidence: set[str] = set()

    def groups(self) -> list[Group]:
        files = {a: AnchorFiles(self.clone, a, self.rows) for a in self.anchors}
        try:
            unresolved = {a: [r for r in self.rows if files[a].unresolved(r)] for a in self.anchors}
            used: set[str] = set()
            open_anchors = list(self.anchors)
            kept: list[Group] = []
            while open_anchors:
                free = {a: [r for r in unresolved[a] if r.instance_id not in used] for a in open_anchors}
                anchor = max(open_anchors, key=lambda a: (len(free[a]), -self.clone.commit_time(a)))
                if len(free[anchor]) < 2:
                    break
                group = self._group(files[anchor], free[anchor])
                if len(group.rows) >= 2 and len({e for ev in group.evidence.values() for e in ev}) >= 2:
                    kept.append(group)
                    used |= {r.instance_id for r in group.rows}
                else:
                    open_anchors.remove(anchor)
            self.no_evidence -= used
            return kept
        finally:
            for f in files.values():
                f.close()

    def _group(self, files: AnchorFiles, free: list[Row]) -> Group:
        anchor_time = self.clone.commit_time(files.anchor)
        group = Group(files.anchor)
        with files.snapshot.copy() as joint:
            for row in sorted(free, key=lambda r: (abs(self._time(r) - anchor_time), r.instance_id)):
                if len(group.rows) >= self.max_problems:
                    break
                evidence = files.evidence(row)
                if not evidence:
                    self.no_evidence.add(row.instance_id)
                    continue
                if not joint.applies(row.patch):
                    continue
                pool = list(dict.fromkeys(group.files + [p for p in row.py_paths if p in files.present]))
                if sum(len(files.functions(p)) for p in pool) > self.max_candidates:
                    continue
                joint.apply(row.patch)
                group.rows.append(row)
                group.evidence[row.instance_id] = evidence
                group.files = pool
        return group

    def _time(self, row: Row) -> int:
        return self.clone.commit_time(row.base_commit) if self.clone.has_commit(row.base_commit) else 0

    def record(self, group: Group, instance_id: str, split: str, files: AnchorFiles) -> dict[str, Any]:
        candidates = [f for p in group.files for f in files.functions(p)]
        buggy = {e for ev in group.evidence.values() for e in ev}
        return {
            "instance_id": instance_id,
            "repo": group.rows[0].repo,
            "anchor_commit": group.anchor,
            "anchor_date": self.clone.commit_date(group.anchor),
            "split": split,
            "num_problems": len(group.rows),
            "num_candidates": len(candidates),
            "num_buggy_functions": len(buggy),
            "candidates": [{"id": c.id, **c.payload} for c in candidates],
            "problems": [self._problem(row, group, files) for row in group.rows],
        }

    def _problem(self, row: Row, group: Group, files: AnchorFiles) -> dict[str, Any]:
        evidence = group.evidence[row.instance_id]
        days = None
        if self.clone.has_commit(row.base_commit):
            days = round((self.clone.commit_time(group.anchor) - self.clone.commit_time(row.base_commit)) / 86400, 1)
        test_patch = row.raw.get("test_patch") or None
        return {
            "problem_id": row.instance_id,
            "description": row.problem_statement,
            "evidence": evidence,
            "patch": row.patch,
            "fail_to_pass": _test_list(row.raw.get("FAIL_TO_PASS")),
            "pass_to_pass": _test_list(row.raw.get("PASS_TO_PASS")),
            "created_at": row.raw.get("created_at"),
            "base_commit": row.base_commit,
            "version": row.raw.get("version"),
            "test_patch": test_patch,
            "test_patch_applies_at_anchor": self._applies_at(group.anchor, test_patch) if test_patch else None,
            "buggy_code_identical_to_base_commit": self._same_code(row, evidence, files),
            "anchor_minus_base_days": days,
            "source_datasets": row.raw.get("source_datasets", []),
        }

    def _applies_at(self, sha: str, patch: str) -> bool:
        with self.clone.snapshot(sha, patch_files(patch)) as snap:
            return snap.applies(patch)

    def _same_code(self, row: Row, evidence: list[str], files: AnchorFiles) -> bool | None:
        if not self.clone.has_commit(row.base_commit):
            return None
        paths = list(dict.fromkeys(e.split("::")[0] for e in evidence))
        at_anchor = {f.id: f.payload["code"] for p in paths for f in files.functions(p)}
        with self.clone.snapshot(row.base_commit, paths) as base:
            at_base = {}
            for p in paths:
                if (base.tree / p).is_file():
                    at_base.update({f.id: f.payload["code"] for f in file_candidates(p, read_source(base.tree, p))})
        return all(at_base.get(e) == at_anchor[e] for e in evidence)


def _test_list(value: Any) -> list[str]:
    """SWE-bench stores FAIL_TO_PASS/PASS_TO_PASS as JSON-encoded strings in some copies, as lists in others."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else []
    return list(value or [])


def build_repository_instances(rows_path: str | Path, repo: str | Path, out: str | Path, *,
                               max_candidates: int = 650, max_problems: int = 40, split: str = "test",
                               repo_name: str | None = None) -> BuildReport:
    """Build, write (JSONL, shared repository format) and re-load the output to validate it."""
    repo_name, rows = load_rows(rows_path, repo_name)
    clone = GitClone(repo)
    builder = RepoBuilder(clone, rows, max_candidates=max_candidates, max_problems=max_problems)
    groups = builder.groups()
    out = write_text(out, "")  # each record is appended as it is built
    prefix = repo_name.replace("/", "__")
    for k, group in enumerate(groups, 1):
        files = AnchorFiles(clone, group.anchor, group.rows)
        try:
            record = builder.record(group, f"{prefix}__multi-{k:02d}", split, files)
        finally:
            files.close()
        append_text(out, json.dumps(record) + "\n")
    if groups:
        load_instances(out, setting=REPOSITORY.name)  # the output must pass the loader's validation
    grouped = sum(len(g.rows) for g in groups)
    return BuildReport(repo=repo_name, rows=len(rows), anchors=len(builder.anchors), grouped=grouped,
                       dropped_no_evidence=len(builder.no_evidence),
                       not_groupable=len(rows) - grouped - len(builder.no_evidence), instances=len(groups),
                       out=str(out))
