"""What the workspace generator asks the LM at each stage: the drafts it writes (pydantic) and the DSPy signatures
whose instructions are the prompts (`tide_dspy.data.workspace_generator` runs them).

The stages and the intent of each prompt follow PROBE's published generation pipeline (fastino-ai/PROBE_benchmark,
`data_generation/prompts/`): world model, bottlenecks, an action library with one solving action per bottleneck,
the solving action's parameters (PROBE's checklist), a plan that spreads each bottleneck's evidence over several
items, the evidence items, a review of them, and distractors built on PROBE's distraction strategies. The wording
is our own, and the prompts are adapted to this project's multi-problem workspaces: several problems of distinct
kinds per workspace, and distractors that reuse the problems' people, projects and ids.
"""

from __future__ import annotations

from typing import Literal

import dspy
from pydantic import BaseModel, Field

from tide_dspy.workspace_actions import ACTION_TYPES

RELATIONSHIP_TYPES = ("colleague", "manager", "direct_report", "client", "stakeholder", "vendor", "mentor", "mentee",
                      "cross_functional_partner")

# The problem classes of the workspace set (the `category` field, data/workspace/README.md): a workspace's problems
# take distinct ones, and a generated set spreads them evenly.
PROBLEM_CATEGORIES = (
    "verbal approval not recorded",
    "conflicting report versions before review",
    "dead recurring meeting blocks urgent kickoff",
    "pending access/permission request blocks deadline",
    "double-counted or stale metrics in leadership briefing",
    "owner on leave or departing without handoff",
    "conflicting commitments to two stakeholders",
    "contract/certificate expiring before dependent event",
    "dependency slip invalidates plan",
    "decision not communicated to those who must act",
    "double-booked resource or schedule conflict",
    "stale document still used as the reference",
    "deadline lapsing with nobody owning the submission",
    "blocked hand-off between teams",
    "budget or quota exceeded without sign-off",
    "outdated contact on a critical message",
)

# How a distractor looks relevant and still asks nothing of the persona: PROBE's distraction strategies (classic
# routine items, resolved-but-mentioned, proposal-dismissal, delegation-complete, scope-mismatch, outdated or
# historical, awaiting approval, contingency planning, false-positive similarity), in our words.
DISTRACTOR_STRATEGIES = {
    "routine": "a status update, FYI, social or logistics note that needs nothing from the persona",
    "resolved": "something that looked like trouble and is already fixed, the fix stated",
    "dismissed": "a concern raised and then withdrawn or ruled out in the same thread",
    "handled elsewhere": "someone with the authority is already dealing with it, and says so",
    "out of scope": "a real difficulty in another team that the persona has no way to act on",
    "old news": "a similar difficulty from months ago, long closed",
    "parked": "a proposal deliberately deferred by a decision-maker to a later cycle",
    "contingency": "a fallback plan for something that has not happened and may never happen",
    "same names, other matter": "the problems' people, projects or ids in an unrelated, settled context",
}

ArtifactKind = Literal["email", "calendar", "document"]


# ---- What the LM writes at each stage ----

class PersonaDraft(BaseModel):
    full_name: str
    email: str = Field(description="their work address at the organisation's domain")
    occupation: str
    company_name: str
    department: str
    about: str = Field(description="2-4 sentences: what the person runs, owns and answers for")


class Person(BaseModel):
    name: str = Field(description="full name")
    email: str = Field(description="work address; people outside the organisation use their own organisation's "
                                   "domain")
    type: str = Field(description="one of: " + ", ".join(RELATIONSHIP_TYPES))
    department: str
    context: str = Field(description="one sentence: what they are working on with the persona now, and how it "
                                     "stands")


class PersonalContext(BaseModel):
    work_style: str
    communication_preferences: list[str]
    current_priorities: list[str] = Field(description="3-6 priorities that compete for time")
    pain_points: list[str] = Field(description="2-5 pain points an able assistant could relieve")


class Organization(BaseModel):
    team_size: int
    reporting_to: str = Field(description="the title of the persona's manager")
    key_meetings: list[str] = Field(description="3-7 recurring meetings, each a short name with its cadence")


class WorldModelDraft(BaseModel):
    relationships: list[Person]
    personal_context: PersonalContext
    organization: Organization


class BottleneckDraft(BaseModel):
    category: str = Field(description="the kind it was asked for, copied exactly")
    description: str = Field(description="1-3 sentences: who is blocked, by what, on which task, the root cause, "
                                         "and the deadline or impact")
    people: list[str] = Field(description="full names, from the relationships, of the people it involves")
    anchors: list[str] = Field(description="3-6 concrete names the workspace will mention: projects, documents, "
                                           "tickets or ids, systems, meetings, amounts")
    deadline: str = Field(description="YYYY-MM-DD, when it starts to hurt (on or after today)")


class ActionDraft(BaseModel):
    type: str = Field(description="one of: " + ", ".join(sorted(ACTION_TYPES)))
    description: str = Field(description="what the action does, as a general capability")
    constraints: list[str] = Field(description="preconditions or policies it must respect (may be empty)")
    required_parameters: list[str] = Field(description="the keys a caller must fill")
    solves: int = Field(description="the number of the problem it resolves, or 0 for none")


class ParameterValue(BaseModel):
    name: str = Field(description="a required parameter of the action")
    value: str


class EvidencePiece(BaseModel):
    kind: ArtifactKind
    created_at: str = Field(description="ISO 8601 local time without offset, inside the window")
    role: str = Field(description="the one part of the problem this item shows")
    carries: list[str] = Field(description="the people and anchors it mentions")
    why_insufficient_alone: str


class ArtifactDraft(BaseModel):
    kind: ArtifactKind
    title: str = Field(description="email subject, calendar title or document title")
    people: list[str] = Field(description="'Name <address>': an email's sender then its recipients; a calendar "
                                          "entry's attendees; empty for a document")
    text: str = Field(description="email body, calendar description or document content")
    start_time: str = Field(description="calendar only (else empty): ISO 8601 start")
    end_time: str = Field(description="calendar only (else empty): ISO 8601 end")
    location: str = Field(description="calendar only (else empty)")
    mime: str = Field(description="document only (else empty): text/markdown or text/csv")


class DistractorDraft(ArtifactDraft):
    created_at: str = Field(description="ISO 8601 local time without offset, inside the window")
    strategy: str = Field(description="which of the strategies given it follows")
    why_not_a_problem: str = Field(description="why it asks nothing of the persona")


class Rewrite(BaseModel):
    item: int = Field(description="the item's number")
    text: str = Field(description="the item's whole new text, same kind and word range")


class EvidenceReview(BaseModel):
    each_insufficient_alone: bool
    sufficient_together: bool
    free_of_other_problems: bool
    natural: bool
    notes: str = Field(description="what is wrong, item by item; empty when nothing is")
    rewrites: list[Rewrite] = Field(description="a rewrite of each item that fails a check; empty when none does")


# ---- The stages' signatures (their docstrings are the instructions) ----

WORLD = "the persona and their world model (JSON)"


class WritePersona(dspy.Signature):
    """Invent a fictional professional, in the role the hint describes, whose work runs on email, meetings and
    shared documents. Make the organisation, the person and their remit concrete enough for hidden work problems
    to attach to them: the systems, programmes, counterparts and recurring obligations they deal with. Every
    person, organisation and address is invented."""

    role_hint: str = dspy.InputField()
    today: str = dspy.InputField()
    persona: PersonaDraft = dspy.OutputField()


class WriteWorldModel(dspy.Signature):
    """Build the persona's working world, as an assistant who reads their mailbox would come to know it.
    Relationships: the people they deal with most, a varied mix of the relationship types (inside and outside the
    organisation, above, beside and below them), each with a sentence on what they are doing together right now.
    Personal context: how the persona works and likes to be reached, priorities that pull against each other, and
    pain points a capable assistant could take off their hands. Organisation: team size, the title they report
    to, and the recurring meetings that shape their week. Keep it consistent with the persona and its seniority;
    everyone is fictional."""

    persona: str = dspy.InputField()
    today: str = dspy.InputField()
    relationship_count: int = dspy.InputField(desc="how many relationships to write")
    world_model: WorldModelDraft = dspy.OutputField()


class WriteBottlenecks(dspy.Signature):
    """Invent the hidden problems in this person's work: one for each kind listed, in that order. Each is a
    single problem, not a bundle, that nobody has raised yet and that will hurt a named person, task or deadline
    unless the persona acts soon. Ground each in the world model: people from the relationships by name, and
    concrete projects, documents, tickets, systems, meetings, amounts and dates. Each must be the kind of thing
    that emails, calendar entries and documents reveal only when read together, never in one place, and that the
    persona can settle with one ordinary workplace action. The problems differ from one another and fit the
    persona's role, priorities and pain points."""

    persona: str = dspy.InputField()
    world_model: str = dspy.InputField(desc=WORLD)
    today: str = dspy.InputField()
    kinds: list[str] = dspy.InputField(desc="the kind of each problem, in order")
    bottlenecks: list[BottleneckDraft] = dspy.OutputField()


class WriteActionLibrary(dspy.Signature):
    """Write the library of actions the persona's assistant may take, drawing on the action types offered. For
    each numbered problem exactly one action resolves it (its `solves` is the problem's number); every other
    action (`solves` 0) is a realistic part of the persona's routine that resolves none of the problems, and
    several of those are near misses: the same type or the same counterpart as a solving action, but the wrong
    step (chasing the supplier instead of the approver, cancelling a whole series instead of repurposing one
    slot). Describe each action as a reusable capability: no person, organisation, project, ticket, id or date
    from the problems, so the library on its own does not give the problems away. Start each action's
    required_parameters from its type's usual keys."""

    persona: str = dspy.InputField(desc=WORLD)
    problems: list[str] = dspy.InputField(desc="numbered from 1")
    action_types: list[str] = dspy.InputField(desc="type: what it does [its usual required parameters]")
    count: int = dspy.InputField(desc="how many actions in all")
    action_library: list[ActionDraft] = dspy.OutputField()


class WriteGoldParameters(dspy.Signature):
    """Fill in the action that resolves this problem, as the persona's assistant would send it today: a concrete
    value for every required parameter, using the problem's real people (as 'Name <address>'), ids, dates and
    amounts, with any message, agenda or justification written out in full."""

    persona: str = dspy.InputField(desc=WORLD)
    people: list[str] = dspy.InputField()
    problem: str = dspy.InputField()
    action: str = dspy.InputField()
    gold_parameters: list[ParameterValue] = dspy.OutputField(desc="one value for each required parameter")


class PlanEvidence(dspy.Signature):
    """Plan the workspace items that, read together, reveal this problem. Give each item a kind (mix the kinds),
    a creation time inside the window, and one role: the single part of the picture it shows. Spread the
    problem's people, anchors and dates across the items so that no item tells the whole story and each needs
    the others, and say for each why it is not enough on its own. Plan nothing that touches the other problems."""

    persona: str = dspy.InputField(desc=WORLD)
    problem: str = dspy.InputField()
    other_problems: list[str] = dspy.InputField()
    count: int = dspy.InputField(desc="exactly how many items")
    window: str = dspy.InputField(desc="the creation times allowed")
    evidence_plan: list[EvidencePiece] = dspy.OutputField()


class WriteEvidence(dspy.Signature):
    """Write one workspace item that plays the role given, and nothing more. It reads as the routine
    correspondence, calendar entry or working document of this workplace: mostly ordinary business, with its part
    of the problem appearing in passing and in the participants' own words. Never name or sum up the problem,
    never call anything a problem, issue, risk, blocker or bottleneck, never state what the other planned items
    show, and never touch the other problems. People are written 'Name <address>' from the list given. Keep
    the text inside the word range."""

    persona: str = dspy.InputField(desc=WORLD)
    people: list[str] = dspy.InputField()
    problem: str = dspy.InputField()
    role: str = dspy.InputField(desc="this item's kind, creation time, role and what it carries")
    other_roles: list[str] = dspy.InputField(desc="what the problem's other items show (leave it to them)")
    other_problems: list[str] = dspy.InputField()
    word_range: str = dspy.InputField()
    evidence_artifact: ArtifactDraft = dspy.OutputField()


class ReviewEvidence(dspy.Signature):
    """Review, as a careful benchmark editor, the items written to reveal this problem. Check that no single
    item reveals the problem on its own; that all of them read together do reveal it, with its people, cause and
    deadline; that no item hints at the other problems or at any other open matter for the persona; and that each
    reads as natural workplace text, without words that flag the problem. Give each verdict, and for every item
    that fails a check a rewrite of its text (same kind, inside its word range) that fixes it; leave the rewrites
    empty when every check passes."""

    problem: str = dspy.InputField()
    other_problems: list[str] = dspy.InputField()
    items: list[str] = dspy.InputField(desc="numbered from 1")
    word_ranges: str = dspy.InputField()
    evidence_review: EvidenceReview = dspy.OutputField()


class WriteDistractors(dspy.Signature):
    """Write ordinary items of this workspace that an assistant must read past. They create no task for the
    persona and reveal none of the listed problems, alone or together with any other item. They concern the same
    people, projects, systems and ids as the problems (use the anchors given, in contexts that change nothing
    about the problems), so that nobody can find the problems by matching names. Follow the strategies given, vary
    senders, subjects, lengths and dates inside the window, write people as 'Name <address>' from the list, keep
    each text inside the word range, and say for each why it needs nothing from the persona."""

    persona: str = dspy.InputField(desc=WORLD)
    people: list[str] = dspy.InputField()
    problems_to_avoid: list[str] = dspy.InputField()
    anchors: list[str] = dspy.InputField(desc="names to reuse")
    strategies: list[str] = dspy.InputField(desc="name: what it means")
    kind: ArtifactKind = dspy.InputField()
    count: int = dspy.InputField(desc="exactly how many items")
    window: str = dspy.InputField(desc="the creation times allowed")
    word_range: str = dspy.InputField()
    distractors: list[DistractorDraft] = dspy.OutputField()
