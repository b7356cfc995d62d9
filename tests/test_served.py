"""The openai-compatible backbone (dspy.LM on DSPy's LiteLLM client): the output schema goes out in the server's
dialect, keys stay out of state, and DSPy's cache never replays one server's answers for another."""

from __future__ import annotations

import json
from typing import Literal

import dspy
import pytest
from pydantic import BaseModel, Field

from scripts import load_script
from tide_dspy.backbones import adapter_for, describe_lm, get_lm

StubServer = load_script("stub_server").StubServer


class Pick(BaseModel):
    evidence_id: Literal["F1", "F2"]
    score: int = Field(ge=1, le=5)


class Choose(dspy.Signature):
    """Pick one."""

    question: str = dspy.InputField()
    pick: Pick = dspy.OutputField()


def _answer(body):
    return json.dumps({"pick": {"evidence_id": "F2", "score": 4}})


def _ask(lm):
    with dspy.context(lm=lm, adapter=adapter_for(lm)):
        return dspy.Predict(Choose)(question="which?").pick


def test_llama_cpp_dialect_sends_json_object_with_the_schema():
    with StubServer(answer=_answer) as stub:
        lm = get_lm("openai-compatible", api_base=stub.api_base, server_schema="llama.cpp", max_tokens=50)
        assert _ask(lm) == Pick(evidence_id="F2", score=4)
    body = stub.requests[0]
    fmt = body["response_format"]
    assert fmt["type"] == "json_object" and set(fmt) == {"type", "schema"}
    pick = fmt["schema"]["properties"]["pick"]
    defs = fmt["schema"].get("$defs", {})
    schema = defs[pick["$ref"].split("/")[-1]] if "$ref" in pick else pick
    assert schema["properties"]["evidence_id"]["enum"] == ["F1", "F2"]  # the grounded enum reaches the server
    assert schema["properties"]["score"]["maximum"] == 5
    assert body["max_tokens"] == 50 and "max_completion_tokens" not in body


def test_openai_dialect_for_vllm_sends_json_schema():
    with StubServer(answer=_answer) as stub:
        lm = get_lm("openai-compatible", api_base=stub.api_base)
        assert lm.tide_served.schema_format == "json_schema"
        _ask(lm)
    fmt = stub.requests[0]["response_format"]
    assert fmt["type"] == "json_schema" and "pick" in fmt["json_schema"]["schema"]["properties"]


def test_off_sends_no_response_format_and_chat_adapter_text():
    with StubServer() as stub:
        lm = get_lm("openai-compatible", api_base=stub.api_base, server_schema="off")
        assert adapter_for(lm) is None
        with dspy.context(lm=lm):
            out = dspy.Predict("question -> answer")(question="hi")
    assert "response_format" not in stub.requests[0] and out.answer == ""


def test_a_refused_format_says_which_setting_to_use():
    with StubServer(status=422, error_body="response_format: Input should be 'text' or 'json_object'") as stub:
        lm = get_lm("openai-compatible", api_base=stub.api_base, num_retries=0)
        with pytest.raises(Exception, match="TIDE_SERVER_SCHEMA=llama.cpp"):
            _ask(lm)


def test_a_bad_schema_format_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("TIDE_SERVER_SCHEMA", "grammar")
    with pytest.raises(ValueError, match="schema format 'grammar'.*TIDE_SERVER_SCHEMA"):
        get_lm("openai-compatible", api_base="http://127.0.0.1:1/v1")


def test_the_key_goes_to_the_server_and_nowhere_else(monkeypatch):
    monkeypatch.setenv("TIDE_API_KEY", "SENTINEL-server-key")
    with StubServer(answer=_answer) as stub:
        lm = get_lm("openai-compatible", api_base=stub.api_base, server_schema="llama.cpp")
        _ask(lm)
    assert {k.lower(): v for k, v in stub.headers[0].items()}["authorization"] == "Bearer SENTINEL-server-key"
    assert "SENTINEL" not in json.dumps(describe_lm(lm)) + json.dumps(lm.dump_state(), default=str)
    assert "SENTINEL" not in json.dumps(lm.history, default=str)


def test_without_a_server_key_the_provider_key_stays_home(monkeypatch):
    """LiteLLM sends OPENAI_API_KEY to any OpenAI-style address it is given no key for: the served LM gives it a
    placeholder instead."""
    monkeypatch.delenv("TIDE_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "SENTINEL-provider-key")
    with StubServer(answer=_answer) as stub:
        _ask(get_lm("openai-compatible", api_base=stub.api_base))
    assert "SENTINEL" not in json.dumps(stub.headers)


# ---- which server answered: DSPy's cache never replays another server's answers ----

def _answer_from(name):
    return lambda body: json.dumps({"pick": {"evidence_id": name, "score": 3}})


def test_two_servers_under_one_model_name_never_share_answers():
    import dspy as _dspy

    _dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    with StubServer(answer=_answer_from("F1")) as a, StubServer(answer=_answer_from("F2")) as b:
        first = _ask(get_lm("openai-compatible", api_base=a.api_base))
        second = _ask(get_lm("openai-compatible", api_base=b.api_base))
    assert (first.evidence_id, second.evidence_id) == ("F1", "F2")
    assert len(a.requests) == len(b.requests) == 1  # b answered itself: no cache entry of a's was replayed


def test_the_served_model_id_is_part_of_the_cache_identity():
    with StubServer(answer=_answer, served=("qwen2.5-coder-7b",)) as stub:
        lm = get_lm("openai-compatible", api_base=stub.api_base)
        _ask(lm)
    assert lm.tide_cache_identity.startswith("openai-compatible/qwen2.5-coder-7b-json_schema@")
    assert lm.history[-1]["kwargs"]["rollout_id"] == lm.tide_cache_identity  # what DSPy keys the call on
    assert stub.requests[0]["model"] == "qwen2.5-coder-7b"  # the id the server listed is the one sent
    assert "rollout_id" not in stub.requests[0]  # and never sent


def test_a_dead_server_with_a_warm_cache_fails_rather_than_replaying():
    import dspy as _dspy

    _dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    with StubServer(answer=_answer) as stub:
        base = stub.api_base
        _ask(get_lm("openai-compatible", api_base=base))
    with pytest.raises(Exception, match="no answer|Connection refused|is the server running"):
        _ask(get_lm("openai-compatible", api_base=base, num_retries=0))


def test_a_rate_limited_server_is_retried_after_its_retry_after(monkeypatch):
    monkeypatch.setattr("tenacity.nap.time.sleep", lambda seconds: None)  # the retry, not its wait, is tested here
    with StubServer(answer=_answer, max_requests=1) as stub:
        lm = get_lm("openai-compatible", api_base=stub.api_base, num_retries=1)
        _ask(lm)
        with pytest.raises(Exception, match="RateLimitError"):
            with dspy.context(lm=lm, adapter=adapter_for(lm)):
                dspy.Predict(Choose)(question="again?", config={"rollout_id": 1})
    assert len(stub.requests) == 3  # the first answer, then the 429 and its one retry
