"""Backbone registry, settings, key hygiene, the llama.cpp engine (with a fake Llama) and weight assembly."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

import dspy
import pytest
from dspy.lm15 import Config, Message, Request

from tide_dspy.backbones import (
    BACKBONES,
    LMOptions,
    adapter_for,
    describe_lm,
    get_lm,
    lm_from_options,
    resolve,
    weights,
)
from tide_dspy.backbones.llamacpp import LlamaCppEngine
from tide_dspy.cost.prices import DEFAULT_OUTPUT_TOKENS
from tide_dspy.cost.usage import entries_since, lm_usage, usage_mark, usage_tokens
from tide_dspy.discovery import TIDE

SETTINGS_ENV = ("TIDE_TEMPERATURE", "TIDE_MAX_TOKENS", "TIDE_NUM_THREADS", "TIDE_N_CTX", "TIDE_API_BASE",
                "TIDE_CONSTRAINED", "TIDE_SERVED_MODEL", "TIDE_API_KEY")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in SETTINGS_ENV:
        monkeypatch.delenv(name, raising=False)


class FakeLlama:
    """Stands in for llama_cpp.Llama: whitespace tokens, a KV cache of the last call's tokens."""

    def __init__(self, reply='[[ ## answer ## ]]\n42\n\n[[ ## completed ## ]]', n_ctx=10_000, finish="stop"):
        self.reply, self.n_ctx, self.finish = reply, n_ctx, finish
        self.calls: list[dict] = []
        self._input_ids: list[int] = []
        self.vocab: dict[str, int] = {}

    def create_chat_completion(self, **kwargs):
        self.calls.append(kwargs)
        words = [w for m in kwargs["messages"] for w in (m["role"] + " " + m["content"]).split()]
        prompt = [self.vocab.setdefault(w, len(self.vocab)) for w in words]
        if len(prompt) >= self.n_ctx:
            raise ValueError(f"Requested tokens ({len(prompt)}) exceed context window of {self.n_ctx}")
        output = self.reply.split()
        self._input_ids = prompt + [7] * len(output)
        return {"id": "chatcmpl-1", "choices": [{"message": {"role": "assistant", "content": self.reply},
                                                  "finish_reason": self.finish}],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(output)}}


def local_lm(fake: FakeLlama, **engine_kw) -> dspy.LM:
    engine_kw.setdefault("fast_grammar", False)  # the check-first grammar needs a real vocabulary (test_local_smoke)
    engine = LlamaCppEngine("qwen2.5-coder-0.5b-instruct", llama=fake, **engine_kw)
    return dspy.LM(engine.spec.dspy_model, engine=engine, temperature=engine.temperature, max_tokens=engine.max_tokens)


# ---- registry ----

def test_registry_names_resolve_to_model_strings():
    assert resolve("gpt-5-mini").model == "openai/gpt-5-mini"
    assert resolve("claude-sonnet-4.5").model.startswith("anthropic/")
    assert resolve("gemini-3.5-flash").model.startswith("gemini/")
    assert resolve("qwen-3.6-flash").verified is False
    assert resolve(None).name == "local"
    raw = resolve("openrouter/some/model")
    assert raw.model == "openrouter/some/model" and raw.kind == "hosted"
    with pytest.raises(ValueError, match="unknown backbone 'gpt5'.*local-small"):
        resolve("gpt5")


def test_lm_options_read_the_namespace_and_keep_defaults_for_what_it_lacks():
    options = LMOptions.from_namespace(argparse.Namespace(backbone="gpt-5-mini", temperature=None, threads=2))
    assert options == LMOptions(backbone="gpt-5-mini", threads=2)


def test_a_configured_lm_is_the_commands_lm():
    lm = dspy.utils.DummyLM([])
    with dspy.context(lm=lm):
        assert lm_from_options(LMOptions(backbone="gpt-5-mini")) is lm


def test_without_a_configured_lm_the_backbone_is_built():
    assert lm_from_options(LMOptions(backbone="gpt-5-mini", no_check=True)).model == "openai/gpt-5-mini"


@pytest.mark.parametrize("name", [n for n in BACKBONES if n != "openai-compatible"])
def test_every_named_backbone_builds_an_lm_without_a_key_or_network(name):
    lm = get_lm(name)
    assert isinstance(lm, dspy.LM)
    assert describe_lm(lm)["backbone"] == name


def test_local_model_string_carries_the_weights_hash():
    small, large = get_lm("local-small"), get_lm("local")
    assert small.model == "llamacpp/qwen2.5-coder-0.5b-instruct-1d9614638d18"
    assert large.model.endswith(weights.LOCAL_MODELS["qwen2.5-coder-1.5b-instruct"].sha256[:12])
    assert isinstance(small.engine, LlamaCppEngine)


def test_settings_come_from_env_and_arguments_win(monkeypatch):
    monkeypatch.setenv("TIDE_TEMPERATURE", "0.3")
    monkeypatch.setenv("TIDE_MAX_TOKENS", "256")
    monkeypatch.setenv("TIDE_NUM_THREADS", "3")
    monkeypatch.setenv("TIDE_N_CTX", "4096")
    monkeypatch.setenv("TIDE_CONSTRAINED", "0")
    engine = get_lm("local-small").engine
    assert (engine.temperature, engine.max_tokens, engine.n_threads, engine.n_ctx, engine.constrained) == (
        0.3, 256, 3, 4096, False)
    assert "response_format" not in engine.supported_params
    engine = get_lm("local-small", temperature=0.9, max_tokens=64, num_threads=1, n_ctx=2048, constrained=True).engine
    assert (engine.temperature, engine.max_tokens, engine.n_threads, engine.n_ctx, engine.constrained) == (
        0.9, 64, 1, 2048, True)


def test_adapter_for_prefers_the_schema_grammar_on_the_embedded_engine():
    assert isinstance(adapter_for(get_lm("local-small")), dspy.JSONAdapter)
    assert adapter_for(get_lm("local-small", constrained=False)) is None
    assert adapter_for(get_lm("gpt-5-mini")) is None


def test_bad_env_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("TIDE_MAX_TOKENS", "lots")
    with pytest.raises(ValueError, match="TIDE_MAX_TOKENS='lots'"):
        get_lm("local")


def test_reasoning_backbone_gets_no_temperature_and_its_output_budget():
    lm = get_lm("gpt-5-mini", temperature=0.3)
    assert lm.kwargs.get("temperature") is None
    assert lm.kwargs.get("max_completion_tokens", lm.kwargs.get("max_tokens")) == DEFAULT_OUTPUT_TOKENS == 16_384
    assert lm.copy(temperature=0.7).kwargs.get("temperature") is None  # DSPy's Refine and tune copy with one


def test_openai_compatible_needs_api_base_and_uses_max_tokens_route(monkeypatch):
    with pytest.raises(ValueError, match="TIDE_API_BASE"):
        get_lm("openai-compatible")
    monkeypatch.setenv("TIDE_API_BASE", "http://localhost:8000/v1")
    lm = get_lm("openai-compatible", model="qwen-coder", max_tokens=300)
    assert (lm.model, lm.kwargs["max_tokens"], lm.engine) == ("openai/qwen-coder", 300, "litellm")
    assert lm.tide_served.api_base == lm.kwargs["api_base"] == "http://localhost:8000/v1"


# ---- key hygiene ----

def test_keys_never_reach_describe_lm_or_a_saved_program(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-SENTINEL-openai")
    monkeypatch.setenv("TIDE_API_KEY", "SENTINEL-server-key")
    with pytest.raises(ValueError, match="environment"):
        get_lm("gpt-5-mini", api_key="sk-SENTINEL-openai")
    with pytest.raises(ValueError, match="TIDE_API_KEY"):
        get_lm("openai-compatible", api_base="http://user:SENTINEL-pw@localhost:8000/v1")
    lms = [get_lm("gpt-5-mini"), get_lm("openai/gpt-4o-mini"), get_lm("local-small"),
           get_lm("openai-compatible", api_base="http://localhost:8000/v1")]
    # The served engine reads the key at each call (tests/test_served.py checks it reaches the server).
    for lm in lms:
        program = TIDE("repository")
        program.set_lm(lm)
        path = tmp_path / "program.json"
        program.save(str(path))
        saved = path.read_text()
        described = json.dumps(describe_lm(lm))
        for text in (saved, described):
            assert "SENTINEL" not in text
        assert json.loads(saved)["discover"]["lm"]["model"] == lm.model


def test_saved_local_program_reloads_its_engine_settings(tmp_path):
    program = TIDE("repository")
    program.set_lm(get_lm("local-small", max_tokens=200, n_ctx=4096))
    path = tmp_path / "p.json"
    program.save(str(path))
    loaded = TIDE("repository")
    loaded.load(str(path), allow_unsafe_lm_state=True)
    engine = loaded.discover.lm.engine
    assert isinstance(engine, LlamaCppEngine) and (engine.max_tokens, engine.n_ctx) == (200, 4096)


# ---- the engine, with a fake Llama ----

def _request(model, text="hello world", **config):
    return Request(model=model, system="be brief", messages=(Message.user(text),), config=Config(**config))


def test_usage_counts_only_the_entries_after_the_mark():
    class FakeLM:
        model = "fake"
        history = [{"uuid": "a", "usage": {"prompt_tokens": 5, "completion_tokens": 1}},
                   {"uuid": "b", "usage": {"input_tokens": 7, "output_tokens": 2}, "cost": 0.5},
                   {"uuid": "c", "usage": {}}]

    lm = FakeLM()
    assert usage_mark(lm) == "c"
    assert [e["uuid"] for e in entries_since(lm, "a")] == ["b", "c"]
    assert len(entries_since(lm, "evicted")) == 3  # an evicted mark counts the whole (bounded) history
    assert usage_tokens(entries_since(lm, "b")) == (None, None)
    assert lm_usage(lm, "a") == {"model": "fake", "calls": 2, "prompt_tokens": 7, "completion_tokens": 2,
                                 "cached_prompt_tokens": None, "cache_write_tokens": None, "cost_usd": 0.5}
    assert lm_usage(None) is None


def test_the_spend_counts_the_calls_and_cost_of_its_lms_since_it_was_made_without_cache_hits():
    from types import SimpleNamespace

    from tide_dspy.cost.guard import Spend

    backbone, judge = SimpleNamespace(history=[{"uuid": "before", "cost": 9.0}]), SimpleNamespace(history=[])
    spend = Spend({"backbone": backbone, "judge": judge}, {})
    backbone.history += [{"uuid": "a", "cost": 0.25}, {"uuid": "b", "cost": None},
                         {"uuid": "c", "cost": 1.0, "response": SimpleNamespace(cache_hit=True)}]
    judge.history.append({"uuid": "d", "cost": 0.5})
    assert spend.spent() == (3, 0.75)


def test_the_spend_prices_a_call_without_a_reported_cost_at_its_roles_prices():
    from types import SimpleNamespace

    from tide_dspy.cost.guard import Spend
    from tide_dspy.cost.prices import Prices

    usage = {"prompt_tokens": 10**6, "completion_tokens": 10**5}
    backbone, judge = SimpleNamespace(history=[]), SimpleNamespace(history=[])
    spend = Spend({"backbone": backbone, "judge": judge}, {"backbone": Prices(0.25, 2.0, 0.025)})
    backbone.history += [{"uuid": "a", "cost": None, "usage": usage},
                         {"uuid": "c", "cost": 0.1, "usage": usage}]  # the provider's cost wins
    judge.history.append({"uuid": "b", "cost": None, "usage": usage})  # no price known: 0
    assert spend.spent() == (3, 0.55)


def test_engine_builds_a_response_with_usage_and_bounds_max_tokens():
    fake = FakeLlama(reply="the answer", finish="length")
    engine = LlamaCppEngine("qwen2.5-coder-0.5b-instruct", llama=fake, max_tokens=100, seed=5)
    response = engine.complete(_request(engine.spec.dspy_model, max_tokens=5000, temperature=0.4, stop=("END",)))
    assert response.text == "the answer"
    assert response.finish_reason == "length"
    assert response.usage.input_tokens == 6 and response.usage.output_tokens == 2
    sent = fake.calls[-1]
    assert sent["max_tokens"] == 100 and sent["temperature"] == 0.4 and sent["stop"] == ["END"] and sent["seed"] == 5
    assert sent["messages"][0] == {"role": "system", "content": "be brief"}
    assert "response_format" not in sent


def test_engine_reports_the_reused_prompt_prefix():
    fake = FakeLlama()
    engine = LlamaCppEngine("qwen2.5-coder-0.5b-instruct", llama=fake)
    engine.complete(_request(engine.spec.dspy_model, "static context here then round one"))
    second = engine.complete(_request(engine.spec.dspy_model, "static context here then round two"))
    assert second.usage.cache_read_tokens == 9  # "system be brief user static context here then round"
    assert [c.reused_tokens for c in engine.calls] == [0, 9]


def test_engine_turns_a_json_schema_into_a_grammar_only_when_constrained():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    fake = FakeLlama(reply='{"a": 1}')
    for constrained, expected in ((True, {"type": "json_object", "schema": schema}), (False, None)):
        engine = LlamaCppEngine("qwen2.5-coder-0.5b-instruct", llama=fake, constrained=constrained, fast_grammar=False)
        engine.complete(_request(engine.spec.dspy_model, response_format={"type": "json_schema", "schema": schema}))
        assert fake.calls[-1].get("response_format") == expected
        assert engine.calls[-1].constrained is constrained


def test_json_adapter_sends_the_signature_schema_to_the_engine():
    fake = FakeLlama(reply='{"answer": "42"}')
    with dspy.context(lm=local_lm(fake), adapter=dspy.JSONAdapter()):
        assert dspy.Predict("question -> answer")(question="?").answer == "42"
    fmt = fake.calls[-1]["response_format"]
    assert fmt["type"] == "json_object" and "answer" in fmt["schema"]["properties"]


def test_chat_adapter_runs_unconstrained_through_dspy():
    fake = FakeLlama()
    lm = local_lm(fake)
    with dspy.context(lm=lm):
        assert dspy.Predict("question -> answer")(question="?").answer == "42"
    assert "response_format" not in fake.calls[-1]
    assert lm.history[-1]["usage"]["prompt_tokens"] > 0


def test_too_long_prompt_names_both_sizes():
    fake = FakeLlama(n_ctx=5)
    with (
        dspy.context(lm=local_lm(fake)),
        pytest.raises(Exception, match=r"Requested tokens \(\d+\) exceed context window of 5.*n_ctx") as err,
    ):
        dspy.Predict("question -> answer")(question="a rather long question")
    assert "ContextWindowExceeded" in type(err.value).__name__


# ---- weight assembly ----

@pytest.fixture
def fake_chunks(tmp_path, monkeypatch):
    blobs = [b"GGUF" + bytes(range(200)), b"middle-part" * 50, b"tail"]
    root = tmp_path / "site"
    for i, blob in enumerate(blobs, 1):
        pkg = root / f"fakechunk_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(blob)
    monkeypatch.syspath_prepend(str(root))
    whole = b"".join(blobs)
    model = weights.LocalModel("fake-model", "Fake", tuple(f"fakechunk_part{i}" for i in range(1, 4)),
                               hashlib.sha256(whole).hexdigest(), len(whole))
    yield model, whole
    for i in range(1, 4):
        sys.modules.pop(f"fakechunk_part{i}", None)


def test_assembly_concatenates_verifies_and_is_reused(fake_chunks, tmp_path, monkeypatch):
    model, whole = fake_chunks
    path = weights.assemble(model, tmp_path / "cache")
    assert path.read_bytes() == whole and path.name == f"fake-model-{model.sha256[:12]}.gguf"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left
    monkeypatch.setattr(weights, "chunk_files", lambda m: pytest.fail("chunks read again"))
    assert weights.assemble(model, tmp_path / "cache") == path


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TIDE_CACHE_DIR", str(tmp_path))
    assert weights.cache_dir() == tmp_path


def test_checksum_mismatch_fails_and_leaves_nothing(fake_chunks, tmp_path):
    model, _ = fake_chunks
    bad = weights.LocalModel(model.key, model.title, model.packages, "0" * 64, model.size)
    with pytest.raises(weights.WeightsError, match="SHA-256.*Reinstall"):
        weights.assemble(bad, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_missing_chunk_packages_say_how_to_install(tmp_path):
    model = weights.LocalModel("m", "Missing", ("no_such_chunk_part1", "no_such_chunk_part2"), "0" * 64, 1)
    with pytest.raises(weights.WeightsError, match=r"2 chunk package\(s\).*tide-dspy\[local\]"):
        weights.assemble(model, tmp_path)


def test_require_items_puts_min_items_on_top_level_lists_only():
    schema = {"type": "object", "properties": {"findings": {"type": "array", "items": {"type": "object"}},
                                               "note": {"type": "string"}}}
    plain = LlamaCppEngine("qwen2.5-coder-0.5b-instruct", llama=object())
    strict = LlamaCppEngine("qwen2.5-coder-0.5b-instruct", llama=object(), require_items=True)
    assert plain._require_items(schema) == schema
    props = strict._require_items(schema)["properties"]
    assert props["findings"]["minItems"] == 1 and "minItems" not in props["note"]
    assert "minItems" not in schema["properties"]["findings"]  # the request's schema is not mutated
    assert LlamaCppEngine.load_state(strict.dump_state()).require_items is True
