"""End to end on the embedded backbone: TIDE with the 0.5B model, 2 rounds, on the tiny fixture repository.

Runs real llama.cpp inference (about a minute on 2 free cores). Deselect with `-m "not local"`.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import dspy
import pytest

from tide_dspy.backbones import get_lm
from tide_dspy.backbones.weights import LOCAL_MODELS, WeightsError, assemble
from tide_dspy.data import load_instances
from tide_dspy.discovery import TIDE, DiscoveryState

pytestmark = [
    pytest.mark.local,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                       reason="llama_cpp is not importable: install the embedded backbone with scripts/install.sh"),
]


@pytest.fixture(scope="module")
def small_lm():
    try:
        assemble(LOCAL_MODELS["qwen2.5-coder-0.5b-instruct"])
    except WeightsError as exc:
        pytest.skip(f"0.5B weights unavailable: {exc}")
    return get_lm("local-small", max_tokens=384, n_ctx=8192, num_threads=2, cache=False)


@pytest.fixture(scope="module")
def repository_fixture():
    return load_instances(
        Path(__file__).parent / "fixtures" / "instances" / "repository" / "instances.jsonl", setting="repository"
    )[0]


def test_tide_on_local_small_writes_grounded_findings_and_reuses_the_prefix(small_lm, repository_fixture):
    lm = small_lm.copy()
    lm.engine.require_items = True  # under the grammar the 0.5B otherwise tends to answer []
    program = TIDE("repository", max_rounds=2, per_round=1, max_attempts=2)
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        pred = program(repository_fixture)
        rounds = list(pred.rounds)
        if len(rounds) == 1:  # round 1 found something that round 2 would only repeat: run round 2 anyway
            _, record = program.run_round(repository_fixture, DiscoveryState(tuple(pred.findings)), 2, 1)
            rounds.append(record)

    assert [r.round for r in rounds] == [1, 2]
    assert all(r.lm_calls >= 1 and r.input_tokens and r.output_tokens for r in rounds)
    assert not any(r.failed for r in rounds), [r.error for r in rounds]
    # The model proposed something in round 1 (hygiene cannot make a finding out of an empty answer), and under the
    # grounded grammar it named only handles that exist (nothing had to be dropped).
    assert rounds[0].new >= 1 and pred.findings
    assert sum(r.dropped_evidence for r in rounds) == 0
    calls = lm.engine.calls
    assert calls[-1].constrained and calls[-1].grammar_fallbacks is not None
    # Round 2 re-evaluated only the tail after the static context: most of its prompt came from the KV cache.
    assert calls[-1].reused_tokens > 0.8 * calls[-1].prompt_tokens


def test_check_first_grammar_writes_what_full_vocabulary_masking_writes(small_lm):
    from dspy.lm15 import Config, Message, Request

    schema = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array",
              "items": {"type": "string", "enum": ["bug", "docs", "perf"]}, "maxItems": 2}},
              "required": ["name", "tags"]}
    request = Request(model="m", system="Answer in JSON.", messages=(Message.user(
        "Label this issue: 'sorting a list of 10k items takes 9 seconds'."),),
        config=Config(max_tokens=40, temperature=0.0, response_format={"type": "json_schema", "schema": schema}))
    texts = []
    for fast in (True, False):
        engine = get_lm("local-small", max_tokens=40, n_ctx=2048, num_threads=2, cache=False, fast_grammar=fast).engine
        texts.append(engine.complete(request).message.text)
    assert texts[0] == texts[1]
    assert set(json.loads(texts[0])) == {"name", "tags"}


def test_grammar_sampler_reports_the_models_own_digit_probabilities(small_lm):
    from dspy.lm15 import Config, Message, Request

    schema = {"type": "object", "properties": {"rating": {"type": "integer", "enum": list(range(10))}},
              "required": ["rating"]}
    request = Request(model="m", system="Answer in JSON.", messages=(Message.user(
        "Rate from 0 to 9 how likely `def mean(xs): return sum(xs) / len(xs)` fails on some input."),),
        config=Config(max_tokens=12, temperature=0.0, logprobs=10,
                      response_format={"type": "json_schema", "schema": schema}))
    response = small_lm.engine.complete(request)
    rating = next(step for step in response.logprobs if step.token.strip().isdigit())
    alternatives = [top for top in rating.top if top.token.strip().isdigit()]
    assert str(json.loads(response.message.text)["rating"]) == rating.token.strip()
    # The record is the distribution before the grammar: several digits carry weight, not only the one written.
    assert len(alternatives) >= 2 and all(top.logprob < 0 for top in alternatives)
