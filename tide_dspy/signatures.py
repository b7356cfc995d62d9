"""Every LM call site of tide-dspy, as a DSPy signature.

Instructions live in the docstrings so optimizers can rewrite them. The output rules of a round (cite the artifacts
by their handles; resolve with one library action or a unified diff) live in the descriptions of its output type's
fields (schemas.WorkspaceFindingDraft, schemas.CodeFindingDraft), which no optimizer rewrites and which every
prompt and output schema carries. Input fields are ordered static first (context, library, templates) and the
growing state last, so prefix caches are reused across rounds.
"""

from __future__ import annotations

from typing import Literal

import dspy

from tide_dspy.schemas import CodeFindingDraft, TemplateDraft, WorkspaceFindingDraft

# ---- discovery rounds ----


class WorkspaceRound(dspy.Signature):
    """You are reading a person's workspace (emails, documents, calendar entries) to find problems nobody
    has asked about yet: something that will block them or others unless someone acts. A real problem only
    shows when several artifacts are read together. Use the templates as patterns of what to look for.
    Report the `max_new` most likely problems that are NOT already in `already_found`; return an empty
    list only when every problem you can see is already there."""

    profile: str = dspy.InputField(desc="who the person is: role, relationships, priorities, today's date")
    context: str = dspy.InputField(desc="the workspace artifacts, each headed by its id")
    actions: str = dspy.InputField(desc="the action library: id, type, description, required parameters")
    templates: str = dspy.InputField(desc="thought templates (or solved examples) describing problem patterns")
    max_new: int = dspy.InputField(desc="the most new problems to report in this answer")
    already_found: str = dspy.InputField(desc="problems reported in earlier rounds; do not repeat them")
    findings: list[WorkspaceFindingDraft] = dspy.OutputField(desc="up to max_new new problems")


class RepositoryRound(dspy.Signature):
    """You are reviewing candidate functions of a Python repository to find bugs nobody has reported yet.
    A bug may span several functions. Use the templates as patterns of what to look for; a bug that fits
    no template is allowed (leave used_template_id empty). Report the `max_new` most likely bugs that are
    NOT already in `already_found`; return an empty list only when every bug you can see is already there."""

    repository: str = dspy.InputField(desc="the repository the functions come from")
    context: str = dspy.InputField(desc="candidate functions, each headed by its id, path and line numbers")
    templates: str = dspy.InputField(desc="thought templates (or solved examples) describing bug patterns")
    max_new: int = dspy.InputField(desc="the most new bugs to report in this answer")
    already_found: str = dspy.InputField(desc="bugs reported in earlier rounds; do not repeat them")
    findings: list[CodeFindingDraft] = dspy.OutputField(desc="up to max_new new bugs")


# ---- the scan: one artifact at a time (small models judge locally better than they select globally) ----

Suspicion = Literal[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]


class ScanWorkspaceItem(dspy.Signature):
    """You are screening one item of a person's workspace (an email, document or calendar entry) before a
    closer review. Rate how likely the item is a signal of a problem nobody has raised yet: a deadline at
    risk, a blocker, a conflict, a missing approval or hand-off, a commitment nobody acted on. Use the
    templates as patterns of what such signals look like. Most items are routine: rate them low."""

    templates: str = dspy.InputField(desc="thought templates describing problem patterns")
    artifact: str = dspy.InputField(desc="one workspace item, headed by its id")
    suspicion: Suspicion = dspy.OutputField(desc="0 = routine, 9 = clearly part of a problem")
    template_id: str = dspy.OutputField(desc="id of the template it fits best, or empty")
    reason: str = dspy.OutputField(desc="one short sentence")


class ScanFunction(dspy.Signature):
    """You are screening one function of a Python repository before a closer review. Rate how likely it
    contains a bug: wrong condition or bound, unhandled case, wrong value returned, misuse of an API, a
    mismatch with what its name and arguments promise. Use the templates as patterns of bugs. Most functions
    are correct: rate them low."""

    templates: str = dspy.InputField(desc="thought templates describing bug patterns")
    artifact: str = dspy.InputField(desc="one function, headed by its id and line numbers")
    suspicion: Suspicion = dspy.OutputField(desc="0 = looks correct, 9 = clearly buggy")
    template_id: str = dspy.OutputField(desc="id of the template it fits best, or empty")
    reason: str = dspy.OutputField(desc="one short sentence")


# ---- template distillation ----


class DistillWorkspaceTemplate(dspy.Signature):
    """From one solved workspace case, write a reusable thought template for this class of problem.
    Abstract away every name, date, organisation, number and identifier: the template must help find the
    same kind of problem in a different workspace. Speak of roles (the requester, the approver, a vendor)
    and kinds of artifact (a tracker export, a calendar hold), never of the case's own people, products, ids,
    amounts or dates, and do not copy its sentences. The evidence flow lists, in order, the signals to look
    for in emails, documents and calendar entries, and how joining them reveals the problem; each step is a
    sentence, not an artifact id."""

    case_context: str = dspy.InputField(desc="the artifacts that evidence the problem")
    problem: str = dspy.InputField(desc="the problem that was found")
    resolution: str = dspy.InputField(desc="the action that resolved it")
    template: TemplateDraft = dspy.OutputField()


class DistillRepositoryTemplate(dspy.Signature):
    """From one solved bug, write a reusable thought template for this class of bug. Abstract away project,
    function and variable names: the template must help find the same kind of bug in other code. Describe
    the kind of code and the mistake (a loop bound off by one, a cache that is never invalidated), never the
    case's own identifiers, file paths, line numbers or error messages, and do not copy the issue's sentences.
    The evidence flow lists, in order, the code signals to look for and how they combine into the bug; each
    step is a sentence, not a function name."""

    case_context: str = dspy.InputField(desc="the buggy functions")
    problem: str = dspy.InputField(desc="the issue report")
    resolution: str = dspy.InputField(desc="the patch that fixed it")
    template: TemplateDraft = dspy.OutputField()


# ---- judges ----
# PROBE's rubric (the paper's, `--judge-rubric probe`): the judge says whether each detail of the reference is
# right in the prediction, and the code turns those verdicts into 1 / 0.5 / 0 (metrics.judges.probe_score). The
# Likert rubric (`--judge-rubric likert`) asks for one 1-5 rating instead.

Verdict = Literal["correct", "incorrect", "missing"]
# A secondary detail the reference does not state is "not_stated": it cannot be got wrong.
SecondaryVerdict = Literal["correct", "incorrect", "missing", "not_stated"]
Judgment = Literal["correct", "partially_correct", "incorrect"]


class JudgeProblemDetails(dspy.Signature):
    """Check a predicted problem description against the reference problem of a person's workspace, detail by
    detail. Essential details must be exact for any credit: who is blocked (the named person or team, not a
    role), who or what blocks them (named), the task or deliverable at stake (named as the reference names it),
    and the root cause (the true reason, not a symptom). Secondary details: the deadline or dates, the system or
    tool involved, the mechanism (how the blockage works), and the impact (what else it holds up). For each
    detail say whether the prediction gets it right, gets it wrong, or leaves it out (vague counts as missing);
    a secondary detail the reference does not state is not_stated."""

    reference: str = dspy.InputField(desc="the reference problem description")
    prediction: str = dspy.InputField(desc="the predicted problem description")
    rationale: str = dspy.OutputField(desc="one or two sentences on which details match and which do not")
    who_blocked: Verdict = dspy.OutputField(desc="essential: the person or team that is blocked")
    who_blocks: Verdict = dspy.OutputField(desc="essential: the person, team or thing that blocks them")
    task: Verdict = dspy.OutputField(desc="essential: the task or deliverable at stake")
    root_cause: Verdict = dspy.OutputField(desc="essential: why the task is blocked")
    deadline: SecondaryVerdict = dspy.OutputField(desc="secondary: the deadline or dates")
    system: SecondaryVerdict = dspy.OutputField(desc="secondary: the system or tool involved")
    mechanism: SecondaryVerdict = dspy.OutputField(desc="secondary: how the blockage works")
    impact: SecondaryVerdict = dspy.OutputField(desc="secondary: what else the problem holds up")


class JudgeBugDetails(dspy.Signature):
    """Check a predicted bug description against the reference bug report of a Python repository, detail by
    detail. Essential details must be exact for any credit: the faulty behaviour (what goes wrong: a wrong
    value, an exception, a missing effect), where it is (the function, method or component at fault), the
    trigger (the input or condition that brings it out), and the root cause (the mistake in the code, not the
    symptom). Secondary details: the symptom as a user sees it (message, traceback, output), an example that
    reproduces it, the mechanism (how the mistake leads to the behaviour), and the impact (what else it breaks).
    For each detail say whether the prediction gets it right, gets it wrong, or leaves it out (vague counts as
    missing); a secondary detail the reference does not state is not_stated."""

    reference: str = dspy.InputField(desc="the reference bug report")
    prediction: str = dspy.InputField(desc="the predicted bug description")
    rationale: str = dspy.OutputField(desc="one or two sentences on which details match and which do not")
    behaviour: Verdict = dspy.OutputField(desc="essential: what goes wrong")
    location: Verdict = dspy.OutputField(desc="essential: the function, method or component at fault")
    trigger: Verdict = dspy.OutputField(desc="essential: the input or condition that brings the bug out")
    root_cause: Verdict = dspy.OutputField(desc="essential: the mistake in the code")
    symptom: SecondaryVerdict = dspy.OutputField(desc="secondary: the message, traceback or output a user sees")
    example: SecondaryVerdict = dspy.OutputField(desc="secondary: an input or call that reproduces it")
    mechanism: SecondaryVerdict = dspy.OutputField(desc="secondary: how the mistake leads to the behaviour")
    impact: SecondaryVerdict = dspy.OutputField(desc="secondary: what else the bug breaks")


class JudgeActionParameters(dspy.Signature):
    """A predicted action takes the same library action as the reference; judge its parameters. correct: every
    parameter that matters is present, directly or in other words, and its value would resolve the problem
    (reasonable variations of wording, date format or order are fine). partially_correct: the right intent and
    most of what matters, but an important detail (a person, a date, an identifier) is missing or weaker.
    incorrect: most of what matters is missing, or a person, system or resource is wrong, so the action would
    not resolve the problem."""

    problem: str = dspy.InputField(desc="the reference problem the action should resolve")
    action: str = dspy.InputField(desc="the library action both take")
    reference: str = dspy.InputField(desc="the reference parameters")
    prediction: str = dspy.InputField(desc="the predicted parameters")
    rationale: str = dspy.OutputField(desc="two or three sentences on whether the parameters would resolve it")
    judgment: Judgment = dspy.OutputField()


class JudgePatch(dspy.Signature):
    """Judge whether a predicted patch makes the same fix as the reference patch for a bug. correct: it changes
    the same behaviour in the same place(s), so it fixes the bug as the reference does, however it is written.
    partially_correct: the right place and the right idea, but incomplete (one of several places, a case left
    out) or with a change that the fix does not need. incorrect: another place, another change, or no fix of
    this bug."""

    problem: str = dspy.InputField(desc="the reference bug report")
    reference: str = dspy.InputField(desc="the reference patch")
    prediction: str = dspy.InputField(desc="the predicted patch")
    rationale: str = dspy.OutputField(desc="two or three sentences on what each patch changes")
    judgment: Judgment = dspy.OutputField()



class JudgeIdentification(dspy.Signature):
    """Rate how well a predicted problem description identifies the reference problem, from 1 to 5.
    Essentials: who is blocked, who or what blocks them, the task at stake, and the root cause.
    Secondary: the deadline, the system involved, the mechanism and the impact.
    5 = all essentials and most secondary details match; 4 = all essentials match; 3 = most essentials
    match; 2 = the same area but the wrong root cause or the wrong parties; 1 = a different problem."""

    reference: str = dspy.InputField(desc="the reference problem description")
    prediction: str = dspy.InputField(desc="the predicted problem description")
    rationale: str = dspy.OutputField(desc="one or two sentences on which essentials match")
    score: int = dspy.OutputField(desc="an integer from 1 to 5")


class JudgeResolution(dspy.Signature):
    """Rate how well a predicted resolution resolves the reference problem, from 1 to 5.
    For a workspace action: is it the same library action, and are its parameters right (recipients,
    dates, content)? For a code patch: does it make the same fix as the reference patch, in the same place,
    even if written differently? 5 = same action/fix with right details; 4 = same action/fix with minor
    slips; 3 = partly right; 2 = a related but wrong action/fix; 1 = wrong or missing."""

    problem: str = dspy.InputField(desc="the reference problem")
    reference: str = dspy.InputField(desc="the reference action or patch")
    prediction: str = dspy.InputField(desc="the predicted action or patch")
    rationale: str = dspy.OutputField(desc="one or two sentences")
    score: int = dspy.OutputField(desc="an integer from 1 to 5")
