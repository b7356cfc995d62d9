"""The four hosted providers, through the provider simulator (tide_dspy.testing.provider_sim).

Real `tide evaluate` runs (TIDE, Single, Multi, with an LLM judge on the same hosted backbone) go through DSPy's
native client (--api-base) and through LiteLLM (the provider's own <PREFIX>_API_BASE variable). The simulator
answers as each provider does and refuses what each provider's documentation forbids; every run must finish with
no request refused. Faults (a prose answer that forces DSPy's JSON fallback, a 429 storm with Retry-After, 5xx
errors, a hang) must not cost a round.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import dspy
import pytest

from tide_dspy.backbones import get_lm, resolve
from tide_dspy.backbones.calls import unresolvable
from tide_dspy.backbones.preflight import PROMPT as PREFLIGHT
from tide_dspy.cli.main import main
from tide_dspy.testing.provider_sim import Fault, ProviderSimulator, RateLimit

WORKSPACES = "tests/fixtures/instances/workspace/workspaces.jsonl"
REPOSITORIES = "tests/fixtures/instances/repository/instances.jsonl"
TEMPLATES = {"workspace": "programs/workspace/local/templates.json",
             "repository": "programs/repository/local/templates.json"}
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY",
           "dashscope": "DASHSCOPE_API_KEY"}
BACKBONE = {"openai": "gpt-5-mini", "anthropic": "claude-sonnet-4.5", "gemini": "gemini-3.5-flash",
            "dashscope": "qwen-3.6-flash"}
BASE_ENV = ("OPENAI_API_BASE", "OPENAI_BASE_URL", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL", "GEMINI_API_BASE",
            "GEMINI_BASE_URL", "DASHSCOPE_API_BASE", "DASHSCOPE_BASE_URL", "TIDE_API_BASE", "TIDE_API_KEY",
            "TIDE_NUM_RETRIES", "TIDE_TIMEOUT", "TIDE_TEMPERATURE", "TIDE_MAX_TOKENS")


@pytest.fixture
def sim(monkeypatch):
    for name in BASE_ENV:
        monkeypatch.delenv(name, raising=False)
    with ProviderSimulator() as simulator:
        for provider, env in KEY_ENV.items():
            monkeypatch.setenv(env, simulator.keys[provider])
        yield simulator


def evaluate(sim, monkeypatch, tmp_path, provider: str, method: str, path: str = "native", *extra: str,
             setting: str = "workspace", ids: str = "ws-tiny") -> dict:
    """One `tide evaluate` through the simulator; its exit status, rows and LM usage."""
    backbone = BACKBONE[provider]
    out = tmp_path / f"{provider}-{method}-{path}"
    args = ["evaluate", "--setting", setting, "--data", WORKSPACES if setting == "workspace" else REPOSITORIES,
            "--ids", ids, "--method", method, "--rounds", "3", "--backbone", backbone, "--judge", backbone,
            "--no-track", "--out", str(out), *extra]
    if method == "tide":
        args += ["--templates", TEMPLATES[setting]]
    if path == "native":
        args += ["--api-base", sim.base_url(provider), "--judge-api-base", sim.base_url(provider)]
    else:  # DSPy sends a provider's calls through LiteLLM when its own base variable is set
        monkeypatch.setenv(f"{provider.upper()}_API_BASE", sim.litellm_base(provider))
    rc = main(args)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()] if rc == 0 else []
    usage = json.loads((out / "lm_usage.json").read_text()) if rc == 0 else {}
    return {"rc": rc, "rows": rows, "usage": usage}


def refused(sim) -> list[str]:
    return [f"{r.provider} {r.kind} {r.status}: {r.error}" for r in sim.rejected()]


def completed(run: dict) -> bool:
    return run["rc"] == 0 and run["rows"] and all(
        r["error"] is None and not any(rd["aborted"] or rd["failed"] for rd in r["rounds"]) for r in run["rows"])


PATHS = [(p, path) for p in ("openai", "anthropic", "gemini", "dashscope") for path in ("native", "litellm")
         if not (p == "dashscope" and path == "native")]  # DSPy's native client has no DashScope route


@pytest.mark.paper  # every provider, route and method at the paper's T and k: the paper lane
@pytest.mark.parametrize("method", ["tide", "single", "multi"])
@pytest.mark.parametrize("provider,path", PATHS)
def test_every_request_is_accepted_even_after_a_prose_answer(sim, monkeypatch, tmp_path, provider, path, method):
    # The first findings answer is prose: DSPy's JSON fallback sends the round's schema as structured output.
    sim.faults.append(Fault("prose", count=1, kind="findings"))
    run = evaluate(sim, monkeypatch, tmp_path, provider, method, path)
    assert refused(sim) == []
    assert completed(run), run
    assert any(r.structured for r in sim.requests(provider, "findings"))  # the fallback did go out
    assert sim.requests(provider, "judge") and run["usage"]["judge"]["calls"] > 0
    assert run["rows"][0]["score"]["coverage"]["retrieval"] > 0
    assert all(not r.advice for r in sim.log)  # no documented recommendation ignored (Gemini 3's temperature)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_repository_rounds_are_accepted(sim, monkeypatch, tmp_path, provider):
    sim.faults.append(Fault("prose", count=1, kind="findings"))
    run = evaluate(sim, monkeypatch, tmp_path, provider, "tide", setting="repository", ids="tiny__repo__multi-01")
    assert refused(sim) == [] and completed(run)


def test_a_reasoning_model_and_gemini_3_get_no_temperature(sim, monkeypatch, tmp_path):
    for provider in ("openai", "gemini"):
        assert completed(evaluate(sim, monkeypatch, tmp_path, provider, "multi"))
    bodies = [r.body for r in sim.log if r.kind == "findings"]
    assert bodies and all("temperature" not in b and "temperature" not in (b.get("generationConfig") or {})
                          for b in bodies)
    assert len({b.get("seed", (b.get("generationConfig") or {}).get("seed")) for b in bodies}) > 1  # samples differ


@pytest.mark.parametrize("retry_after,least", [(dict(retry_after="1"), 1.0), (dict(retry_after_date=2), 0.5)])
def test_a_429_storm_is_waited_out_with_retry_after(sim, monkeypatch, tmp_path, caplog, retry_after, least):
    monkeypatch.setattr("tenacity.nap.time.sleep", lambda seconds: None)  # the waits are read from the log
    sim.faults.append(Fault(429, count=3, kind="findings", **retry_after))  # in seconds, or as an HTTP date
    run = evaluate(sim, monkeypatch, tmp_path, "openai", "tide", "native", "--num-retries", "4")
    assert completed(run) and refused(sim) == []
    storm = [r for r in sim.log if r.kind == "findings"][:4]
    assert [r.status for r in storm] == [429, 429, 429, 200]
    waits = [float(w) for w in re.findall(r"retry \d of 4 in ([\d.]+) s \(the provider's Retry-After\)", caplog.text)]
    assert len(waits) == 3 and min(waits) >= least  # each wait was the provider's Retry-After


@pytest.mark.parametrize("provider,path,status", [("openai", "native", 500), ("anthropic", "native", 529),
                                                  ("gemini", "litellm", 503), ("dashscope", "litellm", 500)])
def test_server_errors_are_retried(sim, monkeypatch, tmp_path, provider, path, status):
    monkeypatch.setattr("tenacity.nap.time.sleep", lambda seconds: None)
    sim.faults.append(Fault(status, count=2, retry_after="0", kind="findings"))
    run = evaluate(sim, monkeypatch, tmp_path, provider, "single", path)
    assert completed(run) and refused(sim) == []
    assert [r.status for r in sim.requests(provider, "findings")][:3] == [status, status, 200]


@pytest.mark.parametrize("provider,path", [("openai", "native"), ("anthropic", "litellm")])
def test_a_hung_request_times_out_and_is_retried(sim, monkeypatch, tmp_path, provider, path):
    sim.faults.append(Fault("hang", seconds=4, kind="findings"))
    run = evaluate(sim, monkeypatch, tmp_path, provider, "single", path, "--timeout", "1")
    assert completed(run) and refused(sim) == []
    assert len(sim.requests(provider, "findings")) >= 2


@pytest.mark.paper  # waits the limit out for real
def test_a_per_minute_limit_is_outlasted_with_workers(monkeypatch, tmp_path):
    for name in BASE_ENV:
        monkeypatch.delenv(name, raising=False)
    with ProviderSimulator(rate_limit=RateLimit(requests=3, per=2.0)) as sim:
        monkeypatch.setenv("ANTHROPIC_API_KEY", sim.keys["anthropic"])
        run = evaluate(sim, monkeypatch, tmp_path, "anthropic", "multi", "native", "--workers", "3",
                       ids="ws-tiny,ws-larkspur-school")
    assert completed(run) and len(run["rows"]) == 2
    assert any(r.status == 429 for r in sim.log) and refused(sim) == []


@pytest.mark.parametrize("path", ["native", "litellm"])
def test_claude_is_asked_to_cache_the_static_prefix(sim, monkeypatch, tmp_path, path):
    run = evaluate(sim, monkeypatch, tmp_path, "anthropic", "tide", path)
    assert completed(run) and refused(sim) == []
    rounds = sim.requests("anthropic", "findings")
    marked = [r for r in rounds if "cache_control" in json.dumps(r.body)]
    assert len(marked) == len(rounds) == 3
    # Round 2 and 3 read round 1's prefix from the cache, and lm_usage.json says so.
    assert rounds[0].usage["cache_creation_input_tokens"] > 0
    assert all(r.usage["cache_read_input_tokens"] > 0 for r in rounds[1:])
    assert run["usage"]["backbone"]["cached_prompt_tokens"] == sum(r.usage["cache_read_input_tokens"] for r in rounds)


def test_implicit_caches_are_recorded_too(sim, monkeypatch, tmp_path):
    run = evaluate(sim, monkeypatch, tmp_path, "openai", "tide")
    assert completed(run)
    assert "cache_control" not in json.dumps([r.body for r in sim.log])
    assert run["usage"]["backbone"]["cached_prompt_tokens"] > 0


def test_a_stray_tide_api_base_never_receives_a_provider_key(sim, monkeypatch, tmp_path):
    with ProviderSimulator(keys={"openai": "SENTINEL-server-key"}) as stray:  # the server's own key
        monkeypatch.setenv("TIDE_API_BASE", stray.base_url("openai"))
        monkeypatch.setenv("TIDE_API_KEY", "SENTINEL-server-key")
        monkeypatch.setenv("TIDE_SERVED_MODEL", "gpt-4o-mini")
        backbone = evaluate(sim, monkeypatch, tmp_path, "openai", "single")
        assert completed(backbone)
        assert stray.log == []  # the hosted backbone and its judge went where they were sent
        # openai-compatible is the one backbone TIDE_API_BASE is for: it gets that server's key, no provider's.
        rc = main(["evaluate", "--setting", "workspace", "--data", WORKSPACES, "--ids", "ws-tiny", "--method",
                   "single", "--backbone", "openai-compatible", "--server-schema", "off", "--no-track", "--out",
                   str(tmp_path / "served")])
        assert rc == 0 and stray.log
    sent = json.dumps([r.headers for r in stray.log])
    assert "SENTINEL-server-key" in sent and sim.keys["openai"] not in sent and "sim-" not in sent


def test_a_stray_tide_api_base_is_named_in_a_warning(monkeypatch, caplog):
    monkeypatch.setenv("TIDE_API_BASE", "http://127.0.0.1:9/v1")
    lm = get_lm("gpt-5-mini")
    assert "api_base" not in lm.kwargs
    assert "TIDE_API_BASE is set but applies to openai-compatible servers only" in caplog.text


def test_evaluate_stops_before_the_run_on_a_refused_key(sim, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    run = evaluate(sim, monkeypatch, tmp_path, "openai", "single")
    err = capsys.readouterr().err
    assert run["rc"] == 2 and "refused the key in OPENAI_API_KEY (HTTP 401)" in err and "sk-wrong" not in err
    assert [r.kind for r in sim.log] == ["other"] and not (tmp_path / "openai-single-native" / "results.jsonl").exists()


def test_check_reports_the_model_key_variable_output_and_price(sim, capsys):
    assert main(["check", "claude-sonnet-4.5", "--api-base", sim.base_url("anthropic"), "--judge", "gpt-5-mini",
                 "--judge-api-base", sim.base_url("openai")]) == 0
    out = capsys.readouterr().out
    assert "anthropic/claude-sonnet-4-5" in out and "ANTHROPIC_API_KEY (set)" in out and "$3 in / $15 out" in out
    assert "anthropic dialect" in out and "openai/gpt-5-mini" in out and "preflight call     ok" in out
    assert sim.keys["anthropic"] not in out and len(sim.log) == 2


@pytest.mark.parametrize("backbone,env,expected", [
    ("gpt-5-mini", {"OPENAI_API_KEY": "sk-wrong"}, "refused the key in OPENAI_API_KEY (HTTP 401)"),
    ("gemini-3.5-flash", {"GEMINI_API_KEY": "wrong"}, "refused the key in GEMINI_API_KEY (HTTP 400)"),
    ("openai/gpt-9-imaginary", {}, "model openai/gpt-9-imaginary is not served there (HTTP 404)"),
    ("claude-sonnet-4.5", {"ANTHROPIC_API_KEY": ""}, "ANTHROPIC_API_KEY is not set"),
])
def test_check_fails_with_a_clear_message(sim, monkeypatch, capsys, backbone, env, expected):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    provider = resolve(backbone).rules.provider
    assert main(["check", backbone, "--api-base", sim.base_url(provider)]) == 1
    err = capsys.readouterr().err
    assert expected in err and "sk-wrong" not in err


def test_distillation_sends_through_the_rules_too(sim, monkeypatch, tmp_path):
    out = tmp_path / "programs"
    rc = main(["distill", "--setting", "workspace", "--data", WORKSPACES, "--max-cases", "2", "--backbone",
               "gpt-5-mini", "--api-base", sim.base_url("openai"), "--no-track", "--programs", str(out)])
    assert rc == 0 and refused(sim) == [] and sim.requests("openai", "template")
    assert (out / "workspace" / "gpt-5-mini" / "templates.json").exists()


# ---- the rules, one behaviour each ----

def _round_schema(dialect: str, setting: str = "workspace") -> dict:
    """The JSON schema DSPy's JSON adapter sends for one grounded round, in `dialect`."""
    from dspy.adapters.json_adapter import _get_structured_outputs_response_format
    from dspy.clients.legacy_requests import _strict_json_schema

    from tide_dspy.data.loaders import load_instances
    from tide_dspy.domains import ContextView, get_setting

    s = get_setting(setting)
    instance = load_instances(WORKSPACES if setting == "workspace" else REPOSITORIES, setting=setting)[0]
    signature = s.grounded_signature(s.round_signature, instance, ContextView.of(instance), 3, None, dialect)
    return _strict_json_schema(_get_structured_outputs_response_format(signature).model_json_schema())


@pytest.mark.parametrize("setting", ["workspace", "repository"])
def test_the_round_schema_as_written_is_what_openai_and_claude_refuse(setting):
    from tide_dspy.testing.provider_sim import Rejected, anthropic_schema, openai_strict_schema

    schema = _round_schema("full", setting)
    with pytest.raises(Rejected, match="'default' is not permitted"):
        openai_strict_schema(schema, "DSPyProgramOutputs")
    with pytest.raises(Rejected, match="not supported"):
        anthropic_schema(schema, "output_config.format.schema")


@pytest.mark.parametrize("setting", ["workspace", "repository"])
def test_the_round_schema_in_each_dialect_passes_its_providers_rules(setting):
    from tide_dspy.testing.provider_sim import anthropic_schema, openai_strict_schema

    openai_strict_schema(_round_schema("openai-strict", setting), "DSPyProgramOutputs")
    for dialect in ("anthropic", "conservative"):
        anthropic_schema(_round_schema(dialect, setting), "output_config.format.schema")
        openai_strict_schema(_round_schema(dialect, setting), "DSPyProgramOutputs")


def test_openai_strict_drops_defaults_and_keeps_bounds():
    from tide_dspy.backbones.providers import sanitize_schema

    schema = {"type": "object", "properties": {
        "why": {"type": "string", "default": "", "maxLength": 9},
        "ids": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 4}}}
    out = sanitize_schema(schema, "openai-strict")
    assert out["properties"]["why"] == {"type": "string", "maxLength": 9}
    assert out["properties"]["ids"]["maxItems"] == 4 and schema["properties"]["why"]["default"] == ""


def test_anthropic_moves_bounds_into_descriptions():
    from tide_dspy.backbones.providers import sanitize_schema

    schema = {"type": "object", "properties": {
        "body": {"type": "string", "minLength": 1, "maxLength": 400, "description": "the e-mail"},
        "ids": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 4},
        "score": {"type": "integer", "minimum": 1, "maximum": 5}}}
    props = sanitize_schema(schema, "anthropic")["properties"]
    assert props["body"] == {"type": "string", "description": "the e-mail (not empty; at most 400 characters)"}
    assert props["ids"] == {"type": "array", "items": {"type": "string"}, "minItems": 1,
                            "description": "at most 4 items"}
    assert props["score"]["description"] == "at least 1; at most 5" and "minimum" not in props["score"]


def test_enums_beyond_the_providers_limit_become_plain_strings():
    from tide_dspy.backbones.providers import sanitize_schema

    schema = {"type": "object", "properties": {"big": {"type": "string", "enum": [f"F{i}" for i in range(900)]},
                                               "small": {"type": "string", "enum": ["a", "b"]}}}
    out = sanitize_schema(schema, "openai-strict", max_enum_values=500)["properties"]
    assert "enum" not in out["big"] and "handles" in out["big"]["description"] and out["small"]["enum"] == ["a", "b"]


def test_sampling_rules_drop_what_a_provider_refuses():
    from tide_dspy.backbones.providers import ANTHROPIC_SONNET_45, GEMINI_35_FLASH, OPENAI_GPT5_MINI
    from tide_dspy.retry import sampling_config

    config = {"temperature": 1.4, "seed": 7, "rollout_id": 7}
    assert OPENAI_GPT5_MINI.sampling(config) == {"seed": 7, "rollout_id": 7}
    assert GEMINI_35_FLASH.sampling(config) == {"seed": 7, "rollout_id": 7}
    assert ANTHROPIC_SONNET_45.sampling(config) == {"temperature": 1.0, "rollout_id": 7}
    assert sampling_config(1, rollout=2, temperature=0.7, rules=OPENAI_GPT5_MINI) == {"rollout_id": 201, "seed": 201}


def test_an_unknown_model_string_gets_conservative_rules_and_a_warning(caplog):
    lm = get_lm("openai/some-new-model", temperature=0.5)
    assert lm.tide_rules.schema_dialect == "conservative" and lm.tide_rules.accepts_temperature is False
    assert lm.kwargs.get("temperature") is None
    assert "not a registered backbone" in caplog.text


def test_an_unverified_backbone_says_so(caplog):
    get_lm("qwen-3.6-flash")
    assert "qwen-3.6-flash: the model id dashscope/qwen3.6-flash is unverified" in caplog.text
    assert get_lm("qwen-3.6-flash").kwargs["extra_body"] == {"enable_thinking": False}


def test_the_retry_waits_outlast_a_minute_honour_retry_after_and_spread_with_jitter():
    """DSPy's own loop waits min(2**n, 60) exactly, so threads refused together retry together: the waits here
    differ by up to a second of jitter."""
    import tenacity

    from tide_dspy.backbones.calls import DEFAULT_RETRIES, wait_time

    def wait(attempt: int, exc: Exception) -> float:
        state = tenacity.RetryCallState(None, None, (), {})
        state.attempt_number = attempt
        state.set_exception((type(exc), exc, None))
        return wait_time(state)

    hinted = type("RateLimited", (Exception,), {"retry_after": 3.0})()
    assert all(3.0 <= wait(1, hinted) <= 4.0 for _ in range(20))  # Retry-After plus at most a second of jitter
    waits = [[wait(n, Exception("no hint")) for _ in range(20)] for n in range(1, DEFAULT_RETRIES + 1)]
    assert all(min(60, 2 ** (n - 1)) <= w <= min(60, 2 ** (n - 1)) + 1 for n, ws in enumerate(waits, 1) for w in ws)
    assert sum(min(ws) for ws in waits) > 60  # all retries together outlast a per-minute limit
    assert all(len(set(ws)) > 1 for ws in waits)  # spread, not in lockstep


def test_a_retry_after_longer_than_the_longest_wait_ends_the_call(sim, monkeypatch):
    """DSPy's own loop would sleep the hour out (dspy/clients/execution.py waits any Retry-After)."""
    slept = []
    monkeypatch.setattr("time.sleep", slept.append)
    sim.faults.append(Fault(429, count=5, retry_after="3600"))
    lm = get_lm("gpt-5-mini", api_base=sim.base_url("openai"))
    with pytest.raises(Exception, match="RateLimit|rate limit|Rate limit"):
        lm("hello", cache=False)
    assert len(sim.log) == 1 and slept == []  # not retried, not waited for: a daily quota is not waited out


def test_a_host_that_does_not_resolve_is_not_retried(monkeypatch):
    """DSPy's own loop retries a transport error whatever its cause, with a wait before each retry."""
    slept = []
    monkeypatch.setattr("time.sleep", slept.append)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    lm = get_lm("gpt-5-mini", api_base="http://tide-no-such-host.invalid/v1", num_retries=3)
    with pytest.raises(Exception) as failed:
        lm("hello", cache=False)
    assert unresolvable(failed.value) and slept == []


def test_client_errors_are_not_retried(sim):
    lm = get_lm("openai/gpt-9-imaginary", api_base=sim.base_url("openai"))
    with pytest.raises(Exception, match="does not exist"):
        lm("hello", cache=False)
    assert [r.status for r in sim.log] == [404]


# ---- the simulator refuses what the documentation forbids ----

def _post(sim, provider: str, body: dict, headers: dict | None = None, path: str | None = None) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    url = sim.root + (path or {"openai": "/openai/v1/chat/completions", "anthropic": "/anthropic/v1/messages",
                               "dashscope": "/dashscope/compatible-mode/v1/chat/completions"}[provider])
    auth = {"openai": {"Authorization": f"Bearer {sim.keys['openai']}"},
            "dashscope": {"Authorization": f"Bearer {sim.keys['dashscope']}"},
            "anthropic": {"x-api-key": sim.keys["anthropic"], "anthropic-version": "2023-06-01"},
            "gemini": {"x-goog-api-key": sim.keys["gemini"]}}[provider]
    request = urllib.request.Request(url, json.dumps(body).encode(), {**auth, **(headers or {}),
                                                                       "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


HELLO = [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize("provider,body,headers,status,message", [
    ("openai", {"model": "gpt-5-mini", "messages": HELLO, "temperature": 0.7}, {}, 400, "Only the default (1)"),
    ("openai", {"model": "gpt-5-mini", "messages": HELLO, "max_tokens": 100}, {}, 400, "max_completion_tokens"),
    ("openai", {"model": "gpt-5-mini", "messages": HELLO}, {"Authorization": "Bearer sk-wrong"}, 401,
     "Incorrect API key"),
    ("openai", {"model": "gpt-9", "messages": HELLO}, {}, 404, "does not exist"),
    ("openai", {"model": "gpt-5-mini", "messages": [{"role": "user", "content": "x" * 1_200_000}]}, {}, 400,
     "maximum context length"),
    ("anthropic", {"model": "claude-sonnet-4-5", "messages": HELLO}, {}, 400, "max_tokens: Field required"),
    ("anthropic", {"model": "claude-sonnet-4-5", "messages": HELLO, "max_tokens": 9, "seed": 1}, {}, 400,
     "seed: Extra inputs"),
    ("anthropic", {"model": "claude-sonnet-4-5", "messages": HELLO, "max_tokens": 9, "temperature": 1.5}, {}, 400,
     "range: 0..1"),
    ("anthropic", {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "x" * 760_000}],
                   "max_tokens": 16_384}, {}, 400, "exceed context limit"),
    ("anthropic", {"model": "claude-sonnet-4-5", "messages": HELLO, "max_tokens": 9,
                   "output_config": {"format": {"type": "json_schema", "schema": {
                       "type": "object", "additionalProperties": False, "required": ["a"],
                       "properties": {"a": {"type": "string", "maxLength": 5}}}}}}, {}, 400, "'maxLength' is not"),
    ("anthropic", {"model": "claude-sonnet-4-5", "messages": HELLO, "max_tokens": 9}, {"x-api-key": "wrong"}, 401,
     "invalid x-api-key"),
    ("dashscope", {"model": "qwen3.6-flash", "messages": HELLO, "enable_thinking": True}, {}, 400,
     "enable_thinking must be set to false"),
])
def test_the_simulator_refuses_what_the_provider_does(sim, provider, body, headers, status, message):
    got, error = _post(sim, provider, body, headers)
    assert got == status and message in json.dumps(error)
    assert sim.log[-1].status == status and sim.log[-1].headers  # logged, with the headers it came with


def test_the_simulator_answers_a_valid_request_in_the_providers_format(sim):
    status, body = _post(sim, "anthropic", {"model": "claude-sonnet-4-5", "messages": HELLO, "max_tokens": 9})
    assert status == 200 and body["type"] == "message" and body["content"][0]["type"] == "text"
    status, body = _post(sim, "gemini", {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]},
                         path="/gemini/v1beta/models/gemini-3.5-flash:generateContent")
    assert status == 200 and body["candidates"][0]["content"]["parts"][0]["text"]


def test_experiments_run_checks_a_hosted_backbone_before_any_run(sim, monkeypatch, tmp_path):
    from scripts import load_script

    monkeypatch.setenv("TIDE_DATA", "tests/fixtures/instances")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    with pytest.raises(ValueError, match="refused the key in OPENAI_API_KEY"):  # backbones.preflight
        load_script("run").main(["table1", "--setting", "workspace", "--backbone", "gpt-5-mini", "--api-base",
                                 sim.base_url("openai"), "--out", str(tmp_path / "table1")])
    assert [r.kind for r in sim.log] == ["other"]


def test_dashscope_is_sent_its_thinking_switch_off(sim, monkeypatch, tmp_path):
    assert completed(evaluate(sim, monkeypatch, tmp_path, "dashscope", "single", "litellm"))
    bodies = [r.body for r in sim.requests("dashscope") if r.kind != "models"]
    assert bodies and all(b.get("enable_thinking") is False for b in bodies)


# ---- the cache knows where a call goes ----

def test_answers_cached_from_one_address_are_not_replayed_for_another(sim, monkeypatch):
    """A run against the simulator, then the same backbone at another address: the second call reaches it, never
    the first one's cached answer (DSPy's cache key leaves api_base out; the cache identity puts it back)."""
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    first = get_lm("gpt-5-mini", api_base=sim.base_url("openai"), num_retries=0)
    assert "ok" in first(PREFLIGHT)[0] and len(sim.requests("openai")) == 1
    assert "ok" in first(PREFLIGHT)[0] and len(sim.requests("openai")) == 1  # the same address: replayed
    with ProviderSimulator() as other:
        monkeypatch.setenv("OPENAI_API_KEY", other.keys["openai"])
        second = get_lm("gpt-5-mini", api_base=other.base_url("openai"), num_retries=0)
        assert "ok" in second(PREFLIGHT)[0]
        assert len(other.requests("openai")) == 1 and len(sim.requests("openai")) == 1
    dead = get_lm("gpt-5-mini", api_base="http://127.0.0.1:9/v1", num_retries=0)  # nothing listens there
    with pytest.raises(Exception, match="(?i)connect|refused|transport"):
        dead(PREFLIGHT)


def test_check_gives_up_on_an_address_that_does_not_resolve_and_says_what_to_check(sim, capsys, caplog):
    assert main(["check", "gpt-5-mini", "--api-base", "http://tide-no-such-host.invalid/v1", "--num-retries", "3"]) == 1
    err = capsys.readouterr().err
    assert "its host name does not resolve" in err and "online and its DNS works" in err and "--api-base" in err
    assert not [r for r in caplog.records if "retry 1 of" in r.getMessage()]  # given up at once


def test_check_local_speaks_of_the_embedded_engine_not_litellm_or_prices():
    from tide_dspy.backbones.preflight import _describe

    text = "\n".join(_describe(get_lm("local")).lines())
    assert "LiteLLM" not in text and "price entry" not in text and "provider" not in text
    assert "tide-dspy's embedded llama.cpp engine" in text and "free: it runs on this machine" in text


@pytest.mark.parametrize("command,expected", [
    ([sys.executable, "-m", "tide_dspy.cli.main", "provider-sim", "--port", "0"],
     ["--backbone gpt-5-mini: --api-base http://127.0.0.1:", "OPENAI_API_KEY=sim-openai-key",
      "models: openai/gpt-5-mini", "--judge-api-base", "tide check gpt-5-mini"]),
    ([sys.executable, "experiments/stub_server.py", "--port", "0"],
     ["--backbone openai-compatible --api-base http://127.0.0.1:", "key variable: TIDE_API_KEY",
      "model: stub-model"]),
], ids=["provider_sim", "stub_server"])
def test_the_simulator_and_the_stub_start_from_a_shell_and_say_how_to_use_them(command, expected):
    proc = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("Ctrl-C stops it."):
                break
        printed = "".join(lines)
        assert all(e in printed for e in expected), printed
        base = re.search(r"--api-base (http://127\.0\.0\.1:\d+/\S+)", printed).group(1)
        with urllib.request.urlopen(base + "/models", timeout=10) as answer:  # it serves at the address it names
            assert answer.status in (200, 401)
    except urllib.error.HTTPError as exc:
        assert exc.code == 401  # the simulator wants its key
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0


def test_the_readme_python_snippet_runs_from_any_folder_and_warns_before_a_hosted_scan(sim, monkeypatch, tmp_path,
                                                                                      caplog):
    import tide_dspy

    monkeypatch.chdir(tmp_path)  # nothing of the checkout here
    monkeypatch.setenv("TIDE_DATA", str(Path(__file__).parent / "fixtures" / "instances"))
    instance = tide_dspy.load_instances(tide_dspy.data_path("repository"), split="test")[0]
    lm = tide_dspy.get_lm("gpt-5-mini", api_base=sim.base_url("openai"))
    program = tide_dspy.shipped_program("repository", lm)
    assert "no compiled program or template library is shipped for backbone 'gpt-5-mini'" in program.tide_source
    compiled = tide_dspy.shipped_program("repository", "local")  # the 1.5B's compiled program scans first
    assert compiled.tide_source.startswith("shipped program") and compiled.scanner is not None
    compiled.max_rounds = 1
    with dspy.context(lm=lm):
        prediction = compiled(instance)
    [warning] = [r.getMessage() for r in caplog.records if "scans first" in r.getMessage()]
    assert f"{len(instance.artifacts)} call(s) on gpt-5-mini" in warning and "--no-scan" in warning
    assert len(sim.requests("openai", "scan")) == len(instance.artifacts) and prediction.rounds


@pytest.mark.parametrize("backbone", ["gpt-5-mini", "openai-compatible"])
def test_a_module_holding_a_provider_lm_deep_copies_without_a_warning(sim, caplog, backbone):
    from tide_dspy.metrics.judges import LLMJudge

    lm = get_lm(backbone, api_base=sim.base_url("openai"))
    judge = LLMJudge(lm)
    copied = judge.deepcopy()  # what DSPy's Refine and the optimizers do to a module
    assert copied.lm is not lm and copied.lm.model == lm.model
    assert not [r for r in caplog.records if "Failed to deep copy" in r.getMessage()]
