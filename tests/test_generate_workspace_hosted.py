"""`tide data generate-workspace` on hosted backbones, through the provider simulator: full-size workspaces that
pass the set checker, every request accepted, malformed answers retried and recorded, a failed workspace skipped,
and a stopped run resumed. The simulator writes each stage's answer by rule from its inputs
(tide_dspy/testing/generation_answers.py): the wire formats, stages, checks and assembly are real, the prose is not.
"""

from __future__ import annotations

import json

import pytest

from tide_dspy.cli.main import main
from tide_dspy.data.set_check import PAPER_RANGES, check_records, check_set
from tide_dspy.testing.provider_sim import Fault, ProviderSimulator

KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
BACKBONE = {"openai": "gpt-5-mini", "anthropic": "claude-sonnet-4.5"}


@pytest.fixture
def sim(monkeypatch):
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL", "TIDE_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    with ProviderSimulator() as simulator:
        for provider, env in KEY_ENV.items():
            monkeypatch.setenv(env, simulator.keys[provider])
        yield simulator


def generate(sim, monkeypatch, out, *extra: str, provider: str = "openai", path: str = "native") -> int:
    args = ["data", "generate-workspace", "--backbone", BACKBONE[provider], "--out", str(out), *extra]
    if path == "native":
        args += ["--api-base", sim.base_url(provider)]
    else:  # DSPy sends the calls through LiteLLM when the provider's own base variable is set
        monkeypatch.setenv(f"{provider.upper()}_API_BASE", sim.litellm_base(provider))
    return main(args)


def records(out) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()]


def run_log(out) -> dict:
    return json.loads(out.with_name(out.stem + ".generation.json").read_text())


@pytest.mark.paper  # whole workspaces generated through two providers' routes: the paper lane
@pytest.mark.parametrize("provider,path", [("openai", "native"), ("anthropic", "litellm")])
def test_generated_workspaces_pass_the_set_checker(sim, monkeypatch, tmp_path, capsys, provider, path):
    out = tmp_path / "generated.jsonl"
    assert generate(sim, monkeypatch, out, "--n", "2", "--train", "1", "--seed", "5", provider=provider,
                    path=path) == 0
    written = records(out)
    assert [r["split"] for r in written] == ["train", "test"]
    # counts at the paper's ranges, ids, evidence, gold actions, distractor share, both splits, near copies
    assert check_set(written, "workspace") == [] and check_records(written, "workspace", ranges=PAPER_RANGES) == []
    assert main(["data", "check", str(out)]) == 0
    assert sim.rejected() == []
    for record in written:
        assert 88 <= len(record["artifacts"]) <= 113 and 4 <= len(record["problems"]) <= 6
        assert len({p["category"] for p in record["problems"]}) == len(record["problems"])
    log = run_log(out)
    assert [w["status"] for w in log["workspaces"]] == ["written", "written"]
    stages = [s["stage"] for s in log["workspaces"][0]["stages"]]
    n = len(written[0]["problems"])
    assert stages[:4] == ["persona", "world model", "bottlenecks", "action library"]
    for kind in ("gold action", "evidence plan", "evidence review"):
        assert sorted(s for s in stages if s.startswith(kind)) == sorted(f"{kind} {k}/{n}" for k in range(1, n + 1))
    assert sum(s.startswith("evidence ") and " item " in s for s in stages) == sum(
        len(p["evidence"]) for p in written[0]["problems"])
    assert sum(w["lm_usage"]["calls"] for w in log["workspaces"]) == len(sim.requests(provider, "generation"))
    printed = capsys.readouterr().out
    assert "workspace 1/2: persona ok" in printed and "workspace 2/2: evidence review 1/" in printed
    assert f"wrote 2 workspace(s) to {out}" in printed


def test_a_malformed_answer_is_sampled_again_and_recorded(sim, monkeypatch, tmp_path):
    # Two prose answers: DSPy's own JSON fallback takes the second, so the stage's first attempt fails as a whole.
    sim.faults.append(Fault("prose", count=2, kind="generation"))
    out = tmp_path / "generated.jsonl"
    assert generate(sim, monkeypatch, out, "--no-check") == 0
    persona = run_log(out)["workspaces"][0]["stages"][0]
    assert persona["stage"] == "persona" and persona["attempts"] == 2
    assert persona["errors"][0].startswith("AdapterParseError")
    assert check_records(records(out), "workspace", ranges=PAPER_RANGES) == []


def test_a_failing_workspace_is_skipped_and_a_stopped_run_resumes(sim, monkeypatch, tmp_path, capsys):
    out = tmp_path / "generated.jsonl"
    sim.faults.append(Fault("prose", count=6, kind="generation"))  # every attempt at the first stage
    assert generate(sim, monkeypatch, out, "--n", "1", "--no-check") == 1
    assert out.read_text() == ""
    first = run_log(out)["workspaces"][0]
    assert first["status"] == "skipped" and first["errors"][0].startswith("persona: no usable output after 3")
    assert "skipped workspace(s) 1" in capsys.readouterr().out

    assert generate(sim, monkeypatch, out, "--n", "1", "--resume", "--no-check") == 0  # the skipped one again
    assert [(w["number"], w["status"]) for w in run_log(out)["workspaces"]] == [(1, "skipped"), (1, "written")]
    capsys.readouterr()

    asked = len(sim.requests("openai", "generation"))
    assert generate(sim, monkeypatch, out, "--n", "2", "--resume", "--no-check") == 0
    personas = [r for r in sim.requests("openai", "generation")[asked:] if "role_hint" in r.prompt]
    assert len(personas) == 1  # workspace 1 was not asked again: one persona request, workspace 2's
    assert len(records(out)) == 2 and check_records(records(out), "workspace", ranges=PAPER_RANGES) == []
    printed = capsys.readouterr().out
    assert "wrote 1 workspace(s)" in printed and "(resumed: 1 written before)" in printed

    assert generate(sim, monkeypatch, out, "--n", "3", "--resume", "--seed", "9", "--no-check") == 2
    assert "was run with --seed 0, not 9" in capsys.readouterr().out
    assert generate(sim, monkeypatch, out, "--n", "3", "--no-check") == 2
    assert "already holds workspaces: pass --resume" in capsys.readouterr().out
    assert generate(sim, monkeypatch, out, "--n", "3", "--train", "4", "--resume", "--no-check") == 2
    assert "--train 4: the train workspaces are some of the --n 3" in capsys.readouterr().out


def test_help_warns_that_a_small_local_model_writes_poor_workspaces(capsys):
    with pytest.raises(SystemExit):
        main(["data", "generate-workspace", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "A small local model" in text and "writes poor workspaces" in text
    assert "--backbone claude-sonnet-4.5 with ANTHROPIC_API_KEY" in text
    assert "--backbone openai-compatible --api-base URL" in text
    assert "fastino-ai/PROBE_benchmark" in text
