"""Grounded discovery: the output schema an engine receives, handles, chance baselines, and no replayed failures."""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest
from dspy.utils.dummies import DummyLM

from tide_dspy.backbones.llamacpp import LlamaCppEngine
from tide_dspy.data import load_instances
from tide_dspy.discovery import TIDE, FirstListed, RandomBaseline, SingleAgent
from tide_dspy.domains import MAX_PARAMETER_CHARS, ContextView
from tide_dspy.programs import build_program, load_program, save_program

FIXTURES = Path(__file__).parent / "fixtures" / "instances"


@pytest.fixture(scope="module")
def ws():
    return load_instances(FIXTURES / "workspace" / "workspaces.jsonl", setting="workspace")[0]


@pytest.fixture(scope="module")
def repo():
    return load_instances(FIXTURES / "repository" / "instances.jsonl", setting="repository")[0]


class SchemaRecorder:
    """Stands in for llama_cpp.Llama: records each call and answers with a fixed JSON text."""

    def __init__(self, reply: dict):
        self.reply, self.calls, self._input_ids = json.dumps(reply), [], []

    def create_chat_completion(self, **kwargs):
        self.calls.append(kwargs)
        return {"id": "x", "choices": [{"message": {"content": self.reply}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5}}


def engine_schema(program, instance, reply: dict) -> dict:
    """The JSON schema the embedded engine is asked to decode under, for one round of `program`."""
    fake = SchemaRecorder(reply)
    engine = LlamaCppEngine("qwen2.5-coder-0.5b-instruct", llama=fake, fast_grammar=False)
    lm = dspy.LM(engine.spec.dspy_model, engine=engine, temperature=0.0, max_tokens=100, cache=False)
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        program(instance)
    fmt = fake.calls[0]["response_format"]
    assert fmt["type"] == "json_object"
    return fmt["schema"]


def draft_schema(schema: dict) -> dict:
    ref = schema["properties"]["findings"]["items"]["$ref"].split("/")[-1]
    return schema["$defs"][ref]


def test_repository_round_schema_holds_the_handle_enum_and_bounds(repo):
    schema = engine_schema(TIDE("repository", max_rounds=1, per_round=3), repo, {"findings": []})
    assert schema["properties"]["findings"]["maxItems"] == 3
    evidence = draft_schema(schema)["properties"]["evidence_ids"]
    assert evidence["items"]["enum"] == list(ContextView.of(repo).handles) == ["F1", "F2", "F3", "F4", "F5", "F6"]
    assert (evidence["minItems"], evidence["maxItems"]) == (1, 20)  # no gold problem of the sets cites more


def test_max_evidence_is_an_option(repo):
    schema = engine_schema(TIDE("repository", max_rounds=1, per_round=1, max_evidence=1), repo, {"findings": []})
    assert draft_schema(schema)["properties"]["evidence_ids"]["maxItems"] == 1


def test_workspace_round_schema_offers_each_library_action_with_its_required_parameters(ws):
    schema = engine_schema(TIDE("workspace", max_rounds=1, per_round=1), ws, {"findings": []})
    draft = draft_schema(schema)
    assert draft["properties"]["evidence_ids"]["maxItems"] == 4
    options = draft["properties"]["action"]["anyOf"]
    assert [o["properties"]["action_id"]["enum"] for o in options] == [[a.id] for a in ws.actions]
    for option, action in zip(options, ws.actions):
        params = option["properties"]["parameters"]
        assert params["required"] == action.required_parameters
        assert all(params["properties"][p] == {"type": "string", "minLength": 1, "maxLength": MAX_PARAMETER_CHARS}
                   for p in action.required_parameters)
        assert params["additionalProperties"] is False


def test_a_grounded_answer_maps_handles_back_to_full_ids(ws):
    answer = {"findings": [{"description": "unsigned approval", "evidence_ids": ["E2", "D1", "E3"],
                            "action": {"action_id": "act_approve",
                                       "parameters": {"approver": "CFO", "request_id": "REQ-7", "needed_by": "3/12"}},
                            "used_template_id": "", "why": ""}]}
    program = SingleAgent("workspace", max_findings=2)
    fake = SchemaRecorder(answer)
    engine = LlamaCppEngine("qwen2.5-coder-0.5b-instruct", llama=fake, fast_grammar=False)
    lm = dspy.LM(engine.spec.dspy_model, engine=engine, temperature=0.0, max_tokens=100, cache=False)
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        out = program(ws)
    (finding,) = out.findings
    assert finding.evidence == ["email_a2", "document_b1", "email_a3"]
    assert finding.action.parameters == {"approver": "CFO", "request_id": "REQ-7", "needed_by": "3/12"}
    assert finding.flags == [] and out.rounds[0].dropped_evidence == 0


def test_unconstrained_answers_may_cite_handles_or_full_ids_and_the_rest_is_dropped(repo):
    answer = {"findings": [{"description": "off by one", "evidence_ids": ["F2", "pkg/cache.py::Cache.get", "F99"],
                            "patch": "", "used_template_id": "", "why": ""}]}
    with dspy.context(lm=DummyLM([answer]), adapter=dspy.ChatAdapter()):
        out = SingleAgent("repository", max_findings=1)(repo)
    assert out.findings[0].evidence == ["pkg/text.py::truncate", "pkg/cache.py::Cache.get"]
    assert out.rounds[0].dropped_evidence == 1 and out.rounds[0].dropped_ids == ["F99"]


def test_the_prompt_shows_each_artifact_under_its_handle_and_full_id(repo):
    lm = DummyLM([{"findings": []}])
    with dspy.context(lm=lm):
        TIDE("repository", max_rounds=1)(repo)
    prompt = lm.history[0]["messages"][-1]["content"]
    assert "### F2 · pkg/text.py::truncate (pkg/text.py lines 5-8)" in prompt


def test_a_shuffled_context_numbers_handles_in_the_order_shown(repo):
    shuffled = ContextView.of(repo, order_seed=3)
    assert shuffled.ids != ContextView.of(repo).ids
    assert sorted(shuffled.ids) == sorted(a.id for a in repo.artifacts)
    assert shuffled.handles == ContextView.of(repo).handles  # F1..F6, now naming other functions
    assert ContextView.of(repo, order_seed=3) == shuffled


def test_compiled_instructions_survive_the_per_call_signature(repo):
    program = TIDE("repository", max_rounds=1)
    program.discover.signature = program.discover.signature.with_instructions("Look only for off-by-one errors.")
    lm = DummyLM([{"findings": []}])
    with dspy.context(lm=lm):
        program(repo)
    assert "Look only for off-by-one errors." in lm.history[0]["messages"][0]["content"]


# ---- chance baselines ----

@pytest.mark.parametrize("which", ["ws", "repo"])
def test_a_grounded_finding_pickles_as_its_own_type(which, request):
    """DSPy's bootstrapping hashes the demos it collects with pickle; a finding of the type built per instance must
    pickle, and come back as that type."""
    import pickle

    from dspy.utils.hasher import Hasher
    from pydantic import TypeAdapter

    instance = request.getfixturevalue(which)
    setting = build_program("iter", instance.setting).setting
    view = ContextView.of(instance)
    signature = setting.grounded_signature(setting.round_signature, instance, view, 2)
    draft = {"description": "d", "evidence_ids": [view.handles[0]], "patch": "diff --git a/x b/x"}
    if instance.actions:
        draft["action"] = {"action_id": instance.actions[0].id, "parameters": {}}
    findings = TypeAdapter(signature.output_fields["findings"].annotation).validate_python([draft])
    back = pickle.loads(pickle.dumps(findings))
    assert type(back[0]) is type(findings[0]) and back == findings
    assert Hasher.hash((dspy.Example(findings=findings),)) == Hasher.hash((dspy.Example(findings=back),))


def test_random_baseline_is_seeded_and_reproducible(ws):
    a = RandomBaseline("workspace", n_findings=4, evidence_size=2, seed=7)(ws).findings
    b = RandomBaseline("workspace", n_findings=4, evidence_size=2, seed=7)(ws).findings
    c = RandomBaseline("workspace", n_findings=4, evidence_size=2, seed=8)(ws).findings
    assert [f.evidence for f in a] == [f.evidence for f in b] != [f.evidence for f in c]
    assert len(a) == 4 and all(len(f.evidence) == 2 and set(f.evidence) <= ws.artifact_ids for f in a)


def test_first_listed_cites_artifacts_in_the_order_shown(repo):
    plain = FirstListed("repository", n_findings=2, evidence_size=2)(repo).findings
    assert [f.evidence for f in plain] == [["pkg/text.py::slugify", "pkg/text.py::truncate"],
                                           ["pkg/mathx.py::mean", "pkg/mathx.py::clamp"]]
    shuffled = FirstListed("repository", n_findings=1, evidence_size=2, context_order_seed=3)(repo).findings
    assert shuffled[0].evidence == ContextView.of(repo, order_seed=3).ids[:2]


def test_chance_defaults_are_tides_budget_and_the_settings_evidence_size(ws):
    program = build_program("random", "workspace")
    out = program(ws)
    assert len(out.findings) == 10 and {len(f.evidence) for f in out.findings} == {3}
    assert [f.round for f in out.findings] == list(range(1, 11))
    assert [r.new for r in out.rounds] == [1] * 10


def test_chance_baselines_save_and_load_with_their_config(tmp_path, repo):
    program = build_program("first-listed", "repository", context_order_seed=5)
    loaded = load_program(save_program(program, tmp_path / "floor.json"))
    assert type(loaded) is FirstListed and loaded.context_order_seed == 5
    assert [f.evidence for f in loaded(repo).findings] == [f.evidence for f in program(repo).findings]


# ---- failures are not replayed ----

def test_the_round_after_a_failed_round_is_a_fresh_rollout(repo):
    lm = DummyLM([{"findings": "not a list of findings"}, {"findings": []}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        out = TIDE("repository", max_rounds=2, max_attempts=1)(repo)
    assert out.rounds[0].failed and not out.rounds[1].failed
    first, second = (entry["kwargs"] for entry in lm.history)
    assert first.get("rollout_id") is None
    assert second.get("rollout_id") not in (None, first.get("rollout_id"))
