"""A PROBE-style workspace generator as DSPy modules (`tide data generate-workspace`).

Pipeline, one LM step each: persona -> world model -> 4-6 bottlenecks -> per bottleneck an action library slice
(one solving action plus decoys) -> per bottleneck 2-5 evidence artifacts that are each only partial ->
distractors that avoid every bottleneck. Each step's output is checked; malformed or inconsistent output is
retried a bounded number of times (with a fresh rollout so the cache does not replay it) and a workspace whose
step still fails is recorded and skipped, never fatal. The output follows the shared workspace format and is
validated by the loader.

Quality depends on the backbone: a small local model (Qwen2.5-Coder 1.5B) writes shallow, repetitive
workspaces whose "hidden" problems are often stated outright in one artifact; the paper built its workspaces
with a strong hosted model through PROBE's pipeline.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Literal

import dspy
from pydantic import BaseModel, Field

from tide_dspy.data.loaders import load_instances
from tide_dspy.data.records import instance_from_record
from tide_dspy.domains import WORKSPACE
from tide_dspy.retry import call_with_retries
from tide_dspy.util.safe_write import append_text, write_text

logger = logging.getLogger(__name__)

RELATIONSHIP_TYPES = ("colleague", "manager", "direct_report", "client", "stakeholder", "vendor", "mentor", "mentee",
                      "cross_functional_partner")
ROLE_HINTS = (
    "a facilities manager at a public university", "a clinical trial coordinator at a research hospital",
    "a program manager at a regional airline", "a finance controller at a mid-size construction firm",
    "a grants manager at an environmental nonprofit", "a product operations lead at a fintech startup",
    "a supply chain planner at an auto-parts maker", "an events manager at a convention centre",
    "a school district IT coordinator", "a quality assurance lead at a pharmaceutical plant",
)


# ---- What the LM writes at each step ----

class PersonaDraft(BaseModel):
    full_name: str
    occupation: str
    company_name: str
    department: str
    about: str = Field(description="2-3 sentences: what the person runs and owns")


class RelationshipDraft(BaseModel):
    name: str
    type: str = Field(description="one of: " + ", ".join(RELATIONSHIP_TYPES))
    department: str
    context: str = Field(description="who they are to the persona, in one sentence")


class WorldDraft(BaseModel):
    email_domain: str = Field(description="the organisation's email domain, e.g. example.org")
    relationships: list[RelationshipDraft] = Field(description="8-15 people the persona works with")
    work_style: str
    communication_preferences: list[str]
    current_priorities: list[str]
    pain_points: list[str]
    team_size: int
    reporting_to: str
    key_meetings: list[str]


class BottleneckDraft(BaseModel):
    description: str = Field(description="who is blocked, by what, on which task, the root cause and the deadline")
    category: str = Field(description="a short, general class label for the problem")


class ActionDraft(BaseModel):
    type: str = Field(description="one of: " + ", ".join(sorted(WORKSPACE.action_types)))
    description: str = Field(description="what the action does, phrased generally")
    constraints: list[str] = Field(default_factory=list)
    required_parameters: list[str]


class ArtifactDraft(BaseModel):
    kind: Literal["email", "calendar", "document"]
    created_at: str = Field(description="ISO 8601 local time, on or before today, e.g. 2026-03-02T09:15:00")
    title: str = Field(description="email subject, calendar title or document title")
    people: list[str] = Field(description="'Name <address>': email sender then recipients, or calendar attendees")
    text: str = Field(description="email body, calendar description or document content (40-200 words)")
    start_time: str = Field(default="", description="calendar only: ISO 8601 start")
    end_time: str = Field(default="", description="calendar only: ISO 8601 end")
    location: str = Field(default="", description="calendar only")


# ---- Signatures ----

class GeneratePersona(dspy.Signature):
    """Invent a realistic, fictional professional whose work involves many emails, meetings and documents."""

    role_hint: str = dspy.InputField()
    persona: PersonaDraft = dspy.OutputField()


class GenerateWorldModel(dspy.Signature):
    """Describe the persona's working world: the people they deal with, priorities, meetings and pain points.
    Every name and organisation is fictional."""

    persona: str = dspy.InputField()
    today: str = dspy.InputField()
    world: WorldDraft = dspy.OutputField()


class GenerateBottlenecks(dspy.Signature):
    """Invent hidden bottlenecks in this person's work that nobody has raised yet: each blocks someone unless
    the persona acts, and each can only be noticed by joining several emails, calendar entries or documents.
    The bottlenecks are distinct in kind and involve people of the world model."""

    persona: str = dspy.InputField()
    world: str = dspy.InputField()
    today: str = dspy.InputField()
    count: int = dspy.InputField(desc="exactly how many bottlenecks to write")
    bottlenecks: list[BottleneckDraft] = dspy.OutputField()


class GenerateActions(dspy.Signature):
    """Write the action that resolves this bottleneck, and plausible decoy actions that look related but do not
    resolve it. Fill every required parameter of the solving action with concrete values (names with
    addresses, dates, subjects, bodies)."""

    persona: str = dspy.InputField()
    bottleneck: str = dspy.InputField()
    decoys: int = dspy.InputField(desc="how many decoy actions to write")
    solving_action: ActionDraft = dspy.OutputField()
    parameters: dict[str, str] = dspy.OutputField(desc="a concrete value for every required parameter")
    decoy_actions: list[ActionDraft] = dspy.OutputField()


class GenerateEvidence(dspy.Signature):
    """Write the artifacts that together reveal this bottleneck. Each one alone must look routine and show only
    part of it; only reading them together shows the problem. Never state the problem outright."""

    persona: str = dspy.InputField()
    world: str = dspy.InputField()
    bottleneck: str = dspy.InputField()
    today: str = dspy.InputField()
    count: int = dspy.InputField(desc="how many artifacts (2-5)")
    artifacts: list[ArtifactDraft] = dspy.OutputField()


class GenerateDistractors(dspy.Signature):
    """Write routine workspace artifacts (updates, resolved issues, FYIs, social items, meeting notes) about the
    same people, projects and systems. None may show, alone or together, any of the listed bottlenecks or any
    other unresolved problem."""

    persona: str = dspy.InputField()
    world: str = dspy.InputField()
    bottlenecks_to_avoid: str = dspy.InputField()
    today: str = dspy.InputField()
    count: int = dspy.InputField(desc="how many artifacts")
    artifacts: list[ArtifactDraft] = dspy.OutputField()


# ---- Checks (an error string, or None) ----

def _check_world(pred) -> str | None:
    n = len(pred.world.relationships)
    return None if 3 <= n <= 15 else f"expected 3-15 relationships (8-15 asked), got {n}"


def _check_count(field_name: str, low: int, high: int) -> Callable[[Any], str | None]:
    def check(pred) -> str | None:
        n = len(getattr(pred, field_name) or [])
        return None if low <= n <= high else f"expected {low}-{high} {field_name}, got {n}"
    return check


def _check_actions(pred) -> str | None:
    missing = [p for p in pred.solving_action.required_parameters if not str(pred.parameters.get(p, "")).strip()]
    if missing:
        return f"solving action parameters {missing} are not filled"
    if not pred.decoy_actions:
        return "no decoy actions"
    return None


def _check_artifacts(today: str, low: int, high: int) -> Callable[[Any], str | None]:
    def check(pred) -> str | None:
        if error := _check_count("artifacts", low, high)(pred):
            return error
        late = [a.title for a in pred.artifacts if a.created_at[:10] > today]
        return f"artifacts dated after today {today}: {late}" if late else None
    return check


class GenerationError(RuntimeError):
    """A step whose output stayed malformed after every retry."""


@dataclass
class StepLog:
    step: str
    attempts: int
    errors: list[str] = field(default_factory=list)


class WorkspaceGenerator(dspy.Module):
    """One workspace per call. `on_step(step, attempts)` reports progress."""

    def __init__(self, max_attempts: int = 3, distractor_ratio: float = 7 / 3, distractor_batch: int = 8,
                 decoys_per_problem: int = 2):
        super().__init__()
        self.max_attempts = max_attempts
        self.distractor_ratio, self.distractor_batch = distractor_ratio, distractor_batch
        self.decoys_per_problem = decoys_per_problem
        self.persona = dspy.Predict(GeneratePersona)
        self.world = dspy.Predict(GenerateWorldModel)
        self.bottlenecks = dspy.Predict(GenerateBottlenecks)
        self.actions = dspy.Predict(GenerateActions)
        self.evidence = dspy.Predict(GenerateEvidence)
        self.distractors = dspy.Predict(GenerateDistractors)

    def step(self, name: str, predictor: dspy.Predict, check: Callable[[Any], str | None], log: list[StepLog],
             on_step: Callable[[str, int], None] | None, **inputs) -> dspy.Prediction:
        record = StepLog(name, 0)
        log.append(record)

        def unusable(attempt: int, error: str) -> None:
            logger.warning("%s: attempt %d/%d unusable: %s", name, attempt + 1, self.max_attempts, error)

        # Any adapter/LM failure counts as malformed output; each retry is a fresh sample (tide_dspy.retry).
        tried = call_with_retries(lambda config: predictor(**inputs, config=config) if config else predictor(**inputs),
                                  self.max_attempts, lm=predictor.lm or dspy.settings.lm, check=check, error_chars=200,
                                  on_failure=unusable)
        record.attempts, record.errors = tried.attempts, tried.errors
        if tried.ok:
            if on_step:
                on_step(name, record.attempts)
            return tried.value
        raise GenerationError(f"{name}: no usable output after {self.max_attempts} attempts ({record.errors[-1]})")

    def forward(self, role_hint: str, today: str, n_problems: int, instance_seed: str, split: str = "test",
                on_step: Callable[[str, int], None] | None = None) -> dspy.Prediction:
        log: list[StepLog] = []
        run = lambda name, pred, check, **kw: self.step(name, pred, check, log, on_step, **kw)  # noqa: E731
        persona = run("persona", self.persona, lambda p: None, role_hint=role_hint).persona
        persona_text = persona.model_dump_json()
        world = run("world model", self.world, _check_world, persona=persona_text, today=today).world
        world_text = world.model_dump_json()
        bottlenecks = run("bottlenecks", self.bottlenecks, _check_count("bottlenecks", n_problems, n_problems + 1),
                          persona=persona_text, world=world_text, today=today, count=n_problems
                          ).bottlenecks[:n_problems]
        solved = []
        for k, b in enumerate(bottlenecks, 1):
            acts = run(f"actions {k}/{len(bottlenecks)}", self.actions, _check_actions, persona=persona_text,
                       bottleneck=b.description, decoys=self.decoys_per_problem)
            ev = run(f"evidence {k}/{len(bottlenecks)}", self.evidence, _check_artifacts(today, 2, 5),
                     persona=persona_text, world=world_text, bottleneck=b.description, today=today, count=3)
            solved.append((b, acts, ev.artifacts))
        n_distractors = round(sum(len(s[2]) for s in solved) * self.distractor_ratio)
        avoid = "\n".join(f"- {b.description}" for b in bottlenecks)
        distractors: list[ArtifactDraft] = []
        while len(distractors) < n_distractors:
            want = min(self.distractor_batch, n_distractors - len(distractors))
            batch = run(f"distractors {len(distractors)}/{n_distractors}", self.distractors,
                        _check_artifacts(today, 1, want), persona=persona_text, world=world_text,
                        bottlenecks_to_avoid=avoid, today=today, count=want)
            distractors += batch.artifacts
        record = assemble_record(instance_seed, split, today, persona, world, solved, distractors)
        return dspy.Prediction(record=record, steps=log)


# ---- Assembly into the shared workspace format ----

def _hex_id(prefix: str, *keys: str) -> str:
    """`prefix_<8hex>`, stable for the same instance and key (as in the shared set)."""
    return f"{prefix}_{hashlib.sha256('|'.join(keys).encode()).hexdigest()[:8]}"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or WORKSPACE.name


def _artifact(draft: ArtifactDraft, instance_id: str, key: str) -> dict[str, Any]:
    if draft.kind == "email":
        payload = {"subject": draft.title, "sender": draft.people[0] if draft.people else "",
                   "to": draft.people[1:], "cc": [], "timestamp": draft.created_at, "body": draft.text}
    elif draft.kind == "calendar":
        payload = {"title": draft.title, "start_time": draft.start_time, "end_time": draft.end_time,
                   "location": draft.location, "attendees": draft.people, "description": draft.text}
    else:
        payload = {"title": draft.title, "mime": "text/markdown", "content": draft.text}
    return {"id": _hex_id(draft.kind, instance_id, key), "kind": draft.kind, "created_at": draft.created_at,
            "payload": payload}


def _action(draft: ActionDraft, instance_id: str, key: str) -> dict[str, Any]:
    return {"id": _hex_id("act", instance_id, key), **draft.model_dump()}


def assemble_record(seed: str, split: str, today: str, persona: PersonaDraft, world: WorldDraft,
                    solved: list, distractors: list[ArtifactDraft]) -> dict[str, Any]:
    instance_id = f"ws-{_slug(persona.company_name)}-{hashlib.sha256(seed.encode()).hexdigest()[:4]}"
    actions, artifacts, problems = [], [], []
    for k, (bottleneck, acts, evidence) in enumerate(solved, 1):
        gold = _action(acts.solving_action, instance_id, f"p{k}-gold")
        actions += [gold] + [_action(d, instance_id, f"p{k}-decoy{j}") for j, d in enumerate(acts.decoy_actions)]
        ev = [_artifact(a, instance_id, f"p{k}-ev{j}") for j, a in enumerate(evidence)]
        artifacts += ev
        problems.append({
            "problem_id": f"{instance_id}-p{k}", "description": bottleneck.description,
            "evidence": [a["id"] for a in ev], "category": bottleneck.category,
            "action": {"action_id": gold["id"], "type": gold["type"], "parameters": dict(acts.parameters)},
        })
    artifacts += [_artifact(a, instance_id, f"d{j}") for j, a in enumerate(distractors)]
    artifacts.sort(key=lambda a: a["created_at"])
    random.Random(seed).shuffle(actions)
    return {
        "instance_id": instance_id,
        "split": split,
        "profile": {
            "persona_id": f"p-{_slug(persona.full_name)}", "full_name": persona.full_name,
            "occupation": persona.occupation, "about": persona.about,
            "relationships": [r.model_dump() for r in world.relationships],
            "personal_context": {k: getattr(world, k) for k in ("work_style", "communication_preferences",
                                                                "current_priorities", "pain_points")},
            "organization": {"company_name": persona.company_name, "department": persona.department,
                             "team_size": world.team_size, "reporting_to": world.reporting_to,
                             "key_meetings": world.key_meetings},
            "today": today,
        },
        "actions": actions,
        "artifacts": artifacts,
        "problems": problems,
    }


def generate_workspaces(lm: dspy.LM, n: int, out: str | Path, split: str = "test", seed: int = 0,
                        max_attempts: int = 3, progress: Callable[[str], None] | None = print,
                        generator: WorkspaceGenerator | None = None, problems: tuple[int, int] = (4, 6)) -> int:
    """Generate `n` workspaces into `out` (JSONL), validating each; returns how many were written.

    A workspace whose step fails after `max_attempts` attempts, or whose record does not validate, is reported
    through `progress` and the log, and skipped.
    """
    generator = generator or WorkspaceGenerator(max_attempts=max_attempts)
    rng = random.Random(seed)
    out = write_text(out, "")  # each workspace is appended as it is generated
    written = 0
    say = progress or (lambda _msg: None)
    with dspy.context(lm=lm):
        for k in range(1, n + 1):
            today = (date(2026, 1, 5) + timedelta(days=rng.randrange(0, 300))).isoformat()
            hint, n_problems = rng.choice(ROLE_HINTS), rng.randint(*problems)
            on_step = lambda step, attempts, k=k: say(  # noqa: E731
                f"workspace {k}/{n}: {step} ok" + (f" after {attempts} attempts" if attempts > 1 else ""))
            try:
                pred = generator(role_hint=hint, today=today, n_problems=n_problems,
                                 instance_seed=f"{seed}-{k}", split=split, on_step=on_step)
                instance_from_record(pred.record)
            except (GenerationError, ValueError) as exc:
                say(f"workspace {k}/{n}: skipped: {exc}")
                logger.warning("workspace %d/%d skipped: %s", k, n, exc)
                continue
            append_text(out, json.dumps(pred.record) + "\n")
            written += 1
    if written:
        load_instances(out, setting=WORKSPACE.name)
    return written
