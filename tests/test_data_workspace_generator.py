"""The workspace generator's stages, one at a time, on DSPy's DummyLM: what each accepts, what it refuses and
retries, and how the record is assembled. The whole pipeline at full size runs against the provider simulator in
test_generate_workspace_hosted.py."""

from __future__ import annotations

import random
import string
from collections import Counter
from dataclasses import replace
from datetime import date, timedelta

import dspy
import pytest
from dspy.utils.dummies import DummyLM

from tide_dspy.data.set_check import PAPER_RANGES, check_workspace
from tide_dspy.data.workspace_checks import TextPool, check_library, check_persona, library_names
from tide_dspy.data.workspace_generator import (
    Drafts,
    Stages,
    WorkspaceGenerator,
    assemble_record,
    distractor_kinds,
    workspace_spec,
)
from tide_dspy.data.workspace_prompts import (
    PROBLEM_CATEGORIES,
    ActionDraft,
    ArtifactDraft,
    BottleneckDraft,
    DistractorDraft,
    EvidencePiece,
    PersonaDraft,
    WorldModelDraft,
)

SPEC = workspace_spec(seed=0, number=1)
PERSONA = {"full_name": "Ada Quill", "email": "ada.quill@northfield.example", "occupation": "Facilities Manager",
           "company_name": "Northfield College", "department": "Facilities",
           "about": "Runs the buildings and their maintenance contracts."}
NAMES = ["Bo Lindqvist", "Cy Okafor", "Di Brandt", "Ed Salas", "Fay Morrow", "Gil Thorne", "Hal Quist", "Ivy Grell",
         "Jo Abbott", "Kit Rahman"]
TYPES = ["colleague", "manager", "vendor", "client", "direct_report"]
WORLD = {"relationships": [{"name": n, "email": f"{n.split()[0].lower()}@northfield.example", "type": TYPES[i % 5],
                            "department": "Ops", "context": "Works with Ada on the boiler upgrade."}
                           for i, n in enumerate(NAMES)],
         "personal_context": {"work_style": "structured", "communication_preferences": ["email"],
                              "current_priorities": ["boiler upgrade", "budget"], "pain_points": ["slow approvals",
                                                                                                  "too many meetings"]},
         "organization": {"team_size": 12, "reporting_to": "VP Operations",
                          "key_meetings": ["Monday ops sync", "Thursday vendor call", "Monthly board pack"]}}
ANCHORS = ["PO-4471", "Boiler Upgrade B7", "Lawson queue"]


def bottleneck(k: int, kind: str, person: str = "Bo Lindqvist") -> dict:
    return {"category": kind, "description": f"Problem {k}: {person} cannot start the {ANCHORS[1]} works.",
            "people": [person], "anchors": [f"{a}-{k}" for a in ANCHORS], "deadline": "2099-01-01"}


def words(n: int, tag: str = "note") -> str:
    """`n` made-up words, the same for the same tag and unlike any other tag's (no near copies)."""
    rng = random.Random(tag)
    return " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 8))) for _ in range(n))


def email(text: str, title: str = "Boiler works") -> dict:
    return {"kind": "email", "title": title, "people": ["Ada Quill <ada.quill@northfield.example>",
                                                        "Bo Lindqvist <bo@northfield.example>"],
            "text": text, "start_time": "", "end_time": "", "location": "", "mime": ""}


def run_stage(lm: DummyLM, predictor, check, max_attempts: int = 2, **inputs):
    stages = Stages(max_attempts)
    with dspy.context(lm=lm):
        value = stages.run("stage", predictor, check, **inputs)
    return value, stages.log


# ---- what each workspace is asked to be ----

def test_a_runs_workspaces_are_fixed_by_its_seed():
    assert workspace_spec(7, 3) == workspace_spec(7, 3)
    assert workspace_spec(7, 3) != workspace_spec(8, 3)


def test_each_workspace_is_sized_inside_the_sets_ranges():
    ranges = PAPER_RANGES
    for number in range(1, 31):
        spec = workspace_spec(0, number)
        assert ranges.problems[0] <= len(spec.categories) <= ranges.problems[1]
        assert all(ranges.evidence[0] <= c <= ranges.evidence[1] for c in spec.evidence_counts)
        assert ranges.artifacts[0] <= spec.artifacts <= ranges.artifacts[1]
        share = 1 - sum(spec.evidence_counts) / spec.artifacts
        assert ranges.distractor_share[0] <= share <= ranges.distractor_share[1]
        assert ranges.actions[0] <= spec.actions <= ranges.actions[1]


def test_problem_kinds_are_distinct_in_a_workspace_and_even_across_a_set():
    specs = [workspace_spec(0, number) for number in range(1, 31)]
    assert all(len(set(s.categories)) == len(s.categories) for s in specs)
    used = Counter(c for s in specs for c in s.categories)
    assert set(used) == set(PROBLEM_CATEGORIES)
    assert max(used.values()) - min(used.values()) <= 1


def test_distractor_kinds_fill_the_workspace_near_the_sets_mix():
    kinds = distractor_kinds(SPEC, ["email"] * 6 + ["document"] * 5 + ["calendar"] * 5)
    assert sum(kinds.values()) == SPEC.artifacts - 16
    mix = {k: kinds[k] + n for k, n in (("email", 6), ("document", 5), ("calendar", 5))}
    assert abs(mix["email"] / SPEC.artifacts - 0.5) < 0.02 and abs(mix["calendar"] / SPEC.artifacts - 0.2) < 0.02


# ---- each stage: accepted, refused and retried, recorded ----

def test_a_refused_output_is_sampled_again_and_the_refusal_recorded():
    generator = WorkspaceGenerator()
    bad = {**PERSONA, "email": "not an address"}
    lm = DummyLM([{"persona": bad}, {"persona": PERSONA}])
    value, log = run_stage(lm, generator.write_persona, lambda p: check_persona(p.persona),
                           role_hint="a facilities manager", today="2026-03-02")
    assert value.persona.full_name == "Ada Quill"
    assert [(e.attempts, e.errors) for e in log] == [(2, ["persona email 'not an address' is not an address"])]
    assert len(lm.history) == 2


def test_a_stage_that_never_passes_fails_the_workspace_with_its_record():
    generator = WorkspaceGenerator(max_attempts=2)
    lonely = {**WORLD, "relationships": WORLD["relationships"][:3]}
    lm = DummyLM([{"persona": PERSONA}, {"world_model": lonely}, {"world_model": lonely}])
    with dspy.context(lm=lm):
        pred = generator(spec=SPEC)
    assert pred.record is None
    assert pred.errors == ["world model: no usable output after 2 attempts (3 relationships, outside 8-15)"]
    assert [(e.stage, e.attempts) for e in pred.stages] == [("persona", 1), ("world model", 2)]


def test_bottlenecks_must_be_the_kinds_asked_and_involve_the_relationships():
    from tide_dspy.data.workspace_checks import check_bottlenecks

    persona, world = PersonaDraft(**PERSONA), WorldModelDraft(**WORLD)
    kinds = SPEC.categories[:2]
    good = [BottleneckDraft(**bottleneck(k, kind)) for k, kind in enumerate(kinds, 1)]
    assert check_bottlenecks(good, kinds, world, persona, "2026-03-02") is None
    swapped = list(reversed(good))
    assert "category" in check_bottlenecks(swapped, kinds, world, persona, "2026-03-02")
    stranger = [BottleneckDraft(**bottleneck(1, kinds[0], "Zed Nobody")), good[1]]
    assert "not among the relationships" in check_bottlenecks(stranger, kinds, world, persona, "2026-03-02")
    late = [good[0].model_copy(update={"deadline": "2026-03-01"}), good[1]]
    assert "deadline" in check_bottlenecks(late, kinds, world, persona, "2026-03-02")


def library(n_problems: int, total: int = 16, **change) -> list[ActionDraft]:
    out = [ActionDraft(type="request_approval", description=f"Ask an approver to sign item {i}.", constraints=[],
                       required_parameters=["approver", "item"], solves=i + 1 if i < n_problems else 0)
           for i in range(total)]
    return [out[0].model_copy(update=change), *out[1:]] if change else out


def test_the_library_has_one_solving_action_per_problem_and_names_nobody():
    persona, world = PersonaDraft(**PERSONA), WorldModelDraft(**WORLD)
    problems = [BottleneckDraft(**bottleneck(1, SPEC.categories[0]))]
    names = library_names(persona, world, problems)
    assert check_library(library(1), 1, names) is None
    assert "exactly one" in check_library(library(1, solves=0), 1, names)
    assert "exactly one" in check_library(library(1)[:1] + library(1)[:15], 1, names)
    assert "names ['Bo Lindqvist']" in check_library(library(1, description="Ask Bo Lindqvist to sign."), 1, names)
    assert "names ['PO-4471-1']" in check_library(library(1, constraints=["only for PO-4471-1"]), 1, names)
    assert check_library(library(1, description="Ask for the budget sign-off."), 1, names) is None  # a plain word
    assert "outside 15-25" in check_library(library(1, total=10), 1, names)
    assert "not among" in check_library(library(1, type="fax_someone"), 1, names)


def test_the_gold_action_is_the_librarys_solving_action_filled_in():
    generator = WorkspaceGenerator(max_attempts=2)
    problems = [BottleneckDraft(**bottleneck(k, kind)) for k, kind in enumerate(SPEC.categories[:2], 1)]
    actions = library(2)
    partial = {"gold_parameters": [{"name": "approver", "value": "Di Brandt <di@northfield.example>"}]}
    full = {"gold_parameters": [{"name": "approver", "value": "Di Brandt <di@northfield.example>"},
                                {"name": "item", "value": "PO-4471-2"}]}
    lm = DummyLM([partial, full])
    stages = Stages(2)
    with dspy.context(lm=lm):
        gold = generator.gold(2, problems, actions, "{}", [], stages)
    assert gold == {"approver": "Di Brandt <di@northfield.example>", "item": "PO-4471-2"}
    assert stages.log[0].errors == ["required parameters ['item'] are not filled"]
    assert '"description":"Ask an approver to sign item 1."' in lm.history[0]["messages"][-1]["content"]


def plan(n: int) -> list[dict]:
    kinds = ["email", "document", "calendar"]
    return [{"kind": kinds[j % 3], "created_at": f"{date.fromisoformat(SPEC.today) - timedelta(days=j)}T09:30:00",
             "role": f"shows part {j}", "carries": [ANCHORS[j % 3]], "why_insufficient_alone": "one part only"}
            for j in range(n)]


def item(kind: str, text: str) -> dict:
    base = email(text)
    if kind == "document":
        return {**base, "kind": "document", "people": [], "mime": "text/markdown"}
    if kind == "calendar":
        return {**base, "kind": "calendar", "start_time": f"{SPEC.today}T10:00:00",
                "end_time": f"{SPEC.today}T11:00:00", "location": "Room 1"}
    return base


def evidence_answers(n: int, review: dict | None = None) -> list[dict]:
    kinds = ["email", "document", "calendar"]
    return ([{"evidence_plan": plan(n)}]
            + [{"evidence_artifact": item(kinds[j % 3], words(70, f"w{j}x"))} for j in range(n)]
            + [{"evidence_review": review or {"each_insufficient_alone": True, "sufficient_together": True,
                                              "free_of_other_problems": True, "natural": True, "notes": "",
                                              "rewrites": []}}])


def run_evidence(answers: list[dict], n: int = 3, max_attempts: int = 2):
    spec = replace(SPEC, evidence_counts=(n,) * len(SPEC.categories))
    problems = [BottleneckDraft(**bottleneck(k, kind)) for k, kind in enumerate(spec.categories, 1)]
    stages = Stages(max_attempts)
    lm = DummyLM(answers)
    with dspy.context(lm=lm):
        items = WorkspaceGenerator(max_attempts=max_attempts).evidence(1, spec, problems, "{}", [], stages)
    return items, stages.log, lm


def test_evidence_is_planned_written_item_by_item_and_reviewed():
    items, log, _ = run_evidence(evidence_answers(3))
    n = len(SPEC.categories)
    assert [piece.kind for piece, _ in items] == ["email", "document", "calendar"]
    assert [e.stage for e in log] == [f"evidence plan 1/{n}"] + [f"evidence 1/{n} item {j}/3" for j in (1, 2, 3)] + [
        f"evidence review 1/{n}"]
    assert log[-1].note == "passed; 0 rewrite(s)"


def test_an_evidence_item_that_labels_the_problem_or_holds_all_of_it_is_written_again():
    answers = evidence_answers(3)
    labelled = {"evidence_artifact": item("email", "This bottleneck blocks us. " + words(70))}
    everything = {"evidence_artifact": item("email", " ".join(f"{a}-1" for a in ANCHORS) + " " + words(70))}
    items, log, _ = run_evidence(answers[:1] + [labelled, everything] + answers[1:], max_attempts=3)
    assert log[1].attempts == 3
    assert "calls something a bottleneck" in log[1].errors[0] and "every anchor" in log[1].errors[1]


def test_a_plan_outside_the_window_is_refused():
    early = plan(3)
    early[0]["created_at"] = "2020-01-01T09:00:00"
    answers = evidence_answers(3)
    _, log, _ = run_evidence([{"evidence_plan": early}] + answers)
    assert "is outside" in log[0].errors[0]


def test_the_reviews_rewrites_replace_the_items_and_its_verdict_is_recorded():
    rewrite = {"each_insufficient_alone": False, "sufficient_together": True, "free_of_other_problems": True,
               "natural": True, "notes": "item 2 says too much", "rewrites": [{"item": 2, "text": words(80, "new")}]}
    items, log, _ = run_evidence(evidence_answers(3, review=rewrite))
    assert items[1][1].text == words(80, "new") and items[0][1].text == words(70, "w0x")
    assert log[-1].note == "failed each_insufficient_alone; 1 rewrite(s): item 2 says too much"


def test_a_review_that_finds_faults_must_rewrite_them():
    silent = {"each_insufficient_alone": True, "sufficient_together": False, "free_of_other_problems": True,
              "natural": True, "notes": "", "rewrites": []}
    _, log, _ = run_evidence(evidence_answers(3, review=silent) + evidence_answers(3)[-1:])
    assert log[-1].errors == ["the review found faults but rewrote no item"] and log[-1].attempts == 2


def distractor(text: str, anchor: str = "") -> dict:
    return {**email(f"{anchor} {text}".strip()), "created_at": f"{SPEC.today}T08:00:00", "strategy": "routine",
            "why_not_a_problem": "an FYI"}


def test_distractors_must_reuse_the_anchors_and_never_copy_a_text():
    from tide_dspy.data.workspace_checks import check_distractors

    pool = TextPool([words(60, "evidence")])
    anchors = ANCHORS
    batch = [DistractorDraft(**distractor(words(60, f"d{i}x"), ANCHORS[i % 3] if i < 2 else "")) for i in range(3)]
    assert check_distractors(batch, "email", 3, anchors, SPEC.window, pool) is None
    assert "reuse an anchor" in check_distractors([b.model_copy(update={"text": words(60, f"e{i}y")})
                                                   for i, b in enumerate(batch)], "email", 3, anchors,
                                                  SPEC.window, pool)
    copy = [DistractorDraft(**distractor(words(60, "evidence"), "PO-4471"))]
    assert "near copy" in check_distractors(copy, "email", 1, anchors, SPEC.window, pool)
    assert "near copy" in check_distractors(batch[:1], "email", 1, anchors, SPEC.window, pool)  # admitted above


@pytest.mark.parametrize("kind,change,error", [
    ("email", {"text": words(10)}, "10 words, outside 40-200"),
    ("email", {"people": ["Ada Quill <ada.quill@northfield.example>"]}, "sender and at least one recipient"),
    ("email", {"people": ["Ada Quill", "Bo <bo@northfield.example>"]}, "is not 'Name <address>'"),
    ("calendar", {"end_time": "2020-01-01T00:00:00"}, "the start first"),
    ("document", {"mime": "application/pdf"}, "is not text/markdown or text/csv"),
])
def test_an_artifact_out_of_the_sets_bounds_is_refused(kind, change, error):
    from tide_dspy.data.workspace_checks import check_artifact

    draft = ArtifactDraft(**{**item(kind, words(60)), **change})
    assert error in check_artifact(draft, kind)


# ---- assembly ----

def test_the_assembled_record_has_the_sets_layout_and_passes_its_checker():
    spec = SPEC
    n = len(spec.categories)
    kinds = ["email", "document", "calendar"]
    evidence = [[(EvidencePiece(**{**plan(c)[j], "kind": kinds[j % 3]}),
                  ArtifactDraft(**item(kinds[j % 3], words(60, f"p{k}e{j}x")))) for j in range(c)]
                for k, c in enumerate(spec.evidence_counts)]
    n_distractors = spec.artifacts - sum(spec.evidence_counts)
    drafts = Drafts(
        persona=PersonaDraft(**PERSONA), world=WorldModelDraft(**WORLD),
        bottlenecks=[BottleneckDraft(**bottleneck(k, kind)) for k, kind in enumerate(spec.categories, 1)],
        actions=library(n, total=spec.actions),
        gold=[{"approver": "Di Brandt <di@northfield.example>", "item": f"PO-{k}"} for k in range(n)],
        evidence=evidence,
        distractors=[DistractorDraft(**distractor(words(60, f"d{i}x"))) for i in range(n_distractors)])
    record = assemble_record(spec, "train", drafts)
    assert check_workspace(record, PAPER_RANGES) == []
    assert record["instance_id"] == f"ws-northfield-college-{spec.instance_id_suffix}"
    assert [p["category"] for p in record["problems"]] == list(spec.categories)
    assert all(a["id"].startswith(a["kind"] + "_") for a in record["artifacts"])
    assert [a["created_at"] for a in record["artifacts"]] == sorted(a["created_at"] for a in record["artifacts"])
    gold = {p["action"]["action_id"] for p in record["problems"]}
    assert len(gold) == n and len(record["actions"]) == spec.actions
    assert "email" not in record["profile"]["relationships"][0]  # the set's relationship layout
    first_email = next(a for a in record["artifacts"] if a["kind"] == "email")["payload"]
    assert first_email["sender"] == "Ada Quill <ada.quill@northfield.example>"
    assert first_email["to"] == ["Bo Lindqvist <bo@northfield.example>"]


def test_the_bottleneck_stage_asks_the_specs_kinds_and_refuses_another():
    from tide_dspy.data.workspace_checks import check_bottlenecks

    generator = WorkspaceGenerator(max_attempts=2)
    kinds = SPEC.categories[:2]
    wrong = {"bottlenecks": [bottleneck(1, kinds[1]), bottleneck(2, kinds[0])]}
    right = {"bottlenecks": [bottleneck(k, kind.upper()) for k, kind in enumerate(kinds, 1)]}
    lm = DummyLM([wrong, right])
    persona, world = PersonaDraft(**PERSONA), WorldModelDraft(**WORLD)
    value, log = run_stage(lm, generator.write_bottlenecks,
                           lambda p: check_bottlenecks(p.bottlenecks, kinds, world, persona, "2026-03-02"),
                           persona="{}", world_model="{}", today="2026-03-02", kinds=list(kinds))
    assert [b.category for b in value.bottlenecks] == [k.upper() for k in kinds]  # the case is the LM's
    assert log[0].attempts == 2 and "category" in log[0].errors[0]
    assert f'"{kinds[0]}"' in lm.history[0]["messages"][-1]["content"]


def test_distractor_batches_each_follow_their_own_strategies_and_are_retried_alone():
    spec = replace(SPEC, artifacts=7)  # no evidence: seven distractors
    kinds = distractor_kinds(spec, [])
    assert kinds == {"email": 4, "document": 2, "calendar": 1}
    problems = [BottleneckDraft(**bottleneck(k, kind)) for k, kind in enumerate(spec.categories, 1)]
    answers = []
    for b, (kind, count) in enumerate(kinds.items()):  # one batch of each kind (at most five)
        anchors = problems[b % len(problems)].anchors
        batch = [{**item(kind, words(60, f"b{b}i{i}")), "created_at": f"{spec.today}T08:00:00", "strategy": "x",
                  "why_not_a_problem": "an FYI", "text": f"{anchors[0]} " + words(60, f"b{b}i{i}")}
                 for i in range(count)]
        if b == 0:  # the first batch once without any anchor: refused, asked again
            answers.append({"distractors": [{**d, "text": words(60, f"no{i}")} for i, d in enumerate(batch)]})
        answers.append({"distractors": batch})
    lm = DummyLM(answers)
    stages = Stages(2)
    with dspy.context(lm=lm):
        found = WorkspaceGenerator(workers=1).distractors(spec, problems, [], "{}", [], stages)
    assert len(found) == 7 and Counter(d.kind for d in found) == Counter(kinds)
    assert [(e.stage, e.attempts) for e in stages.log] == [("distractors 1/3", 2), ("distractors 2/3", 1),
                                                           ("distractors 3/3", 1)]
    assert "reuse an anchor" in stages.log[0].errors[0]
    asked = [m["messages"][-1]["content"].split("[[ ## strategies ## ]]")[1].split("[[ ##")[0] for m in lm.history]
    assert len(set(asked[1:])) == len(asked) - 1  # no two batches are asked the same strategies
