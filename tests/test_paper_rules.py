"""The paper's rules are the defaults, captured at the provider simulator: a round prompt shows each template's
pattern and evidence flow but not its name, the repository prompt names the repository, and TIDE stops at the
first round that returns no finding (a round that only re-finds does not stop it). Each departure is an option
that does what it says."""

from __future__ import annotations

import json

import pytest

from tide_dspy.cli.main import main
from tide_dspy.schemas import Template
from tide_dspy.templates import TemplateLibrary
from tide_dspy.testing.provider_sim import Fault, ProviderSimulator

WORKSPACES = "tests/fixtures/instances/workspace/workspaces.jsonl"
REPOSITORIES = "tests/fixtures/instances/repository/instances.jsonl"
INSTANCE = {"workspace": "ws-tiny", "repository": "tiny__repo__multi-01"}
NAME = "SENTINEL-TEMPLATE-NAME"


@pytest.fixture
def sim(monkeypatch):
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "TIDE_API_BASE", "TIDE_TEMPERATURE", "TIDE_MAX_TOKENS"):
        monkeypatch.delenv(name, raising=False)
    with ProviderSimulator() as simulator:
        monkeypatch.setenv("OPENAI_API_KEY", simulator.keys["openai"])
        yield simulator


def library(tmp_path, setting: str):
    path = tmp_path / f"{setting}-templates.json"
    TemplateLibrary(templates=[Template(id=f"t{i}", name=f"{NAME}-{i}", pattern=f"pattern number {i}",
                                        evidence_flow=[f"flow step {i}"], setting=setting) for i in (1, 2)],
                    setting=setting).save(path)
    return path


def run_tide(sim, tmp_path, setting: str, *extra: str) -> dict:
    """One `tide evaluate --method tide` at the paper's T and k, through the simulator; the instance's row."""
    out = tmp_path / f"out-{setting}-{len(list(tmp_path.iterdir()))}"
    rc = main(["evaluate", "--setting", setting, "--data", WORKSPACES if setting == "workspace" else REPOSITORIES,
               "--ids", INSTANCE[setting], "--method", "tide", "--templates", str(library(tmp_path, setting)),
               "--backbone", "gpt-5-mini", "--judge", "proxy", "--api-base", sim.base_url("openai"), "--no-track",
               "--fresh", "--out", str(out), *extra])
    assert rc == 0
    return json.loads((out / "results.jsonl").read_text().splitlines()[0])


@pytest.mark.parametrize("setting", ["workspace", "repository"])
def test_a_round_prompt_shows_patterns_and_flows_but_no_template_name(sim, tmp_path, setting):
    row = run_tide(sim, tmp_path, setting)
    prompts = [r.prompt for r in sim.requests("openai", "findings")]
    rounds = {"workspace": 10, "repository": 3}[setting]  # the paper's T; the simulator finds something new each round
    assert len(row["rounds"]) == len(prompts) == rounds
    assert all("pattern number 1" in p and "flow step 2" in p and "[t1]" in p for p in prompts)
    assert not any(NAME in p for p in prompts)


def test_show_template_names_shows_them(sim, tmp_path):
    run_tide(sim, tmp_path, "workspace", "--rounds", "1", "--show-template-names")
    assert f"[t1] {NAME}-1" in sim.requests("openai", "findings")[0].prompt


def test_the_repository_prompt_names_the_repository(sim, tmp_path):
    run_tide(sim, tmp_path, "repository")
    prompts = [r.prompt for r in sim.requests("openai", "findings")]
    assert prompts and all("tiny/repo" in p for p in prompts)


def test_tide_stops_at_the_first_empty_batch_not_at_a_round_that_only_refinds(sim, tmp_path):
    sim.faults += [Fault("repeat", kind="findings", after=1), Fault("empty", kind="findings", after=2)]
    row = run_tide(sim, tmp_path, "workspace")
    assert [(r["new"], r["rediscovered"]) for r in row["rounds"]] == [(1, 0), (0, 1), (0, 0)]
    assert len(sim.requests("openai", "findings")) == 3


def test_stop_on_no_new_stops_at_a_round_that_only_refinds(sim, tmp_path):
    sim.faults += [Fault("repeat", kind="findings", after=1)]
    row = run_tide(sim, tmp_path, "workspace", "--stop-on", "no-new")
    assert [(r["new"], r["rediscovered"]) for r in row["rounds"]] == [(1, 0), (0, 1)]


def test_the_rules_are_recorded_with_the_run(sim, tmp_path):
    out = tmp_path / "recorded"
    assert main(["evaluate", "--setting", "workspace", "--data", WORKSPACES, "--ids", "ws-tiny", "--method", "multi",
                 "--rounds", "2", "--backbone", "gpt-5-mini", "--judge", "proxy", "--api-base",
                 sim.base_url("openai"), "--no-track", "--out", str(out), "--multi-dedup"]) == 0
    program = json.loads((out / "config.json").read_text())["program"]
    assert program["dedup_pool"] is True and program["template_names"] is False
