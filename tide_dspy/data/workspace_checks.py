"""What the workspace generator accepts from each stage (`workspace_generator`): each check returns None, or why it
refuses the output, in words that name the item and the fix (the stage is then sampled again, and the reason is
recorded).

They hold the drafts to the set's invariants at the paper's scale (`set_check.PAPER_RANGES`: counts, word ranges,
dates; and no near copies) and to
PROBE's rules: exactly one solving action per bottleneck, an action library that names none of the problems'
people or ids, evidence that never labels the problem and never holds the whole of it in one item, and distractors
that reuse the problems' names while asking nothing of the persona.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from math import ceil

from tide_dspy.data.set_check import NEAR_DUPLICATE, NEAR_DUPLICATE_MIN_WORDS, PAPER_RANGES
from tide_dspy.data.workspace_prompts import (
    RELATIONSHIP_TYPES,
    ActionDraft,
    ArtifactDraft,
    BottleneckDraft,
    DistractorDraft,
    EvidencePiece,
    EvidenceReview,
    ParameterValue,
    PersonaDraft,
    WorldModelDraft,
)
from tide_dspy.workspace_actions import ACTION_TYPES

RANGES = PAPER_RANGES
PERSON = re.compile(r"^[^<>@]+ <[^<>\s@]+@[^<>\s@]+\.[^<>\s@]+>$")
FLAG_WORDS = ("bottleneck",)  # words no evidence item may use: the reader must infer the problem


@dataclass(frozen=True)
class Window:
    """The creation times a workspace's artifacts may have."""

    start: datetime
    end: datetime

    def __str__(self) -> str:
        return f"from {self.start:%Y-%m-%dT%H:%M} to {self.end:%Y-%m-%dT%H:%M}"


def first_error(*errors: str | None) -> str | None:
    return next((e for e in errors if e), None)


def mentioned(text: str, names: Iterable[str]) -> list[str]:
    """The names (4 characters or more) that `text` contains, ignoring case."""
    low = text.lower()
    return [n for n in names if len(n) >= 4 and n.lower() in low]


def words(text: str) -> int:
    return len(text.split())


def parse_time(value: str) -> datetime | None:
    """An ISO 8601 local time without an offset (the set's times), else None."""
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return moment if moment.tzinfo is None else None


def check_persona(persona: PersonaDraft) -> str | None:
    if not all(s.strip() for s in (persona.full_name, persona.occupation, persona.company_name, persona.about)):
        return "persona: full_name, occupation, company_name and about must all be written"
    if not PERSON.match(f"{persona.full_name} <{persona.email}>"):
        return f"persona email {persona.email!r} is not an address"
    return None


def check_world(world: WorldModelDraft, persona: PersonaDraft) -> str | None:
    people = world.relationships
    names = [p.name.strip() for p in people]
    types = {p.type for p in people}
    low, high = RANGES.relationships
    bad_types = sorted(types - set(RELATIONSHIP_TYPES))
    context = world.personal_context
    return first_error(
        None if low <= len(people) <= high else f"{len(people)} relationships, outside {low}-{high}",
        f"relationship types {bad_types} are not among {list(RELATIONSHIP_TYPES)}" if bad_types else None,
        "relationship names repeat" if len(set(names)) != len(names) else None,
        "the persona is listed among their own relationships" if persona.full_name in names else None,
        next((f"{p.name}: email {p.email!r} is not an address" for p in people
              if not PERSON.match(f"{p.name} <{p.email}>")), None),
        f"only {len(types)} relationship types; mix at least 3" if len(types) < 3 else None,
        "write at least 3 key meetings" if len(world.organization.key_meetings) < 3 else None,
        "write at least 2 current priorities and 2 pain points"
        if min(len(context.current_priorities), len(context.pain_points)) < 2 else None,
    )


def check_bottlenecks(bottlenecks: list[BottleneckDraft], kinds: tuple[str, ...], world: WorldModelDraft,
                      persona: PersonaDraft, today: str) -> str | None:
    if len(bottlenecks) != len(kinds):
        return f"{len(bottlenecks)} bottlenecks, {len(kinds)} asked"
    names = {p.name for p in world.relationships}
    for k, (b, kind) in enumerate(zip(bottlenecks, kinds), 1):
        unknown = [p for p in b.people if p not in names | {persona.full_name}]
        deadline = b.deadline.strip()
        error = first_error(
            f"bottleneck {k}: category {b.category!r}, asked {kind!r}" if b.category.strip().lower() != kind else None,
            f"bottleneck {k}: the description is empty" if not b.description.strip() else None,
            f"bottleneck {k}: people {unknown} are not among the relationships" if unknown else None,
            None if names & set(b.people) else f"bottleneck {k}: name at least one person from the relationships",
            f"bottleneck {k}: give at least 3 anchors" if len({a.strip() for a in b.anchors if a.strip()}) < 3
            else None,
            None if re.fullmatch(r"\d{4}-\d{2}-\d{2}", deadline) and deadline >= today
            else f"bottleneck {k}: deadline {b.deadline!r} is not a date on or after {today}",
        )
        if error:
            return error
    if len({b.description.strip() for b in bottlenecks}) != len(bottlenecks):
        return "two bottlenecks have the same description"
    return None


def library_names(persona: PersonaDraft, world: WorldModelDraft, bottlenecks: list[BottleneckDraft]) -> list[str]:
    """What the action library must not name (PROBE: no named entities): the people, the organisation, and the
    problems' anchors that are proper names or ids (a capital or a digit; "budget" alone is a plain word)."""
    anchors = {a.strip() for b in bottlenecks for a in b.anchors if re.search(r"[A-Z0-9]", a)}
    return sorted({persona.full_name, persona.company_name} | {p.name for p in world.relationships} | anchors)


def check_library(actions: list[ActionDraft], n_problems: int, names: Iterable[str]) -> str | None:
    low, high = RANGES.actions
    if not low <= len(actions) <= high:
        return f"{len(actions)} actions, outside {low}-{high}"
    bad = sorted({a.type for a in actions} - set(ACTION_TYPES))
    if bad:
        return f"action types {bad} are not among {sorted(ACTION_TYPES)}"
    if any(not 0 <= a.solves <= n_problems for a in actions):
        return f"solves must be 0 (for none) or a problem's number, 1-{n_problems}"
    for k in range(1, n_problems + 1):
        solving = sum(1 for a in actions if a.solves == k)
        if solving != 1:
            return f"problem {k} has {solving} solving actions; exactly one is needed"
    if any(not [p for p in a.required_parameters if p.strip()] for a in actions):
        return "every action needs required_parameters"
    names = [n for n in names if len(n) >= 4]
    for a in actions:
        text = " ".join([a.description, *a.constraints])
        named = [n for n in names if n in text]
        if named:
            return f"action {a.description[:60]!r} names {named}: describe actions without the problems' names"
    return None


def check_gold(parameters: list[ParameterValue], action: ActionDraft) -> str | None:
    given = {p.name.strip(): p.value for p in parameters}
    missing = [p for p in action.required_parameters if not given.get(p.strip(), "").strip()]
    return f"required parameters {missing} are not filled" if missing else None


def in_window(value: str, window: Window) -> str | None:
    moment = parse_time(value)
    if moment is None:
        return f"created_at {value!r} is not ISO 8601 local time without an offset"
    return None if window.start <= moment <= window.end else f"created_at {value} is outside {window}"


def check_plan(plan: list[EvidencePiece], count: int, window: Window) -> str | None:
    if len(plan) != count:
        return f"{len(plan)} items planned, {count} asked"
    return first_error(
        *(in_window(p.created_at, window) for p in plan),
        "mix the kinds: at least two of email, calendar, document" if count >= 3 and len({p.kind for p in plan}) < 2
        else None,
        "spread the items over at least two days" if len({p.created_at[:10] for p in plan}) < 2 else None,
        next((f"item {i}: role and why_insufficient_alone must be written" for i, p in enumerate(plan, 1)
              if not (p.role.strip() and p.why_insufficient_alone.strip())), None),
    )


def check_artifact(a: ArtifactDraft, kind: str) -> str | None:
    low, high = getattr(RANGES, f"{kind}_words")
    start, end = parse_time(a.start_time), parse_time(a.end_time)
    name = f"{kind} {a.title[:40]!r}"
    return first_error(
        f"kind {a.kind!r}, asked {kind!r}" if a.kind != kind else None,
        f"{name}: the title is empty" if not a.title.strip() else None,
        None if low <= words(a.text) <= high else f"{name}: {words(a.text)} words, outside {low}-{high}",
        next((f"{name}: {p!r} is not 'Name <address>'" for p in a.people if not PERSON.match(p)), None),
        f"{name}: give the sender and at least one recipient" if kind == "email" and len(a.people) < 2 else None,
        f"{name}: start_time and end_time must be ISO times, the start first"
        if kind == "calendar" and not (start and end and start < end) else None,
        f"{name}: mime {a.mime!r} is not text/markdown or text/csv"
        if kind == "document" and a.mime not in ("text/markdown", "text/csv") else None,
    )


def check_evidence(a: ArtifactDraft, piece: EvidencePiece, anchors: list[str]) -> str | None:
    text = a.title + " " + a.text
    flagged = [w for w in FLAG_WORDS if re.search(rf"\b{w}", text, re.I)]
    return first_error(
        check_artifact(a, piece.kind),
        f"the item calls something a {flagged[0]}; let the reader infer it" if flagged else None,
        "the item holds every anchor of the problem; leave some to the other items"
        if len(anchors) >= 3 and len(mentioned(text, anchors)) == len(anchors) else None,
    )


def check_review(review: EvidenceReview, items: list[ArtifactDraft]) -> str | None:
    passed = (review.each_insufficient_alone and review.sufficient_together and review.free_of_other_problems
              and review.natural)
    if not passed and not review.rewrites:
        return "the review found faults but rewrote no item"
    for r in review.rewrites:
        if not 1 <= r.item <= len(items):
            return f"rewrite of item {r.item}: there are items 1-{len(items)}"
        item = items[r.item - 1]
        error = check_artifact(item.model_copy(update={"text": r.text}), item.kind)
        if error:
            return f"rewrite of item {r.item}: {error}"
    return None


class TextPool:
    """Texts accepted so far; a new batch is admitted only when none of its texts is a near copy (the set checker's
    rule: rapidfuzz ratio at least NEAR_DUPLICATE, on texts of NEAR_DUPLICATE_MIN_WORDS words or more) of another,
    old or new. Thread-safe: parallel stages admit into one pool."""

    def __init__(self, texts: Iterable[str] = ()):
        self.texts: list[str] = []
        self._lock = threading.Lock()
        self.admit(list(texts))

    def admit(self, texts: list[str]) -> str | None:
        from rapidfuzz import fuzz, process

        new = [" ".join(t.lower().split()) for t in texts]
        with self._lock:
            for i, text in enumerate(new):
                if words(text) < NEAR_DUPLICATE_MIN_WORDS:
                    continue
                others = self.texts + [t for j, t in enumerate(new) if j != i and words(t) >= NEAR_DUPLICATE_MIN_WORDS]
                hit = process.extractOne(text, others, scorer=fuzz.ratio, score_cutoff=NEAR_DUPLICATE)
                if hit is not None:
                    return f"item {i + 1} is a near copy of another text ({hit[1]:.0f}% alike); write it afresh"
            self.texts += [t for t in new if words(t) >= NEAR_DUPLICATE_MIN_WORDS]
        return None


def check_distractors(batch: list[DistractorDraft], kind: str, count: int, anchors: list[str], window: Window,
                      pool: TextPool) -> str | None:
    """Checked last, the pool admits the batch's texts only when everything else holds."""
    if len(batch) != count:
        return f"{len(batch)} items, {count} asked"
    for d in batch:
        error = first_error(check_artifact(d, kind), in_window(d.created_at, window),
                            f"{d.title[:40]!r}: say why it needs nothing from the persona"
                            if not d.why_not_a_problem.strip() else None)
        if error:
            return error
    sharing = sum(1 for d in batch if mentioned(d.title + " " + d.text, anchors))
    if sharing < ceil(count / 2):
        return f"only {sharing} of {count} items reuse an anchor ({'; '.join(anchors)}); at least {ceil(count / 2)}"
    return pool.admit([d.text for d in batch])
