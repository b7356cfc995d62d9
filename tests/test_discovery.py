"""The round loop, the baselines and output hygiene, driven by DSPy's DummyLM."""

from __future__ import annotations

import json
import re

import dspy
import pytest
from dspy.utils.dummies import DummyLM

from tide_dspy.discovery import TIDE, DiscoveryProgram, DiscoveryState, MultiAgent, SingleAgent
from tide_dspy.domains import get_setting
from tide_dspy.schemas import Finding, Template

TEMPLATES = [
    Template(
        id="ws-t01",
        name="Verbal approval not recorded",
        pattern="an approval said aloud never reached the system",
        evidence_flow=["find a claim of approval", "find the system record still pending", "find the deadline"],
    ),
]


def ws_draft(instance, i: int, evidence=None, description=None) -> dict:
    ids = [a.id for a in instance.artifacts]
    return {
        "description": description or f"problem number {i} about {ids[i]}",
        "evidence_ids": evidence if evidence is not None else [ids[i], ids[i + 1]],
        "action_id": instance.actions[i % len(instance.actions)].id,
        "parameters": {},
        "used_template_id": "",
        "why": "",
    }


def user_messages(lm) -> list[str]:
    return [entry["messages"][-1]["content"] for entry in lm.history]


def field_block(message: str, field: str) -> str:
    match = re.search(rf"\[\[ ## {field} ## \]\]\n(.*?)(?=\n\n\[\[ ## |\n\nRespond with|\Z)", message, re.S)
    assert match, f"field {field} not in message"
    return match.group(1)


def test_round_t_sees_exactly_the_findings_of_earlier_rounds(workspace_instance):
    answers = [{"findings": [ws_draft(workspace_instance, 0)]},
               {"findings": [ws_draft(workspace_instance, 2)]},
               {"findings": [ws_draft(workspace_instance, 4)]}]
    lm = DummyLM(answers)
    with dspy.context(lm=lm):
        out = TIDE("workspace", templates=TEMPLATES, max_rounds=3, per_round=1)(workspace_instance)
    messages = user_messages(lm)
    assert len(messages) == 3
    assert field_block(messages[0], "already_found") == "(nothing yet)"
    assert "problem number 0" in field_block(messages[1], "already_found")
    assert "problem number 2" not in field_block(messages[1], "already_found")
    found_3 = field_block(messages[2], "already_found")
    assert "problem number 0" in found_3 and "problem number 2" in found_3 and "problem number 4" not in found_3
    assert [f.round for f in out.findings] == [1, 2, 3]


def test_early_stop_on_a_round_with_nothing_new(workspace_instance):
    lm = DummyLM(
        [
            {"findings": [ws_draft(workspace_instance, 0)]},
            {"findings": []},
            {"findings": [ws_draft(workspace_instance, 2)]},
        ]
    )
    with dspy.context(lm=lm):
        out = TIDE("workspace", max_rounds=5, per_round=2)(workspace_instance)
    assert len(lm.history) == 2
    assert [r.new for r in out.rounds] == [1, 0]
    assert len(out.findings) == 1


def test_tide_makes_at_most_t_calls_and_multi_agent_exactly_n(workspace_instance):
    answers = [{"findings": [ws_draft(workspace_instance, i)]} for i in range(0, 12, 2)]  # more answers than calls
    lm = DummyLM(list(answers))
    with dspy.context(lm=lm):
        TIDE("workspace", max_rounds=4, per_round=1)(workspace_instance)
    assert len(lm.history) == 4

    lm = DummyLM(list(answers))
    with dspy.context(lm=lm):
        out = MultiAgent("workspace", max_rounds=4, per_round=1)(workspace_instance)
    assert len(lm.history) == 4
    assert sum(r.lm_calls for r in out.rounds) == 4
    # Independent calls: nobody sees another call's findings.
    assert all(field_block(m, "already_found") == "(nothing yet)" for m in user_messages(lm))


def test_rediscoveries_are_merged_and_counted(workspace_instance):
    same = ws_draft(workspace_instance, 0, description="The CFO approval was never recorded in the system")
    reworded = ws_draft(workspace_instance, 0, description="CFO approval was never recorded in the system")
    other = ws_draft(workspace_instance, 6)
    lm = DummyLM([{"findings": [same]}, {"findings": [reworded, other]}, {"findings": []}])
    with dspy.context(lm=lm):
        out = TIDE("workspace", max_rounds=3, per_round=2)(workspace_instance)
    assert [(r.new, r.rediscovered) for r in out.rounds] == [(1, 0), (1, 1), (0, 0)]
    assert len(out.findings) == 2


def test_multi_agent_pools_every_finding_duplicates_included(workspace_instance):
    a, b = ws_draft(workspace_instance, 0), ws_draft(workspace_instance, 4)
    lm = DummyLM([{"findings": [a]}, {"findings": [a, b]}, {"findings": [a]}])
    with dspy.context(lm=lm):
        out = MultiAgent("workspace", max_rounds=3, per_round=2)(workspace_instance)
    assert [(r.new, r.rediscovered) for r in out.rounds] == [(1, 0), (1, 1), (0, 1)]
    assert [f.round for f in out.findings] == [1, 2, 2, 3]  # the pool as the paper scores it


def test_multi_agent_dedup_pool_merges_repeats(workspace_instance):
    a, b = ws_draft(workspace_instance, 0), ws_draft(workspace_instance, 4)
    lm = DummyLM([{"findings": [a]}, {"findings": [a, b]}, {"findings": [a]}])
    with dspy.context(lm=lm):
        out = MultiAgent("workspace", max_rounds=3, per_round=2, dedup_pool=True)(workspace_instance)
    assert [f.round for f in out.findings] == [1, 2]


def test_unknown_evidence_ids_are_dropped_and_counted(workspace_instance):
    real = workspace_instance.artifacts[3].id
    draft = ws_draft(workspace_instance, 3, evidence=[real, "email_deadbeef", "made-up"])
    lm = DummyLM([{"findings": [draft]}])
    with dspy.context(lm=lm):
        out = SingleAgent("workspace")(workspace_instance)
    assert out.findings[0].evidence == [real]
    assert out.rounds[0].dropped_evidence == 2


def test_a_unique_qualname_names_its_candidate_and_an_ambiguous_one_is_dropped(repository_instance):
    a0, a1 = repository_instance.artifacts[:2]
    q0, q1 = a0.id.partition("::")[2], a1.id.partition("::")[2]
    assert q0 != q1
    twin = a1.model_copy(update={"id": f"elsewhere/twin.py::{q1}"})
    instance = repository_instance.model_copy(update={"artifacts": [a0, a1, twin]})
    draft = {
        "description": "d",
        "evidence_ids": [q0, q1, "made_up", a0.id],
        "patch": "",
        "used_template_id": "",
        "why": "",
    }
    with dspy.context(lm=DummyLM([{"findings": [draft]}])):
        out = SingleAgent("repository")(instance)
    assert out.findings[0].evidence == [a0.id]
    record = out.rounds[0]
    assert (record.dropped_evidence, record.dropped_ids, record.aliased_evidence) == (2, [q1, "made_up"], 1)


def test_action_outside_the_library_is_flagged(workspace_instance):
    draft = ws_draft(workspace_instance, 3)
    draft["action_id"] = "act_notreal"
    lm = DummyLM([{"findings": [draft]}])
    with dspy.context(lm=lm):
        out = SingleAgent("workspace")(workspace_instance)
    assert "action_not_in_library" in out.findings[0].flags
    assert out.rounds[0].flagged == 1


def test_template_and_plain_prompts_differ_only_in_the_template_block(workspace_instance):
    prompts = {}
    for name, program in {"tide": TIDE("workspace", templates=TEMPLATES, max_rounds=1, per_round=1),
                          "iter": TIDE("workspace", guidance="none", max_rounds=1, per_round=1)}.items():
        lm = DummyLM([{"findings": []}])
        with dspy.context(lm=lm):
            program(workspace_instance)
        prompts[name] = lm.history[0]["messages"]
    assert prompts["tide"][0] == prompts["iter"][0]  # system message
    tide_msg, iter_msg = prompts["tide"][-1]["content"], prompts["iter"][-1]["content"]
    assert field_block(iter_msg, "templates") == "(none)"
    assert "ws-t01" in field_block(tide_msg, "templates")
    template_block = field_block(tide_msg, "templates")
    assert tide_msg.replace(template_block, "(none)", 1) == iter_msg


def test_static_inputs_come_before_the_growing_state(workspace_instance):
    lm = DummyLM([{"findings": []}])
    with dspy.context(lm=lm):
        TIDE("workspace", max_rounds=1)(workspace_instance)
    msg = user_messages(lm)[0]
    order = [
        msg.index(f"[[ ## {f} ## ]]")
        for f in ("profile", "context", "actions", "templates", "max_new", "already_found")
    ]
    assert order == sorted(order)


def test_unparseable_round_is_retried_recorded_and_the_run_goes_on(workspace_instance):
    # Round 1 gets garbage on every attempt (ChatAdapter + its JSON fallback per attempt), round 2 succeeds.
    garbage = [{"not_findings": "oops"}] * 6
    lm = DummyLM(garbage + [{"findings": [ws_draft(workspace_instance, 0)]}, {"findings": []}])
    with dspy.context(lm=lm):
        out = TIDE("workspace", max_rounds=3, per_round=1, max_attempts=3)(workspace_instance)
    first = out.rounds[0]
    assert first.failed and first.parse_failures == 3 and first.error
    assert out.rounds[1].new == 1 and not out.rounds[1].failed
    assert len(out.findings) == 1


def test_complete_findings_of_an_answer_cut_off_at_max_tokens_are_kept(workspace_instance):
    good = ws_draft(workspace_instance, 0)
    cut = json.dumps({"findings": [good]})[:-2] + ', {"description": "half a sent'  # as cut at max_tokens
    setting = get_setting("workspace")
    assert [d.description for d in setting.complete_drafts(cut)] == [good["description"]]
    assert setting.complete_drafts("not json at all") == [] and setting.complete_drafts(None) == []

    adapter = dspy.JSONAdapter()
    lm = DummyLM([{"findings": [good, {"description": "cut"}]}, {"findings": []}], adapter=adapter)
    with dspy.context(lm=lm, adapter=adapter):
        out = TIDE("workspace", max_rounds=2, per_round=1)(workspace_instance)
    first = out.rounds[0]
    assert (first.parse_failures, first.salvaged, first.failed, first.new) == (1, 1, False, 1)
    assert lm.history and len(out.findings) == 1  # kept without a retry


def test_every_program_runs_on_a_repository_instance(repository_instance):
    ids = [a.id for a in repository_instance.artifacts]
    path = repository_instance.artifacts[0].payload["path"]
    patch = f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,1 +1,1 @@\n-x\n+y\n"
    draft = {"description": "off-by-one", "evidence_ids": [ids[0]], "patch": patch, "used_template_id": "", "why": ""}
    bad = {**draft, "description": "something else entirely", "evidence_ids": [ids[1]], "patch": "not a diff"}
    for program in (TIDE("repository", max_rounds=2, per_round=2), SingleAgent("repository"),
                    MultiAgent("repository", max_rounds=2, per_round=2)):
        lm = DummyLM([{"findings": [draft, bad]}, {"findings": []}])
        with dspy.context(lm=lm):
            out = program(repository_instance)
        assert {f.evidence[0] for f in out.findings} == {ids[0], ids[1]}
        flags = {f.evidence[0]: f.flags for f in out.findings}
        assert flags[ids[0]] == [] and flags[ids[1]] == ["patch_unparseable"]


def test_every_program_runs_on_a_workspace_instance(workspace_instance):
    for program in (
        TIDE("workspace", templates=TEMPLATES),
        SingleAgent("workspace"),
        MultiAgent("workspace", max_rounds=2),
        TIDE("workspace", guidance="demos", demos=["Solved example: ..."]),
    ):
        lm = DummyLM([{"findings": [ws_draft(workspace_instance, 0)]}, {"findings": []}, {"findings": []}])
        with dspy.context(lm=lm):
            out = program(workspace_instance)
        assert len(out.findings) == 1 and out.rounds


def test_config_round_trips_through_saved_state(tmp_path):
    program = MultiAgent("repository", templates=TEMPLATES, max_rounds=4, per_round=2, temperature=0.3)
    state = program.dump_state()
    rebuilt = DiscoveryProgram.from_config(state["tide_config"])
    assert type(rebuilt) is MultiAgent and rebuilt.config() == program.config()


def test_state_is_immutable():
    state = DiscoveryState()
    f = Finding(description="a bug", evidence=["x"])
    new_state, new, redisc = state.extend([f, f], threshold=80)
    assert state.findings == () and len(new_state.findings) == 1 and (new, redisc) == (1, 1)


def test_invalid_configuration_is_refused():
    with pytest.raises(ValueError, match="guidance"):
        TIDE("workspace", guidance="magic")
    with pytest.raises(ValueError, match="demos"):
        TIDE("workspace", guidance="demos")
    with pytest.raises(ValueError, match="setting"):
        TIDE("garden")


def test_programs_accept_the_instance_as_a_keyword(workspace_instance):
    """dspy.Evaluate and optimizers call program(**example.inputs())."""
    lm = DummyLM([{"findings": []}])
    with dspy.context(lm=lm):
        out = SingleAgent("workspace")(case=workspace_instance)
    assert out.findings == [] and len(lm.history) == 1


class _FailingPredictor:
    """Stands in for the round predictor: raises what an LM client raises for an oversized prompt."""

    lm = None
    signature = get_setting("workspace").round_signature

    def __init__(self, exc):
        self.exc, self.calls = exc, 0

    def __call__(self, **kwargs):
        self.calls += 1
        raise self.exc


def test_a_failure_that_a_retry_cannot_fix_is_recorded_once_and_stops_the_run(workspace_instance):
    program = TIDE("workspace", max_rounds=5, max_attempts=3)
    program.discover = _FailingPredictor(ValueError("prompt of 40000 tokens exceeds n_ctx=32768"))
    with dspy.context(lm=DummyLM([])):
        out = program(workspace_instance)
    assert program.discover.calls == 1
    assert len(out.rounds) == 1 and out.rounds[0].aborted and out.rounds[0].parse_failures == 0
    assert "exceeds n_ctx" in out.rounds[0].error


def test_a_predictor_level_lm_is_used_and_counted(workspace_instance):
    program = SingleAgent("workspace")
    lm = DummyLM([{"findings": [ws_draft(workspace_instance, 0)]}])
    program.set_lm(lm)
    out = program(workspace_instance)  # no global LM configured
    assert len(out.findings) == 1 and out.rounds[0].lm_calls == 1
