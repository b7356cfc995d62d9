"""The two settings. Each renders an instance into its round signature's inputs (static parts first) and
checks what the LM returned against the instance: ids exist, the action is in the library, the patch parses."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

import dspy
import json_repair
from pydantic import ValidationError

from tide_dspy import signatures as sig
from tide_dspy.schemas import (
    ChosenAction,
    CodeFindingDraft,
    Finding,
    GoldProblem,
    Instance,
    Template,
    WorkspaceFindingDraft,
)

NO_GUIDANCE = "(none)"


@dataclass(frozen=True)
class Hygiene:
    """What cleaning one draft removed, resolved or flagged."""

    dropped_ids: tuple[str, ...] = ()
    aliased: int = 0  # ids written in a short form that names exactly one artifact (see evidence_aliases)
    flags: tuple[str, ...] = ()


def render_templates(templates: list[Template]) -> str:
    if not templates:
        return NO_GUIDANCE
    blocks = []
    for t in templates:
        flow = "\n".join(f"  {i}. {step}" for i, step in enumerate(t.evidence_flow, 1))
        blocks.append(f"[{t.id}] {t.name}\n pattern: {t.pattern}\n evidence flow:\n{flow}")
    return "\n\n".join(blocks)


def render_found(findings: list[Finding]) -> str:
    if not findings:
        return "(nothing yet)"
    return "\n".join(
        f"{i}. {f.description} [evidence: {', '.join(f.evidence) or '-'}]" for i, f in enumerate(findings, 1)
    )


_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.M)
_HUNK = re.compile(r"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@", re.M)


def patch_paths(patch: str) -> list[str]:
    """Paths a unified diff touches, or [] when it does not parse as one."""
    if not _HUNK.search(patch or ""):
        return []
    paths = [m.group(2) for m in _DIFF_HEADER.finditer(patch)]
    paths += [p for p in re.findall(r"^\+\+\+ b/(\S+)", patch, re.M) if p not in paths]
    return paths


class Setting:
    name: ClassVar[str]
    round_signature: ClassVar[type[dspy.Signature]]
    distill_signature: ClassVar[type[dspy.Signature]]
    draft_type: ClassVar[type]

    @staticmethod
    def render_artifact(artifact) -> str:
        raise NotImplementedError

    def round_inputs(self, instance: Instance, guidance: str, found: list[Finding], max_new: int) -> dict:
        raise NotImplementedError

    def resolution(self, draft: Any, instance: Instance) -> tuple[dict, list[str]]:
        """The finding's action or patch fields, and the flags that checking them raised."""
        raise NotImplementedError

    def solved_case(self, instance: Instance, problem: GoldProblem) -> dict[str, str]:
        """The inputs of the distillation signature for one solved problem."""
        raise NotImplementedError

    def render_context(self, instance: Instance) -> str:
        return "\n\n".join(self.render_artifact(a) for a in instance.artifacts)

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

    def resolve_evidence(self, ids: list[str], instance: Instance) -> tuple[list[str], list[str], int]:
        """(the instance's ids, in order and de-duplicated; the ids it lacks; how many came from an alias)."""
        known, aliases = instance.artifact_ids, self.evidence_aliases(instance)
        evidence, dropped, aliased = [], [], 0
        for raw in ids:
            i = raw.strip()
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

    def clean(self, draft: Any, instance: Instance, round_no: int) -> tuple[Finding, Hygiene]:
        """Drop evidence ids the instance lacks (recorded) and flag what the setting's checks reject."""
        evidence, dropped, aliased = self.resolve_evidence(list(draft.evidence_ids), instance)
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
        return finding, Hygiene(tuple(dropped), aliased, tuple(flags))

    def render_demo(self, instance: Instance, problem: GoldProblem) -> str:
        """A raw solved example, used in place of templates by the Iter + Demos ablation."""
        case = self.solved_case(instance, problem)
        return f"Solved example ({instance.instance_id}):\n{case['case_context']}\nProblem: {case['problem']}\nResolution: {case['resolution']}"


class WorkspaceSetting(Setting):
    name = "workspace"
    round_signature = sig.WorkspaceRound
    distill_signature = sig.DistillWorkspaceTemplate
    draft_type = WorkspaceFindingDraft

    @staticmethod
    def render_artifact(a) -> str:
        p = a.payload
        if a.kind == "email":
            head = f"From: {p.get('sender', '')}\nTo: {', '.join(p.get('to', []))}"
            if p.get("cc"):
                head += f"\nCc: {', '.join(p['cc'])}"
            return f"### {a.id} (email, {a.created_at})\n{head}\nSubject: {p.get('subject', '')}\n{p.get('body', '')}"
        if a.kind == "calendar":
            return (
                f"### {a.id} (calendar, created {a.created_at})\n{p.get('title', '')}: {p.get('start_time', '')} to "
                f"{p.get('end_time', '')} at {p.get('location', '')}\nAttendees: {', '.join(p.get('attendees', []))}\n"
                f"{p.get('description', '')}"
            )
        return f"### {a.id} (document, {a.created_at})\nTitle: {p.get('title', '')}\n{p.get('content', '')}"

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

    def round_inputs(self, instance, guidance, found, max_new):
        return dict(
            profile=self.render_profile(instance),
            context=self.render_context(instance),
            actions=self.render_actions(instance),
            templates=guidance,
            max_new=max_new,
            already_found=render_found(found),
        )

    def resolution(self, draft: WorkspaceFindingDraft, instance):
        flags = []
        library_action = instance.action(draft.action_id.strip())
        if library_action is None:
            flags.append("action_not_in_library")
        elif any(k not in draft.parameters for k in library_action.required_parameters):
            flags.append("missing_parameters")
        action = ChosenAction(action_id=draft.action_id.strip(), type=library_action.type if library_action else "",
                              parameters=dict(draft.parameters))
        return {"action": action}, flags

    def solved_case(self, instance, problem):
        context = self.render_evidence(instance, problem)
        action = problem.action
        library_action = instance.action(action.action_id) if action else None
        resolution = (
            f"{library_action.type}: {library_action.description}\nparameters: {json.dumps(action.parameters, ensure_ascii=False)}"
            if library_action and action
            else json.dumps(action.model_dump() if action else {}, ensure_ascii=False)
        )
        return dict(case_context=context, problem=problem.description, resolution=resolution)


class RepositorySetting(Setting):
    name = "repository"
    round_signature = sig.RepositoryRound
    distill_signature = sig.DistillRepositoryTemplate
    draft_type = CodeFindingDraft

    @staticmethod
    def render_artifact(a) -> str:
        p = a.payload
        return f"### {a.id} ({p.get('path')} lines {p.get('start_line')}-{p.get('end_line')})\n{p.get('code', '')}"

    def evidence_aliases(self, instance: Instance) -> dict[str, str]:
        """`Class.method` for `path.py::Class.method`, when no other candidate of the instance has that qualname.
        Models often drop the path; an ambiguous qualname stays unknown and is dropped."""
        by_qualname: dict[str, list[str]] = {}
        for a in instance.artifacts:
            by_qualname.setdefault(a.id.partition("::")[2], []).append(a.id)
        return {q: ids[0] for q, ids in by_qualname.items() if q and len(ids) == 1}

    def round_inputs(self, instance, guidance, found, max_new):
        return dict(
            context=self.render_context(instance),
            templates=guidance,
            max_new=max_new,
            already_found=render_found(found),
        )

    def resolution(self, draft: CodeFindingDraft, instance):
        return {"patch": draft.patch}, ([] if patch_paths(draft.patch) else ["patch_unparseable"])

    def solved_case(self, instance, problem):
        return dict(case_context=self.render_evidence(instance, problem), problem=problem.description,
                    resolution=problem.patch or "")


SETTINGS: dict[str, Setting] = {"workspace": WorkspaceSetting(), "repository": RepositorySetting()}


def get_setting(name: str) -> Setting:
    try:
        return SETTINGS[name]
    except KeyError:
        raise ValueError(f"unknown setting {name!r}; choose one of {sorted(SETTINGS)}") from None
