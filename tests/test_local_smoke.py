"""End to end on the embedded backbone: TIDE with the 0.5B model, 2 rounds, on a small repository instance.

Runs real llama.cpp inference (about a minute on 2 free cores). Deselect with `-m "not local"`.
"""

from __future__ import annotations

import importlib.util

import dspy
import pytest

from tide_dspy.backbones import get_lm
from tide_dspy.backbones.weights import LOCAL_MODELS, WeightsError, assemble
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


def test_tide_on_local_small_returns_findings_with_known_evidence(small_lm, repository_instance):
    program = TIDE("repository", max_rounds=2, per_round=2, max_retries=1)
    known = set(repository_instance.artifact_ids)
    with dspy.context(lm=small_lm, adapter=dspy.JSONAdapter()):
        pred = program(repository_instance)
        rounds = list(pred.rounds)
        if len(rounds) == 1:
            # TIDE stops after a round with nothing new (the 0.5B often answers []); run its second round
            # anyway, on the same state, so the round-2 path and the prefix reuse are exercised.
            _, record = program.run_round(repository_instance, DiscoveryState(tuple(pred.findings)), 2,
                                          program.per_round)
            rounds.append(record)

    assert [r.round for r in rounds] == [1, 2]
    assert all(r.lm_calls >= 1 and r.input_tokens for r in rounds)
    assert not any(r.failed for r in rounds), [r.error for r in rounds]  # the schema grammar makes JSON parse
    assert all(e in known for f in pred.findings for e in f.evidence)
    calls = small_lm.engine.calls
    # Round 2 re-evaluated only the tail after the static context: most of its prompt came from the KV cache.
    assert calls[-1].reused_tokens > 0.8 * calls[-1].prompt_tokens
