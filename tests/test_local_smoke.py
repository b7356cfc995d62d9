"""End to end on the embedded backbone: TIDE with the 0.5B model, 2 rounds, on a small repository instance.

Runs real llama.cpp inference (a few minutes on 2 cores). Deselect with `-m "not local"`.
"""

from __future__ import annotations

import importlib.util

import dspy
import pytest

from tide_dspy.backbones import get_lm
from tide_dspy.backbones.weights import LOCAL_MODELS, WeightsError, assemble
from tide_dspy.discovery import TIDE

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
    return get_lm("local-small", max_tokens=512, n_ctx=8192, cache=False)


def test_tide_on_local_small_returns_findings_with_known_evidence(small_lm, repository_instance):
    program = TIDE("repository", max_rounds=2, per_round=2, max_retries=1)
    with dspy.context(lm=small_lm, adapter=dspy.JSONAdapter()):
        pred = program(repository_instance)

    assert 1 <= len(pred.rounds) <= 2
    assert all(r.lm_calls >= 1 and r.input_tokens for r in pred.rounds)
    assert not all(r.failed for r in pred.rounds), [r.error for r in pred.rounds]
    known = set(repository_instance.artifact_ids)
    assert all(e in known for f in pred.findings for e in f.evidence)
    # The second round reused the first round's prompt prefix from llama.cpp's KV cache.
    if len(pred.rounds) == 2:
        firsts = small_lm.engine.calls
        assert max(c.reused_tokens for c in firsts[1:]) > 0.5 * firsts[0].prompt_tokens
