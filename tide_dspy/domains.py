"""`Setting`, the abstract home of a domain, and the two settings. Each reads its data records, renders an
instance into its round signature's inputs (static parts first) and checks what the LM returned against the
instance: ids exist, the action is in the library, the patch parses. docs/settings.md says how to add one."""

from __future__ import annotations

import functools
import json
import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import dspy
import json_repair
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from tide_dspy import signatures as sig
from tide_dspy.backbones.providers import sanitize_in_place, sanitize_schema
from tide_dspy.schemas import (
    Artifact,
    ChosenAction,
    CodeFindingDraft,
    Finding,
    GoldProblem,
    Instance,
    Template,
    WorkspaceFindingDraft,
)
from tide_dspy.util.diffs import patch_paths
from tide_dspy.util.text import cap_finding
from tide_dspy.workspace_actions import ACTION_TYPES

NO_GUIDANCE = "(none)"
UNNAMED_REPOSITORY = "(not named)"  # the repository prompt's name for an instance whose record names none

# Short handles name artifacts in prompts and in the output schema: a kind letter and the position among the
# artifacts of that kind as shown (F12, E3). They keep enums small (hosted structured outputs cap enum sizes,
# and every enum value is a grammar branch on the embedded engine) and are mapped back to full ids in hygiene.
HANDLE_PREFIX = {"function": "F", "email": "E", "calendar": "C", "document": "D"}
# Above this many artifacts the evidence items are plain strings: OpenAI's structured outputs allow 1000 enum
# values in a schema, and hygiene still drops what does not resolve.
MAX_ENUM = 500


@dataclass(frozen=True)
class ContextView:
    """An instance's artifacts in the order the program shows them, each with its short handle."""

    artifacts: tuple[Artifact, ...]
    handles: tuple[str, ...]

    @classmethod
    def of(cls, instance: Instance, order_seed: int | None = None, first: Sequence[str] = ()) -> ContextView:
        """File order, or a seeded shuffle of it (to measure how much a method relies on position); the ids in
        `first` (a scan's shortlist, most suspect first) go before the rest and so get the first handles and
        the first places in the evidence enum."""
        artifacts = list(instance.artifacts)
        if order_seed is not None:
            random.Random(order_seed).shuffle(artifacts)
        if first:
            rank = {artifact_id: i for i, artifact_id in enumerate(first)}
            artifacts.sort(key=lambda a: rank.get(a.id, len(rank)))  # stable: the rest keep their order
        counts: dict[str, int] = {}
        handles = []
        for a in artifacts:
            counts[a.kind] = counts.get(a.kind, 0) + 1
            handles.append(f"{HANDLE_PREFIX[a.kind]}{counts[a.kind]}")
        return cls(tuple(artifacts), tuple(handles))

    @property
    def ids(self) -> list[str]:
        return [a.id for a in self.artifacts]

    def handle_of(self) -> dict[str, str]:
        return {a.id: h for a, h in zip(self.artifacts, self.handles)}

    def id_of(self) -> dict[str, str]:
        return {h: a.id for a, h in zip(self.artifacts, self.handles)}


@dataclass(frozen=True)
class Hygiene:
    """What cleaning one draft removed, resolved or flagged."""

    dropped_ids: tuple[str, ...] = ()
    aliased: int = 0  # ids written in a short form that names exactly one artifact (see evidence_aliases)
    flags: tuple[str, ...] = ()


def render_templates(templates: list[Template], names: bool = False) -> str:
    """The library as a round (or the scan) shows it: each template's id, pattern and evidence flow, as the paper
    exposes them at inference. The id is what a finding cites (`used_template_id`); `names` also shows each
    template's name (our departure, `--show-template-names`)."""
    if not templates:
        return NO_GUIDANCE
    blocks = []
    for t in templates:
        flow = "\n".join(f"  {i}. {step}" for i, step in enumerate(t.evidence_flow, 1))
        head = f"[{t.id}] {t.name}" if names else f"[{t.id}]"
        blocks.append(f"{head}\n pattern: {t.pattern}\n evidence flow:\n{flow}")
    return "\n\n".join(blocks)


def render_found(findings: list[Finding], view: ContextView) -> str:
    if not findings:
        return "(nothing yet)"
    handle = view.handle_of()
    return "\n".join(
        f"{i}. {f.description} [evidence: {', '.join(handle.get(e, e) for e in f.evidence) or '-'}]"
        for i, f in enumerate(findings, 1)
    )


def schema_only(extra: dict, description: str | None = None) -> Any:
    """A pydantic Field whose JSON schema becomes `extra` (with the field's `description`), while validation keeps
    the field's own type."""

    def replace(schema: dict) -> None:
        description = schema.get("description")
        schema.clear()
        schema.update(extra)
        if description and "description" not in extra:
            schema["description"] = description

    return Field(description=description, json_schema_extra=replace)


def bounded_list(item: type, max_items: int, dialect: str = "full") -> type:
    """list[item] whose JSON schema says maxItems (in the provider's `dialect`: backbones.providers). DSPy keeps
    only a field's bare annotation when it builds the structured-output schema, so the bound has to live in the
    type itself."""

    class BoundedList(list):
        @classmethod
        def __get_pydantic_core_schema__(cls, source, handler):
            return handler.generate_schema(list[item])

        @classmethod
        def __get_pydantic_json_schema__(cls, core_schema, handler):
            return sanitize_schema({**handler(core_schema), "maxItems": max_items}, dialect)

    BoundedList.__name__ = BoundedList.__qualname__ = f"list[{item.__name__}]"
    return BoundedList


def in_dialect(model: type[BaseModel], dialect: str, max_enum_values: int | None = None) -> type[BaseModel]:
    """`model`, whose JSON schema (in prompts and structured-output requests alike) is written in a provider's
    dialect; validation is the model's own."""
    if dialect == "full":
        return model

    def written(schema: dict, cls) -> None:
        sanitize_in_place(schema, dialect, max_enum_values)

    return type(model.__name__, (model,), {"model_config": ConfigDict(json_schema_extra=written),
                                           "__module__": model.__module__})


@functools.lru_cache(maxsize=64)
def grounded_draft(draft_type: type[BaseModel], overrides: str, dialect: str = "full",
                   max_enum_values: int | None = None) -> type[BaseModel]:
    """`draft_type` whose fields' JSON schemas are replaced by `overrides` (JSON text: field -> schema), written in
    the provider's `dialect`; validation stays the draft type's own.

    Its instances pickle (DSPy's bootstrapping hashes the demos it collects with pickle): a class made at run time
    cannot be found by its name, so an instance reduces to `rebuild_grounded` with what rebuilds its class. The
    classes are cached by those arguments, so the rounds of one instance share one class."""
    own = draft_type.model_fields
    fields = {name: (own[name].annotation, schema_only(schema, own[name].description))
              for name, schema in json.loads(overrides).items()}
    draft = create_model(draft_type.__name__.replace("Draft", ""),
                         __base__=in_dialect(draft_type, dialect, max_enum_values), **fields)
    draft.grounded_key = (draft_type, overrides, dialect, max_enum_values)
    draft.__reduce__ = _reduce_grounded
    return draft


def _reduce_grounded(finding: BaseModel) -> tuple:
    return rebuild_grounded, (type(finding).grounded_key, finding.model_dump())


def rebuild_grounded(key: tuple, data: dict) -> BaseModel:
    """An unpickled grounded finding: its class rebuilt from `key` (grounded_draft's arguments), its fields `data`."""
    return grounded_draft(*key).model_validate(data)


def render_action(action: ChosenAction | None) -> str:
    if action is None:
        return "(no action)"
    kind = f" [{action.type}]" if action.type else ""
    return f"{action.action_id}{kind} parameters: {json.dumps(action.parameters, ensure_ascii=False, sort_keys=True)}"


class Setting(ABC):
    """A domain: what a program needs to know to show an instance to the LM and to check what comes back.

    A subclass defines the class attributes in REQUIRED and every `@abstractmethod`; one that misses any of them
    cannot be instantiated (docs/settings.md)."""

    name: ClassVar[str]
    round_signature: ClassVar[type[dspy.Signature]]
    scan_signature: ClassVar[type[dspy.Signature]]
    distill_signature: ClassVar[type[dspy.Signature]]
    draft_type: ClassVar[type[BaseModel]]
    # The most evidence ids a finding may cite: a bound in the output schema that no gold problem of the setting's
    # sets exceeds, so no problem is out of reach (the paper's prompt sets none). `typical_evidence` is the
    # evidence size of the chance floors.
    max_evidence: ClassVar[int]
    typical_evidence: ClassVar[int]
    # The paper's loop shape (T rounds of k findings) and the ranges `tide tune` searches around it.
    rounds: ClassVar[int]
    per_round: ClassVar[int]
    tuning_ranges: ClassVar[dict[str, tuple[int, int]]]
    # What resolves a problem: the field of a Finding / GoldProblem that holds it ("action" or "patch").
    resolution_kind: ClassVar[str]
    # Template ids: the prefix and the least number of digits (ws-t01, repo-t001).
    template_id_prefix: ClassVar[tuple[str, int]]
    # Whether a finding's resolution is a patch that can be applied to the user's tree (and so checked).
    checks_patches: ClassVar[bool] = False
    # What a report says after "none cited" when a finding cites no template.
    uncited_template_note: ClassVar[str] = ""
    # The field of a shared-data record that holds the artifacts: its presence marks a record of this setting.
    record_key: ClassVar[str]
    # The details an LLM judge on PROBE's rubric checks a finding's description for (essential and secondary
    # verdict fields: metrics.judges.detail_fields).
    identification_details: ClassVar[type[dspy.Signature]] = sig.JudgeProblemDetails

    REQUIRED: ClassVar[tuple[str, ...]] = (
        "name", "round_signature", "scan_signature", "distill_signature", "draft_type", "max_evidence",
        "typical_evidence", "rounds", "per_round", "tuning_ranges", "resolution_kind", "template_id_prefix",
        "record_key",
    )

    def __init__(self) -> None:
        missing = [attr for attr in self.REQUIRED if not hasattr(self, attr)]
        if missing:
            raise TypeError(f"{type(self).__name__} does not define {', '.join(missing)}")

    def __copy__(self) -> Setting:
        return self  # a Setting holds no state: a copied program shares its Setting

    def __deepcopy__(self, memo: dict) -> Setting:
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def resolution_of(self, item: Finding | GoldProblem) -> ChosenAction | str | None:
        """The item's action or patch, or None when it has none."""
        return getattr(item, self.resolution_kind) or None

    @abstractmethod
    def from_record(self, record: dict[str, Any]) -> Instance:
        """A validated Instance from one record of this setting's shared data set (pydantic's errors name the
        offending field; data.records.describe_record_error words them in the record's terms)."""

    @abstractmethod
    def render_resolution(self, item: Finding | GoldProblem) -> str:
        """The item's resolution as the judge reads it."""

    def record_features(self):
        """The record format of this setting's benchmark set as explicit `datasets.Features`, keys in the order the
        records list them (data.sets loads the shipped sets through them). A setting without a shipped set has
        none."""
        raise NotImplementedError(f"{type(self).__name__} declares no benchmark record format")

    def template_id(self, number: int, total: int = 0) -> str:
        """ws-t01 / repo-t001; the width grows when a library outgrows it."""
        prefix, width = self.template_id_prefix
        return f"{prefix}{number:0{max(width, len(str(total)))}d}"

    def static_text(self, instance: Instance) -> str:
        """What every round repeats besides the context and the templates (for sizing context windows)."""
        return ""

    @staticmethod
    @abstractmethod
    def render_artifact(artifact: Artifact, handle: str | None = None) -> str:
        """One artifact in full, as a round shows it."""

    @staticmethod
    @abstractmethod
    def evidence_label(artifact: Artifact, source: str | None = None) -> str:
        """How a report names a cited artifact; `source` is the file it came from, when known."""

    @staticmethod
    @abstractmethod
    def render_compact(artifact: Artifact, handle: str) -> str:
        """One line that names an artifact without its content (for artifacts outside a round's focus)."""

    @abstractmethod
    def round_inputs(self, instance: Instance, view: ContextView, guidance: str, found: list[Finding],
                     max_new: int, focus: list[str] | None = None) -> dict:
        """The round signature's inputs for one call."""

    @abstractmethod
    def resolution(self, draft: Any, instance: Instance) -> tuple[dict, list[str]]:
        """The finding's action or patch fields, and the flags that checking them raised."""

    @abstractmethod
    def solved_case(self, instance: Instance, problem: GoldProblem) -> dict[str, str]:
        """The inputs of the distillation signature for one solved problem."""

    def draft_schema(self, instance: Instance) -> dict[str, dict]:
        """JSON schemas that replace draft fields' own in the round's output type (beyond evidence_ids)."""
        return {}

    def render_context(self, instance: Instance, view: ContextView | None = None,
                       focus: list[str] | None = None) -> str:
        """Every artifact in full, in the view's order; or, with `focus` (ids, most suspect first), those in full
        and the others as one compact line each, so they can still be cited."""
        view = view or ContextView.of(instance)
        if focus is None:
            return "\n\n".join(self.render_artifact(a, h) for a, h in zip(view.artifacts, view.handles))
        handle, by_id = view.handle_of(), {a.id: a for a in view.artifacts}
        shown = set(focus)
        full = [self.render_artifact(by_id[i], handle[i]) for i in focus if i in by_id]
        rest = [self.render_compact(a, h) for a, h in zip(view.artifacts, view.handles) if a.id not in shown]
        return "\n\n".join(full) + ("\n\nOther artifacts, not shown in full:\n" + "\n".join(rest) if rest else "")

    # ---- the round's output type, grounded in one instance ----
    def grounded_signature(self, base: type[dspy.Signature], instance: Instance, view: ContextView, max_new: int,
                           max_evidence: int | None = None, dialect: str = "full",
                           max_enum_values: int | None = None) -> type[dspy.Signature]:
        """`base` (with its instructions, possibly optimized) whose findings may cite only this instance's handles,
        1..max_evidence of them, at most `max_new` findings, and (workspace) only library actions with their
        required parameters. The constraints live in the JSON schema (prompt, structured outputs, grammar),
        written in the provider's `dialect` (backbones.providers.sanitize_schema: e.g. bounds become words in the
        descriptions for Claude); parsing stays permissive and hygiene drops what does not resolve."""
        bound = max_evidence or self.max_evidence
        item = {"type": "string"}
        if len(view.handles) <= MAX_ENUM:
            item["enum"] = list(view.handles)
        evidence = {"type": "array", "items": item, "minItems": 1, "maxItems": bound}
        overrides = {"evidence_ids": evidence, **self.draft_schema(instance)}
        draft = grounded_draft(self.draft_type, json.dumps(overrides), dialect, max_enum_values)
        return base.with_updated_fields("findings", type_=bounded_list(draft, max_new, dialect))

    def complete_drafts(self, lm_response: Any) -> list:
        """The findings of an unparseable answer that validate on their own (e.g. all but an item cut off at
        max_tokens); [] when there are none."""
        try:
            data = json_repair.loads(lm_response) if isinstance(lm_response, str) else None
        except Exception:  # noqa: BLE001 - any failure here means nothing to keep
            return []
        items = data.get("findings") if isinstance(data, dict) else None
        drafts = []
        for item in items if isinstance(items, list) else []:
            try:
                drafts.append(self.draft_type.model_validate(item))
            except ValidationError:
                continue
        return drafts

    def evidence_aliases(self, instance: Instance) -> dict[str, str]:
        """Short forms of ids that name exactly one artifact, mapped to the full id. None by default."""
        return {}

    def resolve_evidence(self, ids: list[str], instance: Instance,
                         view: ContextView | None = None) -> tuple[list[str], list[str], int]:
        """(the instance's ids, in order and de-duplicated; the ids it lacks; how many came from an alias).

        A handle of the view (F12) or a full id is taken as is; an alias (see evidence_aliases) is counted."""
        known = instance.artifact_ids
        handles = (view or ContextView.of(instance)).id_of()
        aliases = self.evidence_aliases(instance)
        evidence, dropped, aliased = [], [], 0
        for raw in ids:
            i = raw.strip()
            i = handles.get(i, i)
            if i not in known and i in aliases:
                i, aliased = aliases[i], aliased + 1
            if i in known:
                evidence.append(i)
            else:
                dropped.append(raw)
        return list(dict.fromkeys(evidence)), dropped, aliased

    def render_evidence(self, instance: Instance, problem: GoldProblem) -> str:
        by_id = {a.id: a for a in instance.artifacts}
        return "\n\n".join(self.render_artifact(by_id[e]) for e in problem.evidence)

    def clean(self, draft: Any, instance: Instance, round_no: int,
              view: ContextView | None = None) -> tuple[Finding, Hygiene]:
        """Drop evidence ids the instance lacks (recorded), flag what the setting's checks reject, and cap each
        model-written field (util.text.cap_finding): the capped finding is what the reports and the next round read."""
        evidence, dropped, aliased = self.resolve_evidence(list(draft.evidence_ids), instance, view)
        fields, flags = self.resolution(draft, instance)
        if not evidence:
            flags.append("no_valid_evidence")
        finding = Finding(
            description=draft.description.strip(),
            evidence=evidence,
            used_template_id=draft.used_template_id.strip(),
            why=draft.why.strip(),
            round=round_no,
            flags=flags,
            **fields,
        )
        cap_finding(finding)
        return finding, Hygiene(tuple(dropped), aliased, tuple(finding.flags))

    def render_demo(self, instance: Instance, problem: GoldProblem) -> str:
        """A raw solved example, used in place of templates by the Iter + Demos ablation."""
        case = self.solved_case(instance, problem)
        return (f"Solved example ({instance.instance_id}):\n{case['case_context']}\nProblem: {case['problem']}\n"
                f"Resolution: {case['resolution']}")


def present(record: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The keys the record has; missing required ones are then reported by pydantic as 'Field required'."""
    return {k: record[k] for k in keys if k in record}


def record_list(record: dict[str, Any], key: str) -> list[Any]:
    if key not in record:
        raise ValueError(f"{key}: Field required (add it)")
    value = record[key]
    if not isinstance(value, list):
        raise ValueError(f"{key}: expected a list, got {type(value).__name__}")
    return value


MAX_PARAMETER_CHARS = 400  # an e-mail body or a task description; a recipient list of a few names


class WorkspaceSetting(Setting):
    name = "workspace"
    round_signature = sig.WorkspaceRound
    scan_signature = sig.ScanWorkspaceItem
    distill_signature = sig.DistillWorkspaceTemplate
    draft_type = WorkspaceFindingDraft
    max_evidence = 4  # the workspace sets' gold problems cite 2 to 4 items
    typical_evidence = 3
    rounds, per_round = 10, 1
    tuning_ranges = {"max_rounds": (1, 10), "per_round": (1, 3)}
    resolution_kind = "action"
    template_id_prefix = ("ws-t", 2)
    # type -> (description, required parameters): what an action of the library may do (tide_dspy.workspace_actions)
    action_types: ClassVar[dict[str, tuple[str, list[str]]]] = ACTION_TYPES
    record_key = "artifacts"
    RECORD_KEYS = ("instance_id", "split", "profile", "actions", "artifacts", "problems")

    def from_record(self, record):
        return Instance.model_validate({"setting": self.name, **present(record, self.RECORD_KEYS)})

    def record_features(self):
        """An artifact's payload differs by kind and a gold action's parameters by action type: both are free-form
        JSON (datasets.Json). The rest has a fixed schema."""
        from datasets import Features, Json, List, Value

        text, texts = Value("string"), List(Value("string"))
        return Features({
            "instance_id": text, "split": text,
            "profile": {
                "persona_id": text, "full_name": text, "occupation": text, "about": text,
                "relationships": List({"name": text, "type": text, "department": text, "context": text}),
                "personal_context": {"work_style": text, "communication_preferences": texts,
                                     "current_priorities": texts, "pain_points": texts},
                "organization": {"company_name": text, "department": text, "team_size": Value("int64"),
                                 "reporting_to": text, "key_meetings": texts},
                "today": text,
            },
            "actions": List({"id": text, "type": text, "description": text, "constraints": texts,
                             "required_parameters": texts}),
            "artifacts": List({"id": text, "kind": text, "created_at": text, "payload": Json()}),
            "problems": List({"problem_id": text, "description": text, "evidence": texts,
                              "action": {"action_id": text, "type": text, "parameters": Json()}, "category": text}),
        })

    def render_resolution(self, item):
        return render_action(item.action)

    def static_text(self, instance: Instance) -> str:
        return self.render_profile(instance) + self.render_actions(instance)

    @staticmethod
    def render_artifact(a, handle: str | None = None) -> str:
        p = a.payload
        name = f"{handle} · {a.id}" if handle else a.id
        if a.kind == "email":
            head = f"From: {p.get('sender', '')}\nTo: {', '.join(p.get('to', []))}"
            if p.get("cc"):
                head += f"\nCc: {', '.join(p['cc'])}"
            return f"### {name} (email, {a.created_at})\n{head}\nSubject: {p.get('subject', '')}\n{p.get('body', '')}"
        if a.kind == "calendar":
            return (
                f"### {name} (calendar, created {a.created_at})\n{p.get('title', '')}: {p.get('start_time', '')} to "
                f"{p.get('end_time', '')} at {p.get('location', '')}\nAttendees: {', '.join(p.get('attendees', []))}\n"
                f"{p.get('description', '')}"
            )
        return f"### {name} (document, {a.created_at})\nTitle: {p.get('title', '')}\n{p.get('content', '')}"

    @staticmethod
    def render_compact(a, handle: str) -> str:
        return f"- {handle} · {a.id} ({a.kind}, {a.created_at}): {a.title}"

    @staticmethod
    def evidence_label(a, source: str | None = None) -> str:
        return f"{a.id} {a.kind} \"{a.title}\"" + (f" ({source})" if source else "")

    @staticmethod
    def render_profile(instance: Instance) -> str:
        return json.dumps(instance.profile or {}, ensure_ascii=False, indent=1)

    @staticmethod
    def render_actions(instance: Instance) -> str:
        lines = []
        for a in instance.actions:
            lines.append(
                f"- {a.id} [{a.type}] {a.description} | required: {', '.join(a.required_parameters) or '-'}"
                + (f" | constraints: {'; '.join(a.constraints)}" if a.constraints else "")
            )
        return "\n".join(lines)

    def round_inputs(self, instance, view, guidance, found, max_new, focus=None):
        return dict(
            profile=self.render_profile(instance),
            context=self.render_context(instance, view, focus),
            actions=self.render_actions(instance),
            templates=guidance,
            max_new=max_new,
            already_found=render_found(found, view),
        )

    def draft_schema(self, instance):
        return {"action": self.action_schema(instance)} if instance.actions else {}

    @staticmethod
    def action_schema(instance: Instance) -> dict:
        """One alternative per library action: its id, and an object with exactly its required parameters,
        each a non-empty string of bounded length. A grammar or a structured-output backend can then only write a
        library action with every required parameter filled: an unbounded parameter let a small model spend its
        whole output budget on one (a 3,880-character recipient list) and leave the others unwritten."""
        options = []
        for a in instance.actions:
            params = {name: {"type": "string", "minLength": 1, "maxLength": MAX_PARAMETER_CHARS}
                      for name in a.required_parameters}
            options.append({
                "type": "object",
                "properties": {
                    "action_id": {"type": "string", "enum": [a.id]},
                    "parameters": {"type": "object", "properties": params, "required": list(params),
                                   "additionalProperties": False},
                },
                "required": ["action_id", "parameters"],
                "additionalProperties": False,
            })
        return {"anyOf": options}

    def resolution(self, draft: WorkspaceFindingDraft, instance):
        flags = []
        chosen = draft.action
        library_action = instance.action(chosen.action_id.strip())
        if library_action is None:
            flags.append("action_not_in_library")
        elif any(not str(chosen.parameters.get(k, "")).strip() for k in library_action.required_parameters):
            flags.append("missing_parameters")
        action = ChosenAction(action_id=chosen.action_id.strip(), type=library_action.type if library_action else "",
                              parameters=dict(chosen.parameters))
        return {"action": action}, flags

    def solved_case(self, instance, problem):
        context = self.render_evidence(instance, problem)
        action = problem.action
        library_action = instance.action(action.action_id) if action else None
        resolution = (
            f"{library_action.type}: {library_action.description}\n"
            f"parameters: {json.dumps(action.parameters, ensure_ascii=False)}"
            if library_action and action
            else json.dumps(action.model_dump() if action else {}, ensure_ascii=False)
        )
        return dict(case_context=context, problem=problem.description, resolution=resolution)


class RepositorySetting(Setting):
    name = "repository"
    round_signature = sig.RepositoryRound
    scan_signature = sig.ScanFunction
    distill_signature = sig.DistillRepositoryTemplate
    draft_type = CodeFindingDraft
    # The repository sets' gold problems cite 1 to 20 functions (test: 209 of 251 cite 1-2, 42 cite 3-20; train:
    # at most 13), so a bound below 20 puts some problems out of reach.
    max_evidence = 20
    typical_evidence = 2
    rounds, per_round = 3, 3
    tuning_ranges = {"max_rounds": (1, 5), "per_round": (1, 5)}
    resolution_kind = "patch"
    template_id_prefix = ("repo-t", 3)
    checks_patches = True
    uncited_template_note = " (template-novel)"
    record_key = "candidates"
    identification_details = sig.JudgeBugDetails
    RECORD_KEYS = ("instance_id", "split", "repo", "anchor_commit", "problems")
    META_KEYS = ("anchor_date", "num_problems", "num_candidates", "num_buggy_functions")
    CANDIDATE_KEYS = ("path", "qualname", "start_line", "end_line", "code")

    def from_record(self, record):
        return Instance.model_validate({
            "setting": self.name,
            **present(record, self.RECORD_KEYS),
            "artifacts": [self.candidate_artifact(i, c) for i, c in enumerate(record_list(record, self.record_key))],
            "meta": present(record, self.META_KEYS),
        })

    def record_features(self):
        from datasets import Features, List, Value

        text, texts, count = Value("string"), List(Value("string")), Value("int64")
        return Features({
            "instance_id": text, "repo": text, "anchor_commit": text, "anchor_date": text, "split": text,
            "num_problems": count, "num_candidates": count, "num_buggy_functions": count,
            "candidates": List({"id": text, "path": text, "qualname": text, "start_line": count, "end_line": count,
                                "code": text}),
            "problems": List({
                "problem_id": text, "description": text, "evidence": texts, "patch": text, "fail_to_pass": texts,
                "pass_to_pass": texts, "created_at": text, "base_commit": text, "version": text, "test_patch": text,
                "test_patch_applies_at_anchor": Value("bool"), "buggy_code_identical_to_base_commit": Value("bool"),
                "anchor_minus_base_days": Value("float64"), "source_datasets": texts,
            }),
        })

    @classmethod
    def candidate_artifact(cls, index: int, candidate: Any) -> dict[str, Any]:
        """A candidate function of a record as an artifact (its id, and its location and code as the payload)."""
        if not isinstance(candidate, dict):
            raise ValueError(f"{cls.record_key}[{index}]: expected an object, got {type(candidate).__name__}")
        missing = [k for k in ("id", *cls.CANDIDATE_KEYS) if k not in candidate]
        if missing:
            raise ValueError(f"{cls.record_key}[{index}]: missing field(s) {', '.join(missing)}")
        return {"id": candidate["id"], "kind": "function", "payload": {k: candidate[k] for k in cls.CANDIDATE_KEYS}}

    def render_resolution(self, item):
        return item.patch

    @staticmethod
    def render_artifact(a, handle: str | None = None) -> str:
        p = a.payload
        name = f"{handle} · {a.id}" if handle else a.id
        return f"### {name} ({p.get('path')} lines {p.get('start_line')}-{p.get('end_line')})\n{p.get('code', '')}"

    @staticmethod
    def evidence_label(a, source: str | None = None) -> str:
        p = a.payload
        return f"{p.get('path')}:{p.get('start_line')}-{p.get('end_line')} ({a.id})"

    @staticmethod
    def render_compact(a, handle: str) -> str:
        signature = next((ln.strip() for ln in str(a.payload.get("code", "")).splitlines() if ln.strip()), "")
        return f"- {handle} · {a.id}: {signature[:160]}"

    def evidence_aliases(self, instance: Instance) -> dict[str, str]:
        """`Class.method` for `path.py::Class.method`, when no other candidate of the instance has that qualname.
        Models often drop the path; an ambiguous qualname stays unknown and is dropped."""
        by_qualname: dict[str, list[str]] = {}
        for a in instance.artifacts:
            by_qualname.setdefault(a.id.partition("::")[2], []).append(a.id)
        return {q: ids[0] for q, ids in by_qualname.items() if q and len(ids) == 1}

    def round_inputs(self, instance, view, guidance, found, max_new, focus=None):
        return dict(
            repository=instance.repo or UNNAMED_REPOSITORY,
            context=self.render_context(instance, view, focus),
            templates=guidance,
            max_new=max_new,
            already_found=render_found(found, view),
        )

    def resolution(self, draft: CodeFindingDraft, instance):
        return {"patch": draft.patch}, ([] if patch_paths(draft.patch) else ["patch_unparseable"])

    def solved_case(self, instance, problem):
        return dict(case_context=self.render_evidence(instance, problem), problem=problem.description,
                    resolution=problem.patch or "")


WORKSPACE = WorkspaceSetting()
REPOSITORY = RepositorySetting()
SETTINGS: dict[str, Setting] = {s.name: s for s in (WORKSPACE, REPOSITORY)}
SETTING_NAMES: tuple[str, ...] = tuple(SETTINGS)


def per_setting(fact: str) -> str:
    """One fact of every setting, for help texts: per_setting("rounds") is "10 workspace / 3 repository"."""
    return " / ".join(f"{getattr(s, fact)} {s.name}" for s in SETTINGS.values())


def setting_of_gold(gold: list[GoldProblem]) -> Setting:
    """The setting of an instance known only by its gold problems: a patch means code."""
    return REPOSITORY if any(g.patch for g in gold) else WORKSPACE


def get_setting(name: str | Setting) -> Setting:
    """The Setting of a name (a key of SETTINGS); a Setting is returned as is."""
    if isinstance(name, Setting):
        return name
    try:
        return SETTINGS[name]
    except KeyError:
        raise ValueError(f"unknown setting {name!r}; choose one of {sorted(SETTINGS)}") from None
