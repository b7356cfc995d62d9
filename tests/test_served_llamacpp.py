"""A served backbone for real: llama-cpp-python's OpenAI-compatible server with the 0.5B model on 127.0.0.1.

The fixture starts `python -m llama_cpp.server` (the `serve` extra) and stops it afterwards. Then the grounded
output schema (an enum and integer bounds) goes out in the form this server accepts (`--server-schema llama.cpp`:
`{"type": "json_object", "schema": ...}`), and `tide evaluate --backbone openai-compatible --workers 2 --limit 2`
runs on tests/fixtures/tiny_workspace.jsonl. Real inference: a few minutes on 2 shared cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Literal

import dspy
import pytest
from pydantic import BaseModel, Field

from scripts import load_script
from tide_dspy.backbones import adapter_for, get_lm
from tide_dspy.backbones.weights import LOCAL_MODELS, WeightsError, assemble

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "tiny_workspace.jsonl"
STARTUP_SECONDS = 180

pytestmark = [
    pytest.mark.local,
    pytest.mark.timeout(900),
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                       reason="llama_cpp is not importable: install the embedded backbone with scripts/install.sh"),
    pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("uvicorn", "fastapi", "sse_starlette",
                                                                         "starlette_context", "pydantic_settings")),
                       reason="llama_cpp.server's dependencies are missing: install the `serve` extra "
                              "(scripts/install.sh does)"),
]


services = load_script("services")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    try:
        model = assemble(LOCAL_MODELS["qwen2.5-coder-0.5b-instruct"])
    except WeightsError as exc:
        pytest.skip(f"0.5B weights unavailable: {exc}")
    port = services.free_port()
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
         "--n_ctx", "4096", "--n_threads", "2"],
        stdout=log, stderr=subprocess.STDOUT, preexec_fn=lambda: os.nice(10))
    api_base = f"http://127.0.0.1:{port}/v1"
    try:
        try:
            services.wait_until_answering(proc, api_base + "/models", STARTUP_SECONDS, log_path, "llama_cpp.server")
        except RuntimeError as exc:
            pytest.fail(str(exc))
        yield {"api_base": api_base, "log": log_path}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _statuses(log_path: Path) -> list[int]:
    return [int(s) for s in re.findall(r'"POST /v1/chat/completions HTTP/1.1" (\d{3})', log_path.read_text())]


class Pick(BaseModel):
    evidence_id: Literal["E7", "E9"]
    urgency: int = Field(ge=1, le=5)


class Verdict(dspy.Signature):
    """Which email is about the broken printer, and how urgent is it (1 to 5)?"""

    emails: str = dspy.InputField()
    verdict: Pick = dspy.OutputField()


def test_the_server_takes_the_schema_and_keeps_enums_and_bounds(server):
    lm = get_lm("openai-compatible", api_base=server["api_base"], server_schema="llama.cpp", max_tokens=40,
                temperature=0.0, cache=False)
    with dspy.context(lm=lm, adapter=adapter_for(lm)):
        out = dspy.Predict(Verdict)(emails="E7: the printer on floor 2 is broken\nE9: lunch menu").verdict
    assert out.evidence_id in ("E7", "E9") and 1 <= out.urgency <= 5
    sent = lm.history[-1]
    assert sent["usage"]["prompt_tokens"] > 0
    assert _statuses(server["log"]) and set(_statuses(server["log"])) == {200}


def test_tide_evaluate_with_two_workers_on_the_served_model(server, tmp_path):
    from tide_dspy.cli.main import main

    out = tmp_path / "served"
    code = main(["evaluate", "--method", "iter", "--setting", "workspace", "--split", "test", "--data", str(FIXTURE),
                 "--backbone", "openai-compatible", "--api-base", server["api_base"], "--server-schema", "llama.cpp",
                 "--workers", "2", "--limit", "2", "--rounds", "1", "--max-tokens", "200", "--no-track",
                 "--judge", "proxy", "--out", str(out)])
    assert code == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["instance_id"] for r in rows) == ["tiny-ws-1", "tiny-ws-2"]
    assert all(r["error"] is None for r in rows), [r["error"] for r in rows]
    assert all(not rd["failed"] for r in rows for rd in r["rounds"])  # each answer parsed under the schema
    usage = json.loads((out / "lm_usage.json").read_text())["backbone"]
    assert usage["calls"] >= 2 and usage["prompt_tokens"] > 500
    assert set(_statuses(server["log"])) == {200}
