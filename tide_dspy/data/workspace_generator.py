"""`tide data generate-workspace`: PROBE's generation pipeline as DSPy modules, writing workspaces in the layout of
the workspace set (data/workspace/README.md).

PROBE (fastino-ai/PROBE_benchmark, `data_generation/`) runs: persona -> world model -> bottlenecks -> an action
library with one solving action per bottleneck -> a checklist holding the solving action's parameters -> per
bottleneck, source types, an evidence plan, the evidence items and a review of them -> distractors that avoid every
bottleneck. Here the same stages run per workspace, one signature each (`workspace_prompts`), checked by
`workspace_checks`, with these changes for the multi-problem layout:

- a workspace has 4-6 problems of distinct kinds (`PROBLEM_CATEGORIES`), and a generated set spreads the kinds
  (PROBE's "hard" setting has 4-6 bottlenecks; its easy and medium settings are not offered);
- the evidence plan fixes each item's kind and date (PROBE's source types are folded into it), and each problem
  gets 2-5 items, so it is seen only by joining them;
- distractors make up 70-85% of the artifacts and reuse the problems' people, projects and ids (PROBE's
  false-positive-similarity strategy made a rule), so the problems cannot be found by matching names;
- PROBE's "enhance" pass, which lengthens distractors to 300-700 words, is left out: the set's texts are shorter
  (40-200 words for an email), and the writers keep to those ranges directly.

An output that fails its stage's check is sampled again, at most `max_attempts` times, and every failed attempt is
recorded. A workspace whose stage still fails, or whose assembled record fails the set checker
(`set_check.check_workspace`, at the paper's ranges) or repeats another workspace's text, is skipped and recorded,
never written. The record of every workspace and stage goes to `<out stem>.generation.json`; a resumed run reads
it and generates the workspaces not yet written (a skipped one is tried afresh).

Quality depends on the backbone: a small local model writes shallow, repetitive workspaces whose problems are often
stated outright in one item; PROBE's and the paper's workspaces came from strong hosted models.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import random
import re
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta
from itertools import combinations
from math import ceil
from pathlib import Path
from typing import Any

import dspy

from tide_dspy.data.records import describe_record_error, instance_from_record
from tide_dspy.data.set_check import TEXT_FIELD, check_workspace
from tide_dspy.data.workspace_checks import (
    RANGES,
    TextPool,
    Window,
    check_bottlenecks,
    check_distractors,
    check_evidence,
    check_gold,
    check_library,
    check_persona,
    check_plan,
    check_review,
    check_world,
    library_names,
)
from tide_dspy.data.workspace_prompts import (
    DISTRACTOR_STRATEGIES,
    PROBLEM_CATEGORIES,
    ActionDraft,
    ArtifactDraft,
    BottleneckDraft,
    DistractorDraft,
    EvidencePiece,
    PersonaDraft,
    PlanEvidence,
    ReviewEvidence,
    WorldModelDraft,
    WriteActionLibrary,
    WriteBottlenecks,
    WriteDistractors,
    WriteEvidence,
    WriteGoldParameters,
    WritePersona,
    WriteWorldModel,
)
from tide_dspy.domains import WORKSPACE
from tide_dspy.retry import call_with_retries
from tide_dspy.util.safe_write import append_text, write_text
from tide_dspy.util.text import cap, print_line
from tide_dspy.workspace_actions import ACTION_TYPES

logger = logging.getLogger(__name__)

ROLE_HINTS = (
    "a facilities manager at a public university", "a clinical trial coordinator at a research hospital",
    "a program manager at a regional airline", "a finance controller at a mid-size construction firm",
    "a grants manager at an environmental nonprofit", "a product operations lead at a fintech startup",
    "a supply chain planner at an auto-parts maker", "an events manager at a convention centre",
    "a school district IT coordinator", "a quality assurance lead at a pharmaceutical plant",
    "a newsroom production editor at a regional paper", "a fleet operations manager at a logistics company",
    "a court administrator at a county courthouse", "a practice manager at a veterinary hospital group",
    "a localisation project manager at a games studio", "an operations officer at a container port",
)
# The word counts asked of the writers: inside the set's bounds (set_check.Ranges), with a margin.
WORDS_ASKED = {"email": (60, 170), "calendar": (20, 90), "document": (60, 300)}
KIND_SHARE = {"email": 0.5, "document": 0.3, "calendar": 0.2}  # the set's mix of artifacts
WINDOW_DAYS = 75  # artifacts are created in the 75 days up to the workspace's today


# ---- What each workspace is asked to be ----

@dataclass(frozen=True)
class WorkspaceSpec:
    """The fixed choices for workspace `number` of a run: a pure function of the run's seed and the number
    (`workspace_spec`), so a resumed run asks for the same workspaces."""

    number: int
    seed: int
    role_hint: str
    today: str
    categories: tuple[str, ...]
    evidence_counts: tuple[int, ...]
    artifacts: int
    actions: int
    relationships: int

    @property
    def window(self) -> Window:
        end = datetime.fromisoformat(self.today) + timedelta(days=1, seconds=-1)
        return Window(end - timedelta(days=WINDOW_DAYS), end)

    @property
    def instance_id_suffix(self) -> str:
        return hashlib.sha256(f"{self.seed}-{self.number}".encode()).hexdigest()[:4]


def _problem_count(seed: int, number: int) -> int:
    return random.Random(f"tide-workspace-{seed}-{number}-problems").randint(*RANGES.problems)


def workspace_spec(seed: int, number: int) -> WorkspaceSpec:
    rng = random.Random(f"tide-workspace-{seed}-{number}")
    n = _problem_count(seed, number)
    # The categories run through one seeded order of the vocabulary: a workspace's are distinct, a set's even.
    order = list(PROBLEM_CATEGORIES)
    random.Random(f"tide-categories-{seed}").shuffle(order)
    offset = sum(_problem_count(seed, j) for j in range(1, number))
    roles = list(ROLE_HINTS)
    random.Random(f"tide-roles-{seed}").shuffle(roles)
    low, high = RANGES.artifacts
    artifacts = rng.randint(low + 4, high - 5)
    # Enough evidence that the distractor share stays a point inside its upper bound.
    least = ceil(artifacts * (1.01 - RANGES.distractor_share[1]))
    counts = [rng.randint(3, RANGES.evidence[1]) for _ in range(n)]
    while sum(counts) < least:
        counts[rng.choice([i for i, c in enumerate(counts) if c < RANGES.evidence[1]])] += 1
    today = date(2026, 1, 12) + timedelta(days=rng.randrange(0, 320))
    return WorkspaceSpec(number=number, seed=seed, role_hint=roles[(number - 1) % len(roles)],
                         today=today.isoformat(),
                         categories=tuple(order[(offset + i) % len(order)] for i in range(n)),
                         evidence_counts=tuple(counts), artifacts=artifacts,
                         actions=rng.randint(max(RANGES.actions[0] + 1, n + 10), 22),
                         relationships=rng.randint(10, 14))


# ---- Stages: one LM call each, checked, retried within a bound, recorded ----

class StageFailed(RuntimeError):
    """A stage whose output failed its check on every attempt."""


@dataclass
class StageLog:
    stage: str
    attempts: int
    errors: list[str] = field(default_factory=list)
    note: str = ""


class Stages:
    """Runs a workspace's stages and keeps their record; thread-safe, as independent stages run in parallel."""

    def __init__(self, max_attempts: int, on_stage: Callable[[StageLog], None] | None = None):
        self.max_attempts, self.on_stage = max_attempts, on_stage
        self.log: list[StageLog] = []
        self._lock = threading.Lock()

    def run(self, name: str, predictor: dspy.Predict, check: Callable[[Any], str | None],
            note: Callable[[Any], str] | None = None, **inputs) -> dspy.Prediction:
        def unusable(attempt: int, error: str) -> None:
            logger.warning("%s: attempt %d/%d unusable: %s", name, attempt + 1, self.max_attempts, error)

        # An adapter or LM failure is a failed attempt like a refused output; each retry is a fresh sample.
        tried = call_with_retries(lambda config: predictor(**inputs, config=config) if config else predictor(**inputs),
                                  self.max_attempts, lm=predictor.lm or dspy.settings.lm, check=check,
                                  error_chars=300, on_failure=unusable)
        entry = StageLog(name, tried.attempts, tried.errors, note(tried.value) if tried.ok and note else "")
        with self._lock:
            self.log.append(entry)
        if not tried.ok:
            raise StageFailed(f"{name}: no usable output after {tried.attempts} attempts ({tried.errors[-1]})")
        if self.on_stage:
            self.on_stage(entry)
        return tried.value


def in_parallel(work: Callable[[Any], Any], items: Iterable, workers: int) -> list:
    """`work(item)` for each item, `workers` at a time, the results in the items' order; the first failure is
    raised. Each task runs in a copy of the caller's context, so dspy.context (the LM, the adapter) holds there."""
    items = list(items)
    if workers <= 1 or len(items) <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tide-gen") as pool:
        futures = [pool.submit(contextvars.copy_context().run, work, item) for item in items]
        try:
            return [f.result() for f in futures]
        finally:
            for f in futures:
                f.cancel()


# ---- The pipeline ----

@dataclass
class Drafts:
    """What a workspace's stages wrote, before ids are given."""

    persona: PersonaDraft
    world: WorldModelDraft
    bottlenecks: list[BottleneckDraft]
    actions: list[ActionDraft]
    gold: list[dict[str, str]]
    evidence: list[list[tuple[EvidencePiece, ArtifactDraft]]]
    distractors: list[DistractorDraft]


class WorkspaceGenerator(dspy.Module):
    """One workspace per call (its `WorkspaceSpec`). Up to `workers` independent calls run at once (the problems'
    evidence, the distractor batches); `on_stage(StageLog)` reports each stage as it passes."""

    def __init__(self, max_attempts: int = 3, workers: int = 4, distractor_batch: int = 5):
        super().__init__()
        self.max_attempts, self.workers, self.distractor_batch = max_attempts, workers, distractor_batch
        self.write_persona = dspy.Predict(WritePersona)
        self.write_world = dspy.Predict(WriteWorldModel)
        self.write_bottlenecks = dspy.Predict(WriteBottlenecks)
        self.write_library = dspy.Predict(WriteActionLibrary)
        self.write_gold = dspy.Predict(WriteGoldParameters)
        self.plan_evidence = dspy.Predict(PlanEvidence)
        self.write_evidence = dspy.Predict(WriteEvidence)
        self.review_evidence = dspy.Predict(ReviewEvidence)
        self.write_distractors = dspy.Predict(WriteDistractors)

    def forward(self, spec: WorkspaceSpec, split: str = "test",
                on_stage: Callable[[StageLog], None] | None = None) -> dspy.Prediction:
        """`record` (None when a stage failed), `stages` (StageLog each) and `errors` (why the workspace cannot be
        written: a failed stage, or the set checker's findings on the record; empty when it can)."""
        stages = Stages(self.max_attempts, on_stage)
        try:
            drafts = self.drafts(spec, stages)
        except StageFailed as exc:
            return dspy.Prediction(record=None, stages=stages.log, errors=[str(exc)])
        record = assemble_record(spec, split, drafts)
        return dspy.Prediction(record=record, stages=stages.log, errors=record_errors(record))

    def drafts(self, spec: WorkspaceSpec, stages: Stages) -> Drafts:
        persona = stages.run("persona", self.write_persona, lambda p: check_persona(p.persona),
                             role_hint=spec.role_hint, today=spec.today).persona
        world = stages.run("world model", self.write_world, lambda p: check_world(p.world_model, persona),
                           persona=persona.model_dump_json(), today=spec.today,
                           relationship_count=spec.relationships).world_model
        context, people = world_text(persona, world), people_list(persona, world)
        bottlenecks = stages.run(
            "bottlenecks", self.write_bottlenecks,
            lambda p: check_bottlenecks(p.bottlenecks, spec.categories, world, persona, spec.today),
            persona=persona.model_dump_json(), world_model=context, today=spec.today, kinds=list(spec.categories),
        ).bottlenecks
        for b, kind in zip(bottlenecks, spec.categories):
            b.category = kind  # the vocabulary's spelling
        named = library_names(persona, world, bottlenecks)
        actions = stages.run(
            "action library", self.write_library, lambda p: check_library(p.action_library, len(bottlenecks), named),
            persona=context, problems=[f"{k}. {b.description}" for k, b in enumerate(bottlenecks, 1)],
            action_types=[f"{t}: {d} [{', '.join(ps)}]" for t, (d, ps) in sorted(ACTION_TYPES.items())],
            count=spec.actions,
        ).action_library

        def problem(k: int) -> tuple[dict[str, str], list[tuple[EvidencePiece, ArtifactDraft]]]:
            return (self.gold(k, bottlenecks, actions, context, people, stages),
                    self.evidence(k, spec, bottlenecks, context, people, stages))

        solved = in_parallel(problem, range(1, len(bottlenecks) + 1), self.workers)
        evidence = [items for _, items in solved]
        distractors = self.distractors(spec, bottlenecks, evidence, context, people, stages)
        return Drafts(persona, world, bottlenecks, actions, [gold for gold, _ in solved], evidence, distractors)

    def gold(self, k: int, bottlenecks: list[BottleneckDraft], actions: list[ActionDraft], context: str,
             people: list[str], stages: Stages) -> dict[str, str]:
        """PROBE's checklist: the solving action is the library's (never the LM's pick); the LM fills it in."""
        action = next(a for a in actions if a.solves == k)
        filled = stages.run(f"gold action {k}/{len(bottlenecks)}", self.write_gold,
                            lambda p: check_gold(p.gold_parameters, action), persona=context, people=people,
                            problem=bottlenecks[k - 1].model_dump_json(),
                            action=action.model_dump_json(exclude={"solves"})).gold_parameters
        return {p.name.strip(): p.value for p in filled}

    def evidence(self, k: int, spec: WorkspaceSpec, bottlenecks: list[BottleneckDraft], context: str,
                 people: list[str], stages: Stages) -> list[tuple[EvidencePiece, ArtifactDraft]]:
        """Plan the problem's items, write each, then review them together and apply the review's rewrites."""
        b, n = bottlenecks[k - 1], len(bottlenecks)
        others = [o.description for o in bottlenecks if o is not b]
        count = spec.evidence_counts[k - 1]
        plan = stages.run(f"evidence plan {k}/{n}", self.plan_evidence,
                          lambda p: check_plan(p.evidence_plan, count, spec.window), persona=context,
                          problem=b.model_dump_json(), other_problems=others, count=count,
                          window=f"{spec.window} (today is {spec.today})").evidence_plan
        items = []
        for j, piece in enumerate(plan, 1):
            low, high = WORDS_ASKED[piece.kind]
            items.append(stages.run(
                f"evidence {k}/{n} item {j}/{count}", self.write_evidence,
                lambda p, piece=piece: check_evidence(p.evidence_artifact, piece, b.anchors),
                persona=context, people=people, problem=b.model_dump_json(), role=piece.model_dump_json(),
                other_roles=[f"{q.kind}: {q.role}" for q in plan if q is not piece], other_problems=others,
                word_range=f"{low}-{high} words",
            ).evidence_artifact)
        review = stages.run(
            f"evidence review {k}/{n}", self.review_evidence, lambda p: check_review(p.evidence_review, items),
            note=lambda p: review_note(p.evidence_review), problem=b.model_dump_json(), other_problems=others,
            items=[f"{j}. {render_draft(a)}" for j, a in enumerate(items, 1)],
            word_ranges="; ".join(f"{kind}: {lo}-{hi} words" for kind, (lo, hi) in WORDS_ASKED.items()),
        ).evidence_review
        for r in review.rewrites:
            items[r.item - 1] = items[r.item - 1].model_copy(update={"text": r.text})
        return list(zip(plan, items))

    def distractors(self, spec: WorkspaceSpec, bottlenecks: list[BottleneckDraft],
                    evidence: list[list[tuple[EvidencePiece, ArtifactDraft]]], context: str, people: list[str],
                    stages: Stages) -> list[DistractorDraft]:
        """Batches by kind; each reuses one problem's anchors and follows three of the strategies."""
        pool = TextPool(a.text for items in evidence for _, a in items)
        kinds = distractor_kinds(spec, [piece.kind for items in evidence for piece, _ in items])
        batches = [(kind, min(self.distractor_batch, total - start)) for kind, total in kinds.items()
                   for start in range(0, total, self.distractor_batch)]
        # Each batch follows its own three strategies (no two batches are asked the same thing).
        mixes = list(combinations(DISTRACTOR_STRATEGIES.items(), 3))
        random.Random(f"{spec.seed}-{spec.number}-strategies").shuffle(mixes)
        avoid = [b.description for b in bottlenecks]

        def batch(i: int) -> list[DistractorDraft]:
            kind, count = batches[i]
            anchors = bottlenecks[i % len(bottlenecks)].anchors
            low, high = WORDS_ASKED[kind]
            return stages.run(
                f"distractors {i + 1}/{len(batches)}", self.write_distractors,
                lambda p: check_distractors(p.distractors, kind, count, anchors, spec.window, pool),
                persona=context, people=people, problems_to_avoid=avoid, anchors=anchors,
                strategies=[f"{name}: {meaning}" for name, meaning in mixes[i % len(mixes)]],
                kind=kind, count=count, window=f"{spec.window} (today is {spec.today})",
                word_range=f"{low}-{high} words",
            ).distractors

        return [d for found in in_parallel(batch, range(len(batches)), self.workers) for d in found]


def distractor_kinds(spec: WorkspaceSpec, evidence_kinds: list[str]) -> dict[str, int]:
    """How many distractors of each kind bring the workspace to `spec.artifacts` items near the set's mix."""
    total = spec.artifacts - len(evidence_kinds)
    short = {k: max(0.0, spec.artifacts * share - evidence_kinds.count(k)) for k, share in KIND_SHARE.items()}
    exact = {k: total * s / (sum(short.values()) or 1) for k, s in short.items()}
    wanted = {k: int(x) for k, x in exact.items()}
    for k in sorted(exact, key=lambda k: wanted[k] - exact[k])[:total - sum(wanted.values())]:
        wanted[k] += 1  # the largest remainders take what rounding down left
    return wanted


def world_text(persona: PersonaDraft, world: WorldModelDraft) -> str:
    """The persona and its world model, as every later stage sees them."""
    return json.dumps({"persona": persona.model_dump(), **world.model_dump()}, ensure_ascii=False)


def people_list(persona: PersonaDraft, world: WorldModelDraft) -> list[str]:
    return [f"{persona.full_name} <{persona.email}>"] + [f"{p.name} <{p.email}>" for p in world.relationships]


def render_draft(a: ArtifactDraft) -> str:
    people = f" ({', '.join(a.people)})" if a.people else ""
    return f"{a.kind} {a.title!r}{people}:\n{a.text}"


def review_note(review) -> str:
    verdicts = ("each_insufficient_alone", "sufficient_together", "free_of_other_problems", "natural")
    failed = [v for v in verdicts if not getattr(review, v)]
    return (f"failed {', '.join(failed)}; " if failed else "passed; ") + f"{len(review.rewrites)} rewrite(s)" + (
        f": {cap(review.notes.strip(), 300)}" if review.notes.strip() else "")


# ---- Assembly into the set's record layout, and its last checks ----

def make_id(prefix: str, instance_id: str, key: str) -> str:
    """`prefix_` and 8 hex characters of sha256("<instance_id>:<key>"): the set's ids (data/workspace/src)."""
    return f"{prefix}_{hashlib.sha256(f'{instance_id}:{key}'.encode()).hexdigest()[:8]}"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "unnamed"


def artifact_record(draft: ArtifactDraft, created_at: str, instance_id: str, key: str) -> dict[str, Any]:
    if draft.kind == "email":
        payload = {"subject": draft.title, "sender": draft.people[0], "to": draft.people[1:], "cc": [],
                   "timestamp": created_at, "body": draft.text}
    elif draft.kind == "calendar":
        payload = {"title": draft.title, "start_time": draft.start_time, "end_time": draft.end_time,
                   "location": draft.location, "attendees": draft.people, "description": draft.text}
    else:
        payload = {"title": draft.title, "mime": draft.mime, "content": draft.text}
    return {"id": make_id(draft.kind, instance_id, key), "kind": draft.kind, "created_at": created_at,
            "payload": payload}


def assemble_record(spec: WorkspaceSpec, split: str, drafts: Drafts) -> dict[str, Any]:
    persona, world = drafts.persona, drafts.world
    instance_id = f"ws-{_slug(persona.company_name)}-{spec.instance_id_suffix}"
    actions = [{"id": make_id("act", instance_id, f"a{j}"), **a.model_dump(exclude={"solves"})}
               for j, a in enumerate(drafts.actions, 1)]
    artifacts, problems = [], []
    for k, (b, items) in enumerate(zip(drafts.bottlenecks, drafts.evidence), 1):
        evidence = [artifact_record(a, piece.created_at, instance_id, f"p{k}-e{j}")
                    for j, (piece, a) in enumerate(items, 1)]
        artifacts += evidence
        gold = next(rec for rec, a in zip(actions, drafts.actions) if a.solves == k)
        problems.append({"problem_id": f"{instance_id}-p{k}", "description": b.description,
                         "evidence": [a["id"] for a in evidence], "category": b.category,
                         "action": {"action_id": gold["id"], "type": gold["type"], "parameters": drafts.gold[k - 1]}})
    artifacts += [artifact_record(d, d.created_at, instance_id, f"d{j}") for j, d in enumerate(drafts.distractors, 1)]
    artifacts.sort(key=lambda a: a["created_at"])
    random.Random(instance_id).shuffle(actions)  # as PROBE does: the library's order says nothing
    return {
        "instance_id": instance_id,
        "split": split,
        "profile": {
            "persona_id": f"p-{_slug(persona.full_name)}", "full_name": persona.full_name,
            "occupation": persona.occupation, "about": persona.about,
            "relationships": [p.model_dump(exclude={"email"}) for p in world.relationships],
            "personal_context": world.personal_context.model_dump(),
            "organization": {"company_name": persona.company_name, "department": persona.department,
                             **world.organization.model_dump()},
            "today": spec.today,
        },
        "actions": actions,
        "artifacts": artifacts,
        "problems": problems,
    }


def record_errors(record: dict[str, Any]) -> list[str]:
    """The set checker's findings on one workspace, and the loader's, if any."""
    errors = check_workspace(record, RANGES)
    try:
        instance_from_record(record, WORKSPACE.name)
    except ValueError as exc:
        errors.append(f"{record['instance_id']}: {describe_record_error(exc, record)}")
    return errors


def record_texts(record: dict[str, Any]) -> list[str]:
    return [str(a["payload"].get(TEXT_FIELD[a["kind"]], "")) for a in record["artifacts"]]


# ---- A run: many workspaces into one JSONL file, with its record beside it ----

@dataclass
class RunReport:
    """What a run wrote and skipped; `log_path` holds every workspace's stages, errors and LM usage."""

    out: Path
    log_path: Path
    written: list[str] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    resumed_with: int = 0  # workspaces an earlier run had written

    def summary(self) -> str:
        lines = [f"wrote {len(self.written)} workspace(s) to {self.out}"
                 + (f" (resumed: {self.resumed_with} written before)" if self.resumed_with else "")]
        if self.skipped:
            lines.append(f"skipped workspace(s) {', '.join(map(str, self.skipped))}: their stages and errors are in "
                         f"{self.log_path}")
        return "\n".join(lines)


def log_path_for(out: Path) -> Path:
    return out.with_name(out.name.removesuffix(".jsonl") + ".generation.json")


def _resume_state(out: Path, log_path: Path, seed: int, train: int) -> tuple[dict, set[str]]:
    """The earlier run's log, checked against `out` and this run's options; a mismatch is an error naming the fix."""
    if not log_path.exists():
        raise ValueError(f"cannot resume: {log_path} (the record of the run that wrote {out}) is missing; "
                         "start a new run with another --out")
    state = json.loads(log_path.read_text(encoding="utf-8"))
    for name, value in (("seed", seed), ("train", train)):
        if state.get(name) != value:
            raise ValueError(f"cannot resume: {log_path} was run with --{name} {state.get(name)!r}, not {value!r}; "
                             f"pass --{name} {state.get(name)}")
    present = [json.loads(line)["instance_id"] for line in out.read_text(encoding="utf-8").splitlines()
               if line.strip()] if out.exists() else []
    logged = [w["instance_id"] for w in state["workspaces"] if w["status"] == "written"]
    if sorted(present) != sorted(logged):
        raise ValueError(f"cannot resume: {out} holds {len(present)} workspace(s) but {log_path} records "
                         f"{len(logged)} written; restore the pair, or start a new run with another --out")
    return state, set(present)


def generate_workspaces(lm: dspy.LM, n: int, out: str | Path, train: int = 0, seed: int = 0,
                        max_attempts: int = 3, workers: int = 4, resume: bool = False,
                        progress: Callable[[str], None] | None = print_line,
                        generator: WorkspaceGenerator | None = None) -> RunReport:
    """Generate workspaces 1..`n` of the run `seed` into `out` (JSONL), each appended as soon as it passes every
    check; workspaces 1..`train` are the train split, the rest test. `resume` continues a run that stopped or
    skipped workspaces: those it wrote are not asked again.

    A refused stage output is sampled again up to `max_attempts` times in all; a workspace that still fails is
    skipped. Both are reported through `progress` and recorded in the log beside `out` (log_path_for)."""
    from tide_dspy.backbones.registry import lm_context
    from tide_dspy.cost.usage import lm_usage, usage_mark

    if not 0 <= train <= n:
        raise ValueError(f"--train {train}: the train workspaces are some of the --n {n}, so 0 to {n}")
    out = Path(out)
    log_path = log_path_for(out)
    lock = threading.Lock()

    def say(line: str) -> None:  # parallel stages report at once: one whole line each
        if progress is not None:
            with lock:
                progress(line)

    if resume:
        state, written_ids = _resume_state(out, log_path, seed, train)
    else:
        if out.exists() and out.stat().st_size:
            raise ValueError(f"{out} already holds workspaces: pass --resume to continue that run, or choose "
                             "another --out")
        state, written_ids = {"seed": seed, "train": train, "backbone": getattr(lm, "model", str(lm)),
                              "workspaces": []}, set()
        write_text(out, "")
    done = {w["number"] for w in state["workspaces"] if w["status"] == "written"}
    report = RunReport(out, log_path, resumed_with=len(done))
    generator = generator or WorkspaceGenerator(max_attempts=max_attempts, workers=workers)
    pool = TextPool(text for line in out.read_text(encoding="utf-8").splitlines() if line.strip()
                    for text in record_texts(json.loads(line)))
    with lm_context(lm):
        for number in range(1, n + 1):
            if number in done:
                continue
            spec = workspace_spec(seed, number)
            say(f"workspace {number}/{n}: {spec.role_hint}; {len(spec.categories)} problems "
                f"({'; '.join(spec.categories)}), {spec.artifacts} artifacts")

            def on_stage(entry: StageLog, number=number) -> None:
                retried = f" after {entry.attempts} attempts" if entry.attempts > 1 else ""
                say(f"workspace {number}/{n}: {entry.stage} ok{retried}" + (f" ({entry.note})" if entry.note else ""))

            mark = usage_mark(lm)
            pred = generator(spec=spec, split="train" if number <= train else "test", on_stage=on_stage)
            errors = list(pred.errors)
            if pred.record is not None and not errors:
                if pred.record["instance_id"] in written_ids:
                    errors.append(f"instance_id {pred.record['instance_id']} is already in {out}")
                elif copy := pool.admit(record_texts(pred.record)):
                    errors.append(f"a text repeats one of an earlier workspace: {copy}")
            entry = {"number": number, "status": "skipped" if errors else "written",
                     "instance_id": pred.record["instance_id"] if pred.record else None, "spec": asdict(spec),
                     "errors": errors, "stages": [asdict(s) for s in pred.stages], "lm_usage": lm_usage(lm, mark)}
            if errors:
                report.skipped.append(number)
                say(f"workspace {number}/{n}: skipped: {errors[0]}" + (f" (+{len(errors) - 1} more)"
                                                                         if len(errors) > 1 else ""))
                logger.warning("workspace %d/%d skipped: %s", number, n, "; ".join(errors))
            else:
                append_text(out, json.dumps(pred.record, ensure_ascii=False) + "\n")
                written_ids.add(pred.record["instance_id"])
                report.written.append(pred.record["instance_id"])
                say(f"workspace {number}/{n}: wrote {pred.record['instance_id']}")
            state["workspaces"].append(entry)
            write_text(log_path, json.dumps(state, indent=1, ensure_ascii=False) + "\n")
    return report
