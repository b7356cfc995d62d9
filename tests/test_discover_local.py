"""`tide discover repo` end to end on the embedded 0.5B model and the self-written sample repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tide_dspy.cli.main import main

SAMPLE_REPO = Path(__file__).resolve().parents[1] / "examples" / "sample_repo"

pytestmark = pytest.mark.local


@pytest.fixture
def local_small_weights():
    pytest.importorskip("llama_cpp", reason="the embedded backbone needs the `local` extra (llama-cpp-python)")
    from tide_dspy.backbones.llamacpp import LOCAL_MODELS
    from tide_dspy.backbones.weights import WeightsError, assemble

    try:
        assemble(LOCAL_MODELS["qwen2.5-coder-0.5b-instruct"])
    except WeightsError as exc:
        pytest.skip(str(exc))


def test_discover_sample_repo_on_the_embedded_model(local_small_weights, tmp_path, capsys):
    sources = {p: p.read_text() for p in SAMPLE_REPO.rglob("*.py")}
    out = tmp_path / "report"
    # --max-tokens bounds each answer, so the test's time is bounded on a slow or shared CPU.
    rc = main(["discover", "repo", str(SAMPLE_REPO), "--backbone", "local-small", "--rounds", "2",
               "--max-tokens", "384", "--out", str(out)])
    printed = capsys.readouterr().out
    print(printed)  # visible with -s: the progress lines and the summary
    assert rc == 0
    assert "[round 1]" in printed and "done: " in printed
    run = json.loads((out / "run.json").read_text())
    summary = run["summary"]
    # What the model did: every round ran and answered (none failed) and the tokens of each call were counted
    # (prefix reuse is asserted by test_local_smoke.py, which sees the engine's calls).
    assert 1 <= summary["rounds"] <= 2 and summary["failed_rounds"] == 0
    assert summary["lm_calls"] >= summary["rounds"]
    assert summary["input_tokens"] > 0 and summary["output_tokens"] > 0
    rounds = run["rounds"]
    assert all(r["input_tokens"] and r["output_tokens"] for r in rounds)
    assert summary["findings"] == len(json.loads((out / "findings.json").read_text())["findings"])
    assert (out / "report.md").read_text().startswith("# TIDE discover report")
    assert {p: p.read_text() for p in sources} == sources  # nothing was applied
