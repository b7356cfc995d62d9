"""The workspace generator's plumbing, driven by DSPy's DummyLM (no real LM)."""

from __future__ import annotations

import json

import dspy
from dspy.utils.dummies import DummyLM

from tide_dspy.data import load_instances
from tide_dspy.data.workspace_generator import WorkspaceGenerator, generate_workspaces

N_PROBLEMS = 4
EVIDENCE_PER_PROBLEM = 3

PERSONA = {
    "persona": {
        "full_name": "Ada Quill",
        "occupation": "Facilities Manager",
        "company_name": "Northfield College",
        "department": "Facilities",
        "about": "Runs buildings and maintenance.",
    }
}
WORLD = {"world": {"email_domain": "northfield.example", "work_style": "structured",
                   "relationships": [{"name": f"Person {i}", "type": "colleague", "department": "Ops",
                                      "context": "works with Ada"} for i in range(8)],
                   "communication_preferences": ["email"], "current_priorities": ["boiler upgrade"],
                   "pain_points": ["slow approvals"], "team_size": 12, "reporting_to": "VP Operations",
                   "key_meetings": ["Monday ops sync"]}}


def bottlenecks(n):
    return {"bottlenecks": [{"description": f"bottleneck {k}: vendor blocked by missing PO before Friday",
                             "category": f"class {k}"} for k in range(n)]}


def actions(k):
    return {"solving_action": {"type": "request_approval", "description": "ask the approver to sign",
                               "constraints": [], "required_parameters": ["approver", "item"]},
            "parameters": {"approver": "VP <vp@northfield.example>", "item": f"PO-{k}"},
            "decoy_actions": [{"type": "send_email", "description": "ask the vendor to wait",
                               "constraints": [], "required_parameters": ["recipient"]}]}


def artifacts(n, tag, kind="email"):
    return {"artifacts": [{"kind": kind, "created_at": f"2026-02-0{1 + i % 8}T09:00:00", "title": f"{tag} {i}",
                           "people": ["Ada Quill <ada@northfield.example>", "Bo <bo@northfield.example>"],
                           "text": f"{tag} text {i}", "start_time": "2026-03-01T10:00:00",
                           "end_time": "2026-03-01T11:00:00", "location": "Room 1"} for i in range(n)]}


def answers(n_distractors, batch):
    out = [PERSONA, WORLD, bottlenecks(N_PROBLEMS)]
    for k in range(N_PROBLEMS):
        out += [
            actions(k),
            artifacts(EVIDENCE_PER_PROBLEM, f"evidence {k}", kind=("email", "calendar", "document")[k % 3]),
        ]
    for start in range(0, n_distractors, batch):
        out.append(artifacts(min(batch, n_distractors - start), f"distractor {start}"))
    return out


def test_generates_a_valid_workspace(tmp_path):
    generator = WorkspaceGenerator(distractor_batch=14)
    n_distractors = round(N_PROBLEMS * EVIDENCE_PER_PROBLEM * 7 / 3)  # about 70% distractors
    lm = DummyLM(answers(n_distractors, 14))
    steps = []
    out = tmp_path / "ws.jsonl"
    written = generate_workspaces(lm, n=1, out=out, generator=generator, problems=(N_PROBLEMS, N_PROBLEMS),
                                  progress=steps.append)
    assert written == 1
    assert len(lm.history) == 3 + 2 * N_PROBLEMS + 2
    assert steps[0] == "workspace 1/1: persona ok" and any("evidence 4/4" in s for s in steps)

    [instance] = load_instances(out, setting="workspace")
    assert instance.instance_id.startswith("ws-northfield-college-")
    assert len(instance.problems) == N_PROBLEMS
    assert len(instance.artifacts) == N_PROBLEMS * EVIDENCE_PER_PROBLEM + n_distractors
    assert len(instance.actions) == 2 * N_PROBLEMS
    evidence = [e for p in instance.problems for e in p.evidence]
    assert len(set(evidence)) == len(evidence) == N_PROBLEMS * EVIDENCE_PER_PROBLEM
    assert all(a.id.split("_")[0] == a.kind and len(a.id.split("_")[1]) == 8 for a in instance.artifacts)
    assert {a.kind for a in instance.artifacts} == {"email", "calendar", "document"}
    gold = [instance.action(p.action.action_id) for p in instance.problems]
    assert all(set(a.required_parameters) <= set(p.action.parameters) for a, p in zip(gold, instance.problems))
    record = json.loads(out.read_text())
    assert record["profile"]["organization"]["company_name"] == "Northfield College"
    assert [a["created_at"] for a in record["artifacts"]] == sorted(a["created_at"] for a in record["artifacts"])


def test_malformed_step_is_retried_then_skipped(tmp_path):
    # Too few bottlenecks once (retried), then a world model that never has enough people (skipped, not fatal).
    too_few = bottlenecks(1)
    lm = DummyLM([too_few, bottlenecks(N_PROBLEMS)])
    generator = WorkspaceGenerator(max_attempts=2, distractor_ratio=0)
    seen = []
    with dspy.context(lm=lm):
        pred = generator.step("bottlenecks", generator.bottlenecks,
                              lambda p: None if len(p.bottlenecks) == N_PROBLEMS else "too few", [], None,
                              persona="p", world="w", today="2026-03-01", count=N_PROBLEMS)
    assert len(pred.bottlenecks) == N_PROBLEMS and len(lm.history) == 2

    lonely = {"world": {**WORLD["world"], "relationships": []}}
    lm = DummyLM([PERSONA, lonely, lonely, PERSONA, WORLD, bottlenecks(N_PROBLEMS)]
                 + answers(0, 1)[3:])
    written = generate_workspaces(lm, n=2, out=tmp_path / "ws.jsonl", generator=generator,
                                  problems=(N_PROBLEMS, N_PROBLEMS), progress=seen.append)
    assert written == 1
    assert any("workspace 1/2: skipped: world model: no usable output after 2 attempts" in s for s in seen)
    assert len(load_instances(tmp_path / "ws.jsonl")) == 1
