"""`tide compile --prompt-model`: another backbone proposes and reflects on instructions (MIPROv2's and COPRO's
prompt_model, GEPA's reflection_lm), against the provider simulator. Its calls are counted and priced in
lm_usage.json, and the compile's budget bounds them."""

from __future__ import annotations

import json

import pytest
from routed_lm import FIXTURE_DATA

from tide_dspy.cli.main import main
from tide_dspy.testing.provider_sim import ProviderSimulator

TINY = {
    "miprov2": ["init.auto=null", "init.num_candidates=2", "compile.num_trials=1"],
    "copro": ["init.breadth=2", "init.depth=1"],
    "gepa": ["init.max_metric_calls=6"],
}


@pytest.fixture
def sim(monkeypatch):
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL", "TIDE_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    with ProviderSimulator() as simulator:
        monkeypatch.setenv("OPENAI_API_KEY", simulator.keys["openai"])
        monkeypatch.setenv("ANTHROPIC_API_KEY", simulator.keys["anthropic"])
        yield simulator


def compile_with_proposer(sim, tmp_path, optimizer: str, *extra: str) -> int:
    options = [arg for option in TINY[optimizer] for arg in ("--opt", option)]
    return main(["compile", "--setting", "workspace", "--data", str(FIXTURE_DATA / "workspace"), "--rounds", "2",
                 "--templates", "programs/workspace/local/templates.json", "--backbone", "gpt-5-mini",
                 "--api-base", sim.base_url("openai"), "--prompt-model", "claude-sonnet-4.5",
                 "--prompt-api-base", sim.base_url("anthropic"), "--optimizer", optimizer, *options,
                 "--programs", str(tmp_path / "programs"), "--no-track", *extra])


def generated(sim, provider: str) -> list:
    """The provider's requests for an answer, the preflight call left out (its first)."""
    return [r for r in sim.requests(provider) if r.kind != "models"][1:]


@pytest.mark.parametrize("optimizer", sorted(TINY))
def test_the_proposer_proposes_and_its_calls_are_counted_and_priced(sim, tmp_path, optimizer):
    assert compile_with_proposer(sim, tmp_path, optimizer) == 0
    assert [r.error for r in sim.rejected()] == []
    proposals = generated(sim, "anthropic")
    assert proposals  # the proposer was asked
    assert not [r for r in generated(sim, "openai") if r.kind == "other"]  # and the backbone proposed nothing
    usage = json.loads((tmp_path / "programs/workspace/gpt-5-mini/compile/lm_usage.json").read_text())
    assert usage["proposer"]["model"] == "anthropic/claude-sonnet-4-5"
    assert usage["proposer"]["calls"] == len(proposals) and usage["proposer"]["cost_usd"] > 0
    assert usage["backbone"]["model"] == "openai/gpt-5-mini"


def test_the_proposers_calls_spend_the_compiles_budget(sim, tmp_path, capsys):
    """COPRO asks the proposer for candidates before it scores any: with a bound of one call, the proposal spends it
    and the search stops before its first evaluation."""
    assert compile_with_proposer(sim, tmp_path, "copro", "--max-calls", "1") == 1
    err = capsys.readouterr().err
    assert "stopped early: budget of 1 LM calls reached" in err and "no candidate was scored" in err
    assert generated(sim, "anthropic")


def test_a_prompt_api_base_needs_a_prompt_model(capsys):
    assert main(["compile", "--setting", "workspace", "--prompt-api-base", "http://127.0.0.1:9/v1", "--no-track"]) != 0
    assert "--prompt-api-base needs --prompt-model BACKBONE" in capsys.readouterr().err
