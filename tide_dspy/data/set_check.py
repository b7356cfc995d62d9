"""The invariants of a workspace set, and its chance floors: what `tide data check` reports.

`check_records` takes the set's raw records (one dict per workspace, the JSONL layout of data/workspace/README.md)
and returns one line per broken invariant, each naming the workspace and the item. `floor_scores` runs the chance
floors (no model) on each workspace and returns retrieval F1 per floor.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from tide_dspy.workspace_actions import ACTION_TYPES


@dataclass(frozen=True)
class Ranges:
    problems: tuple[int, int] = (4, 6)
    evidence: tuple[int, int] = (2, 5)
    artifacts: tuple[int, int] = (88, 113)
    actions: tuple[int, int] = (15, 25)
    relationships: tuple[int, int] = (8, 15)
    distractor_share: tuple[float, float] = (0.6, 0.85)
    email_words: tuple[int, int] = (40, 200)
    calendar_words: tuple[int, int] = (15, 120)
    document_words: tuple[int, int] = (5, 400)


V1_RANGES = Ranges(artifacts=(45, 70))
ID_FORMAT = re.compile(r"^(email|calendar|document|act)_[0-9a-f]{8}$")
TEXT_FIELD = {"email": "body", "calendar": "description", "document": "content"}
# Two artifacts whose texts are at least this similar (rapidfuzz's ratio, 0-100) are copies.
NEAR_DUPLICATE = 85


def _in(value, bounds) -> bool:
    return bounds[0] <= value <= bounds[1]


def check_record(r: dict, ranges: Ranges = Ranges()) -> list[str]:
    iid = r.get("instance_id", "?")
    out: list[str] = []

    def bad(msg: str) -> None:
        out.append(f"{iid}: {msg}")

    if r.get("split") not in ("train", "test"):
        bad(f"split {r.get('split')!r} is not train or test")
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
        if not _in(words, getattr(ranges, f"{a['kind']}_words", (0, 10**6))):
            bad(f"{a['id']}: {a['kind']} text has {words} words, outside {getattr(ranges, a['kind'] + '_words')}")
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
    owner: dict[str, str] = {}
    gold_actions: Counter[str] = Counter()
    for p in problems:
        pid = p.get("problem_id", "?")
        ev = p.get("evidence", [])
        if not _in(len(ev), ranges.evidence):
            bad(f"{pid}: {len(ev)} evidence artifacts, outside {ranges.evidence}")
        for e in ev:
            if e not in ids:
                bad(f"{pid}: evidence id {e} is not an artifact")
            elif e in owner:
                bad(f"{pid}: evidence id {e} is also evidence of {owner[e]}")
            owner.setdefault(e, pid)
        act = p.get("action", {})
        gold_actions[act.get("action_id")] += 1
        lib = actions.get(act.get("action_id"))
        if lib is None:
            bad(f"{pid}: action_id {act.get('action_id')!r} is not in the library")
            continue
        if act.get("type") != lib["type"]:
            bad(f"{pid}: action type {act.get('type')!r} is not the library's {lib['type']!r}")
        missing = [k for k in lib["required_parameters"] if not str(act.get("parameters", {}).get(k, "")).strip()]
        if missing:
            bad(f"{pid}: gold action {lib['id']} lacks required parameters {missing}")
        if not p.get("category"):
            bad(f"{pid}: no category")
    for action_id, n in gold_actions.items():
        if n > 1:
            bad(f"action {action_id} is gold for {n} problems")
    if arts:
        share = 1 - len(owner) / len(arts)
        if not _in(share, ranges.distractor_share):
            bad(f"distractor share {share:.2f}, outside {ranges.distractor_share}")
    return out


def near_duplicates(records: list[dict], threshold: int = NEAR_DUPLICATE) -> list[str]:
    """Pairs of artifacts, across the whole set, whose texts are near copies (rapidfuzz ratio >= threshold)."""
    from rapidfuzz import fuzz, process

    keys, texts = [], []
    for r in records:
        for a in r["artifacts"]:
            text = str(a["payload"].get(TEXT_FIELD[a["kind"]], ""))
            if len(text.split()) >= 12:
                keys.append(f"{r['instance_id']}/{a['id']}")
                texts.append(" ".join(text.lower().split()))
    if len(texts) < 2:
        return []
    scores = process.cdist(texts, texts, scorer=fuzz.ratio, score_cutoff=threshold, workers=-1, dtype="uint8")
    out = []
    for i, j in zip(*scores.nonzero()):
        if i < j:
            out.append(f"{keys[i]} and {keys[j]} are near copies (ratio {scores[i, j]})")
    return out


def check_records(records: list[dict], ranges: Ranges = Ranges()) -> list[str]:
    out = [line for r in records for line in check_record(r, ranges)]
    iids = Counter(r.get("instance_id") for r in records)
    out += [f"instance_id {i} repeats" for i, n in iids.items() if n > 1]
    return out + near_duplicates(records)


FLOORS = ("random", "first-listed", "lexical-join")


def floor_scores(records: list[dict]) -> dict[str, dict[str, float]]:
    """instance_id -> floor -> retrieval F1 (percent) of each chance floor at the workspace setting's defaults."""
    from tide_dspy.data.records import instance_from_record
    from tide_dspy.discovery import FirstListed, LexicalJoin, RandomBaseline
    from tide_dspy.metrics.scoring import score_instance

    programs = {"random": RandomBaseline("workspace"), "first-listed": FirstListed("workspace"),
                "lexical-join": LexicalJoin("workspace")}
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for r in records:
        instance = instance_from_record(r, "workspace")
        for name, program in programs.items():
            findings = program(instance).findings
            out[instance.instance_id][name] = 100 * score_instance(instance.problems, findings).f1["retrieval"]
    return dict(out)


def print_floors(records: list[dict]) -> None:
    scores = floor_scores(records)
    split_of = {r["instance_id"]: r["split"] for r in records}
    print(f"{'workspace':44} {'split':5} " + " ".join(f"{f:>12}" for f in FLOORS) + "  lexical/random")
    for iid, row in scores.items():
        ratio = row["lexical-join"] / row["random"] if row["random"] else float("inf")
        print(f"{iid:44} {split_of[iid]:5} " + " ".join(f"{row[f]:12.2f}" for f in FLOORS) + f"  {ratio:.2f}x")
    for split in ("train", "test"):
        rows = [row for iid, row in scores.items() if split_of[iid] == split]
        if rows:
            mean = {f: sum(r[f] for r in rows) / len(rows) for f in FLOORS}
            ratio = mean["lexical-join"] / mean["random"] if mean["random"] else float("inf")
            print(f"{'mean (' + str(len(rows)) + ')':44} {split:5} " + " ".join(f"{mean[f]:12.2f}" for f in FLOORS)
                  + f"  {ratio:.2f}x")
