"""The invariants of a benchmark set: what `tide data check` verifies before it prints the chance floors.

`check_set` takes a set's raw records (one dict per instance, the record layout of its data card) and returns one
line per broken invariant, each naming the instance and the item. Each setting has its own record checks (a
workspace's problems cite 2-5 of its items and take an action from its library; a repository's problems cite
candidate functions and carry a patch that parses); both share the set-level ones (unique ids, the splits). An
evidence item may serve two problems only where the set's data card (its README, section "Shared evidence") names
it and says why. `--paper-scale` adds the paper's size targets for the workspace set (`PAPER_SCALE`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tide_dspy.data.loaders import InvalidRecordError, load_instances, read_data
from tide_dspy.data.records import detect_setting
from tide_dspy.data.sets import SetInfo, load_located, locate
from tide_dspy.domains import REPOSITORY, WORKSPACE
from tide_dspy.schemas import Instance
from tide_dspy.util.diffs import diff_problem, patch_paths
from tide_dspy.workspace_actions import ACTION_TYPES

SPLITS = ("train", "test")


@dataclass(frozen=True)
class Ranges:
    """Per-workspace bounds. The defaults hold for every version of the workspace set: v1's 45-70 items per
    workspace up to the paper's 113 (PAPER_RANGES narrows them to the paper's 88-113)."""

    problems: tuple[int, int] = (4, 6)
    evidence: tuple[int, int] = (2, 5)
    artifacts: tuple[int, int] = (45, 113)
    actions: tuple[int, int] = (15, 25)
    relationships: tuple[int, int] = (8, 15)
    distractor_share: tuple[float, float] = (0.6, 0.85)
    email_words: tuple[int, int] = (40, 200)
    calendar_words: tuple[int, int] = (15, 120)
    document_words: tuple[int, int] = (5, 400)


PAPER_RANGES = Ranges(artifacts=(88, 113))


@dataclass(frozen=True)
class PaperScale:
    """The paper's workspace setting: 30 workspaces and 150 problems, with enough train problems to distil its 40
    templates and enough test workspaces for intervals narrower than the gaps it reports."""

    workspaces: int = 30
    problems: int = 150
    train_workspaces: int = 8
    train_problems: int = 40
    test_workspaces: int = 20


PAPER_SCALE = PaperScale()


@dataclass(frozen=True)
class RepositoryRanges:
    """The repository builder's rules (tide data build-repo): 2-40 problems and at most 650 candidate functions per
    instance, at least two distinct buggy functions, and each problem citing at least one function."""

    problems: tuple[int, int] = (2, 40)
    candidates: tuple[int, int] = (2, 650)
    buggy_functions: int = 2


ID_FORMAT = re.compile(r"^(email|calendar|document|act)_[0-9a-f]{8}$")
TEXT_FIELD = {"email": "body", "calendar": "description", "document": "content"}
# Two items whose texts are at least this similar (rapidfuzz's ratio, 0-100) are copies.
NEAR_DUPLICATE = 85
# Texts shorter than this many words (a signature, "See attached.") are not compared.
NEAR_DUPLICATE_MIN_WORDS = 12
SHARED_EVIDENCE = re.compile(r"^#+\s*Shared evidence\s*$", re.I | re.M)


def _in(value, bounds) -> bool:
    return bounds[0] <= value <= bounds[1]


def shared_evidence_allowed(card: str | None) -> set[tuple[str, str]]:
    """(instance id, item id) pairs the data card lets two problems share: the rows of the table under its
    "Shared evidence" heading, `| instance | item | problems | why |`, each with a reason."""
    if not card or not (start := SHARED_EVIDENCE.search(card)):
        return set()
    allowed = set()
    for line in card[start.end():].splitlines():
        if line.startswith("#"):
            break
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[3] and not set(cells[0]) <= set("-: ") and cells[0] != "instance":
            allowed.add((cells[0], cells[1]))
    return allowed


def _evidence_owners(iid: str, problems: list[dict], allowed: set[tuple[str, str]], bad) -> dict[str, str]:
    """item id -> the first problem citing it; a second problem citing it is reported unless the card allows it."""
    owner: dict[str, str] = {}
    for p in problems:
        for e in p.get("evidence", []):
            if e in owner and (iid, e) not in allowed:
                bad(f"{p.get('problem_id', '?')}: evidence {e} is also evidence of {owner[e]} (the data card's "
                    "Shared evidence section does not name it)")
            owner.setdefault(e, p.get("problem_id", "?"))
    return owner


def check_workspace(r: dict, ranges: Ranges = Ranges(), allowed: set[tuple[str, str]] = frozenset()) -> list[str]:
    iid = r.get("instance_id", "?")
    out: list[str] = []

    def bad(msg: str) -> None:
        out.append(f"{iid}: {msg}")

    profile = r.get("profile", {})
    today = str(profile.get("today", ""))
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", today):
        bad(f"profile.today {today!r} is not YYYY-MM-DD")
    if not _in(len(profile.get("relationships", [])), ranges.relationships):
        bad(f"{len(profile.get('relationships', []))} relationships, outside {ranges.relationships}")
    arts = r.get("artifacts", [])
    ids = Counter(a["id"] for a in arts)
    for dup in [i for i, n in ids.items() if n > 1]:
        bad(f"artifact id {dup} repeats")
    if not _in(len(arts), ranges.artifacts):
        bad(f"{len(arts)} artifacts, outside {ranges.artifacts}")
    for a in arts:
        if not ID_FORMAT.match(a["id"]) or not a["id"].startswith(a["kind"] + "_"):
            bad(f"artifact id {a['id']!r} does not match its kind {a['kind']!r}")
        if str(a["created_at"])[:10] > today:
            bad(f"{a['id']}: created_at {a['created_at']} is after today {today}")
        text = a["payload"].get(TEXT_FIELD.get(a["kind"], ""), "")
        words = len(str(text).split())
        bounds = getattr(ranges, f"{a['kind']}_words", None)
        if bounds is None:
            bad(f"{a['id']}: kind {a['kind']!r} is not one of {', '.join(TEXT_FIELD)}")
        elif not _in(words, bounds):
            bad(f"{a['id']}: {a['kind']} text has {words} words, outside {bounds}")
        if a["kind"] == "calendar" and not a["payload"].get("start_time", "") < a["payload"].get("end_time", ""):
            bad(f"{a['id']}: calendar start_time is not before end_time")
    actions = {a["id"]: a for a in r.get("actions", [])}
    if len(actions) != len(r.get("actions", [])):
        bad("an action id repeats")
    if not _in(len(actions), ranges.actions):
        bad(f"{len(actions)} actions, outside {ranges.actions}")
    for a in actions.values():
        if not ID_FORMAT.match(a["id"]) or not a["id"].startswith("act_"):
            bad(f"action id {a['id']!r} is not act_<8hex>")
        if a["type"] not in ACTION_TYPES:
            bad(f"action {a['id']}: type {a['type']!r} is not one of tide_dspy.workspace_actions.ACTION_TYPES")
    problems = r.get("problems", [])
    if not _in(len(problems), ranges.problems):
        bad(f"{len(problems)} problems, outside {ranges.problems}")
    gold_actions: Counter[str] = Counter()
    for p in problems:
        pid = p.get("problem_id", "?")
        ev = p.get("evidence", [])
        if not _in(len(ev), ranges.evidence):
            bad(f"{pid}: {len(ev)} evidence artifacts, outside {ranges.evidence}")
        for e in ev:
            if e not in ids:
                bad(f"{pid}: evidence id {e} is not an artifact")
        act = p.get("action", {})
        gold_actions[act.get("action_id")] += 1
        if not p.get("category"):
            bad(f"{pid}: no category")
        lib = actions.get(act.get("action_id"))
        if lib is None:
            bad(f"{pid}: action_id {act.get('action_id')!r} is not in the library")
            continue
        if act.get("type") != lib["type"]:
            bad(f"{pid}: action type {act.get('type')!r} is not the library's {lib['type']!r}")
        missing = [k for k in lib["required_parameters"] if not str(act.get("parameters", {}).get(k, "")).strip()]
        if missing:
            bad(f"{pid}: gold action {lib['id']} lacks required parameters {missing}")
    owner = _evidence_owners(iid, problems, allowed, bad)
    for action_id, n in gold_actions.items():
        if n > 1:
            bad(f"action {action_id} is gold for {n} problems")
    if arts:
        share = 1 - len(owner) / len(arts)
        if not _in(share, ranges.distractor_share):
            bad(f"distractor share {share:.2f}, outside {ranges.distractor_share}")
    return out


def check_repository(r: dict, ranges: RepositoryRanges = RepositoryRanges(),
                     allowed: set[tuple[str, str]] = frozenset()) -> list[str]:
    iid = r.get("instance_id", "?")
    out: list[str] = []

    def bad(msg: str) -> None:
        out.append(f"{iid}: {msg}")

    candidates = r.get("candidates", [])
    ids = Counter(c["id"] for c in candidates)
    for dup in [i for i, n in ids.items() if n > 1]:
        bad(f"candidate id {dup} repeats")
    for c in candidates:
        if not re.fullmatch(re.escape(f"{c['path']}::{c['qualname']}") + r"(#\d+)?", c["id"]):
            bad(f"candidate id {c['id']!r} is not <path>::<qualname> of its path and qualname")
        if not 1 <= c["start_line"] <= c["end_line"]:
            bad(f"{c['id']}: lines {c['start_line']}-{c['end_line']} are not a span")
        if not c["code"].strip():
            bad(f"{c['id']}: no code")
    if not _in(len(candidates), ranges.candidates):
        bad(f"{len(candidates)} candidates, outside {ranges.candidates}")
    problems = r.get("problems", [])
    if not _in(len(problems), ranges.problems):
        bad(f"{len(problems)} problems, outside {ranges.problems}")
    for field, count in (("num_problems", len(problems)), ("num_candidates", len(candidates))):
        if r.get(field) != count:
            bad(f"{field} is {r.get(field)}, but the record holds {count}")
    buggy = {e for p in problems for e in p.get("evidence", [])}
    if r.get("num_buggy_functions") != len(buggy):
        bad(f"num_buggy_functions is {r.get('num_buggy_functions')}, but the problems cite {len(buggy)}")
    if len(buggy) < ranges.buggy_functions:
        bad(f"{len(buggy)} distinct buggy functions, fewer than {ranges.buggy_functions}")
    path_of = {c["id"]: c["path"] for c in candidates}
    for p in problems:
        pid = p.get("problem_id", "?")
        if not p.get("evidence"):
            bad(f"{pid}: cites no function")
        missing = [e for e in p.get("evidence", []) if e not in ids]
        if missing:
            bad(f"{pid}: evidence {missing} are not candidates")
        if not str(p.get("description", "")).strip():
            bad(f"{pid}: no description")
        if reason := diff_problem(p.get("patch", "")):
            bad(f"{pid}: the gold patch does not parse: {reason}")
        else:
            touched = set(patch_paths(p["patch"]))
            outside = sorted({path_of[e] for e in p.get("evidence", []) if e in path_of} - touched)
            if outside:
                bad(f"{pid}: the gold patch does not touch {outside}, where its evidence lies")
        if p.get("test_patch") and (reason := diff_problem(p["test_patch"])):
            bad(f"{pid}: the test patch does not parse: {reason}")
    _evidence_owners(iid, problems, allowed, bad)
    return out


CHECKS = {WORKSPACE.name: check_workspace, REPOSITORY.name: check_repository}


def near_duplicates(records: list[dict], threshold: int = NEAR_DUPLICATE) -> list[str]:
    """Pairs of workspace items, across the whole set, whose texts are near copies (rapidfuzz ratio >= threshold):
    text filled into a template, or an item pasted twice."""
    from rapidfuzz import fuzz, process

    keys, texts = [], []
    for r in records:
        for a in r.get("artifacts", []):
            text = str(a["payload"].get(TEXT_FIELD.get(a["kind"], ""), ""))
            if len(text.split()) >= NEAR_DUPLICATE_MIN_WORDS:
                keys.append(f"{r['instance_id']}/{a['id']}")
                texts.append(" ".join(text.lower().split()))
    if len(texts) < 2:
        return []
    scores = process.cdist(texts, texts, scorer=fuzz.ratio, score_cutoff=threshold, workers=-1, dtype="uint8")
    return [f"{keys[i]} and {keys[j]} are near copies (ratio {scores[i, j]})" for i, j in zip(*scores.nonzero())
            if i < j]


def split_counts(records: list[dict]) -> dict[str, tuple[int, int]]:
    """split -> (instances, problems), in first-seen order."""
    counts: dict[str, tuple[int, int]] = {}
    for r in records:
        n, p = counts.get(r.get("split"), (0, 0))
        counts[r.get("split")] = (n + 1, p + len(r.get("problems", [])))
    return counts


def paper_scale_problems(records: list[dict], scale: PaperScale = PAPER_SCALE) -> list[str]:
    """Where a workspace set falls short of the paper's size."""
    counts = split_counts(records)
    train, test = counts.get("train", (0, 0)), counts.get("test", (0, 0))
    shortfalls = [
        ("workspaces", len(records), scale.workspaces),
        ("problems", sum(len(r.get("problems", [])) for r in records), scale.problems),
        ("train workspaces", train[0], scale.train_workspaces),
        ("train problems", train[1], scale.train_problems),
        ("test workspaces", test[0], scale.test_workspaces),
    ]
    return [f"paper scale: {have} {what}, fewer than {want}" for what, have, want in shortfalls if have < want]


def check_records(records: list[dict], setting: str, card: str | None = None,
                  ranges: Ranges | None = None) -> list[str]:
    """The invariants of each record, and those between records (unique ids, no copied text): what a part of a set
    must already satisfy."""
    if setting not in CHECKS:
        raise ValueError(f"no set checks for setting {setting!r}; known: {', '.join(CHECKS)}")
    allowed = shared_evidence_allowed(card)
    extra = {"ranges": ranges} if ranges is not None else {}
    out = [line for r in records for line in CHECKS[setting](r, allowed=allowed, **extra)]
    out += [f"{r.get('instance_id', '?')}: split {r.get('split')!r} is not one of {', '.join(SPLITS)}"
            for r in records if r.get("split") not in SPLITS]
    iids = Counter(r.get("instance_id") for r in records)
    out += [f"instance_id {i} repeats" for i, n in iids.items() if n > 1]
    pids = Counter(p.get("problem_id") for r in records for p in r.get("problems", []))
    out += [f"problem_id {i} repeats" for i, n in pids.items() if n > 1]
    if setting == WORKSPACE.name:
        out += near_duplicates(records)
    return out


def check_set(records: list[dict], setting: str, card: str | None = None, paper_scale: bool = False) -> list[str]:
    """Every broken invariant of a whole set (empty when it passes): its records', and both splits present. `card`
    is the set's README, which may allow shared evidence; `paper_scale` adds the paper's size targets (workspace
    set only)."""
    if paper_scale and setting != WORKSPACE.name:
        raise ValueError(f"--paper-scale is defined for the {WORKSPACE.name} set only")
    out = check_records(records, setting, card, PAPER_RANGES if paper_scale else None)
    out += [f"split {s}: no instances" for s in SPLITS if s not in split_counts(records)]
    if paper_scale:
        out += paper_scale_problems(records)
    return out


@dataclass
class SetCheck:
    """A checked set: which it is, its records and Instances, and its broken invariants (none when it passes)."""

    info: SetInfo
    setting: str
    records: list[dict]
    instances: list[Instance]
    problems: list[str]

    @property
    def passed(self) -> bool:
        return not self.problems


def check_data(path: str | Path | None = None, setting: str | None = None, version: str | None = None,
               paper_scale: bool = False, cache_dir: str | Path | None = None) -> SetCheck:
    """Check a set (see `locate` for what `path` and `version` name; a setting's default set without `path`).

    Every record must first load as an Instance (a versioned set through its Features), so a malformed one stops
    the check with its file and line; then the set's invariants are checked (`check_set`), with its data card
    (the README beside it) for the evidence it lets problems share."""
    info = locate(setting, path, version)
    records = []
    for file in info.files:
        for number, raw in enumerate(read_data(file).split(b"\n"), 1):
            if raw.strip():
                try:
                    records.append(json.loads(raw.decode("utf-8")))
                except ValueError as exc:
                    raise InvalidRecordError(file, number, str(exc)) from exc
    if not records:
        raise ValueError(f"{info.path}: no records")
    setting = setting or detect_setting(records[0])
    if info.version is not None:
        instances = load_located(info, setting, cache_dir=cache_dir).instances
    else:
        instances = load_instances(info.path, setting=setting, cache_dir=cache_dir)
    card = info.card.read_text(encoding="utf-8") if info.card else None
    return SetCheck(info=info, setting=setting, records=records, instances=instances,
                    problems=check_set(records, setting, card, paper_scale))
