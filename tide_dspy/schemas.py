"""Pydantic types shared by every part of tide-dspy. No logic beyond validation lives here."""

from __future__ import annotations

import json
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ArtifactKind = Literal["email", "calendar", "document", "function"]
# When TIDE's loop ends early: "empty" (the paper's rule) on a round that returns no finding; "no-new" also on a
# round whose findings all repeat earlier ones (discovery.TIDE).
StopRule = Literal["empty", "no-new"]
STOP_RULES: tuple[str, ...] = get_args(StopRule)
# How an LLM judge rates a matched pair: "probe", PROBE's two-tier 1 / 0.5 / 0 scale (the paper's), or "likert",
# a 1-5 rating mapped to (s - 1) / 4 (metrics.judges).
JudgeRubric = Literal["probe", "likert"]
JUDGE_RUBRICS: tuple[str, ...] = get_args(JudgeRubric)


class Artifact(BaseModel):
    """One item of a context: a workspace email/calendar entry/document, or a candidate function."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: ArtifactKind
    created_at: str | None = None
    # Workspace items keep their payload as written (subject, body, ...). Functions carry
    # {path, qualname, start_line, end_line, code}.
    payload: dict[str, Any] = Field(default_factory=dict)

    @property
    def title(self) -> str:
        p = self.payload
        return str(p.get("subject") or p.get("title") or p.get("qualname") or self.id)


class Action(BaseModel):
    """An entry of a workspace's action library."""

    model_config = ConfigDict(extra="allow")

    id: str
    type: str
    description: str
    constraints: list[str] = Field(default_factory=list)
    required_parameters: list[str] = Field(default_factory=list)


class ChosenAction(BaseModel):
    """A library action picked for a problem, with its parameters filled."""

    action_id: str
    type: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)


class GoldProblem(BaseModel):
    """A hidden problem of an instance: the reference the metrics score against."""

    model_config = ConfigDict(extra="allow")

    problem_id: str
    description: str
    evidence: list[str]
    action: ChosenAction | None = None  # workspace
    patch: str | None = None  # repository
    category: str | None = None


class Instance(BaseModel):
    """A context with its hidden problems. Validation guarantees every id a problem cites exists."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    setting: str  # the name of a Setting (domains.SETTINGS); data/records.py refuses a record of another
    split: str | None = None
    artifacts: list[Artifact]
    problems: list[GoldProblem] = Field(default_factory=list)
    # workspace
    profile: dict[str, Any] | None = None
    actions: list[Action] = Field(default_factory=list)
    # repository
    repo: str | None = None
    anchor_commit: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ids_resolve(self) -> Instance:
        seen: set[str] = set()
        for i, a in enumerate(self.artifacts):
            if a.id in seen:
                raise ValueError(f"artifacts[{i}].id: duplicate artifact id {a.id!r}")
            seen.add(a.id)
        action_ids = {a.id for a in self.actions}
        if len(action_ids) != len(self.actions):
            raise ValueError("actions: duplicate action id")
        for i, p in enumerate(self.problems):
            unknown = [e for e in p.evidence if e not in seen]
            if unknown:
                raise ValueError(
                    f"problems[{i}].evidence: {unknown} not among the instance's artifacts "
                    f"(problem {p.problem_id!r}); fix the id or add the artifact"
                )
            if p.action is not None and self.actions and p.action.action_id not in action_ids:
                raise ValueError(
                    f"problems[{i}].action.action_id: {p.action.action_id!r} is not in the action library"
                )
        return self

    @property
    def artifact_ids(self) -> set[str]:
        return {a.id for a in self.artifacts}

    def action(self, action_id: str) -> Action | None:
        return next((a for a in self.actions if a.id == action_id), None)


class Finding(BaseModel):
    """One discovered problem: description, grounding evidence, and a resolving action or patch."""

    description: str
    evidence: list[str] = Field(default_factory=list)
    action: ChosenAction | None = None
    patch: str | None = None
    used_template_id: str = ""
    why: str = ""
    round: int = 0
    # Hygiene notes such as "action_not_in_library" or "patch_unparseable".
    flags: list[str] = Field(default_factory=list)


class Template(BaseModel):
    """A thought template: the abstract shape of a class of problems and how to find one."""

    id: str
    name: str
    pattern: str
    evidence_flow: list[str]
    setting: str | None = None  # a Setting's name; TemplateLibrary.load refuses another
    source_case: str | None = None


class RoundRecord(BaseModel):
    """What one discovery round did. Tokens are None when the LM does not report them; the cost is None when
    neither the provider nor the backbone's prices give one, and leaves out calls DSPy's cache answered."""

    round: int
    new: int = 0
    rediscovered: int = 0
    lm_calls: int = 0
    cache_hits: int = 0  # of lm_calls, answered by DSPy's cache (no tokens billed)
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    parse_failures: int = 0
    salvaged: int = 0  # complete findings kept from an answer that failed to parse as a whole
    dropped_evidence: int = 0
    dropped_ids: list[str] = Field(default_factory=list)  # the first few, to see what the model wrote
    aliased_evidence: int = 0
    flagged: int = 0
    failed: bool = False
    aborted: bool = False  # failed for a reason a retry cannot fix (context window, auth): the run stops
    error: str | None = None
    seconds: float = 0.0


# ---- What the LM writes. Kept small and flat so small models can fill them. ----


class ActionChoice(BaseModel):
    """The action a workspace finding proposes. The round's output schema narrows it to one library action with
    its own required parameters (see domains.WorkspaceSetting.action_schema); parsing stays permissive so that
    hygiene, not the parser, decides what an unconstrained backend wrote."""

    action_id: str = Field(description="id of one action from the action library")
    parameters: dict[str, str] = Field(default_factory=dict, description="the action's required parameters, filled")

    @field_validator("parameters", mode="before")
    @classmethod
    def _as_mapping(cls, value):
        """Also accept a list of {name, value} pairs, and non-string values."""
        if isinstance(value, list):
            value = {str(p.get("name", "")): p.get("value", "") for p in value if isinstance(p, dict)}
        if isinstance(value, dict):
            return {str(k): v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for k, v in value.items()}
        return value


class WorkspaceFindingDraft(BaseModel):
    description: str = Field(description="who is blocked, by whom or what, on which task, the root cause, the deadline")
    evidence_ids: list[str] = Field(description="cite the artifacts that together show the problem by the handles "
                                                "shown before their ids (E3, D7, C2)")
    action: ActionChoice = Field(description="resolve the problem with exactly one action from the action library: "
                                             "its id, and every required parameter filled with a concrete value")
    used_template_id: str = Field(default="", description="id of the template followed, or empty")
    why: str = Field(default="", description="why the template matched, in one sentence")

    @model_validator(mode="before")
    @classmethod
    def _flat_action(cls, data):
        """Older answers and demos give action_id and parameters at the top level."""
        if isinstance(data, dict) and "action" not in data and "action_id" in data:
            data = {**data, "action": {"action_id": data.get("action_id"), "parameters": data.get("parameters") or {}}}
            data.pop("action_id"), data.pop("parameters", None)
        return data


class CodeFindingDraft(BaseModel):
    description: str = Field(description="the bug: what goes wrong, on which input, and why")
    evidence_ids: list[str] = Field(description="cite the candidate functions that contain the bug by the handles "
                                                "shown before their ids (F1, F12)")
    patch: str = Field(description="fix the bug with a minimal unified diff against the shown code: "
                                   "diff --git a/<path> b/<path>, --- a/<path>, +++ b/<path>, then @@ hunks")
    used_template_id: str = Field(default="", description="id of the template followed, or empty if novel")
    why: str = Field(default="", description="why the template matched, in one sentence")


class TemplateDraft(BaseModel):
    name: str = Field(description="a short name for the class of problem")
    pattern: str = Field(description="the abstract shape of the problem, with no names, dates or identifiers")
    evidence_flow: list[str] = Field(description="ordered signals to look for and how to join them")
