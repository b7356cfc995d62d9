"""`python experiments/run.py all` at the paper's settings (T=10, k=1 on workspaces; T=3, k=3 on repositories), on
gpt-5-mini as backbone and judge, pointed at the provider simulator: two runs on one instance write every table
and figure. The template libraries that transfer, citations and poolsize read are distilled first, against the
simulator too. Its dry run prints the estimate and sends nothing. The `paper` lane."""

from __future__ import annotations

import csv
import json

import pytest
from routed_lm import FIXTURE_DATA

from scripts import load_script
from tide_dspy.cli.main import main as tide
from tide_dspy.testing.provider_sim import ProviderSimulator

pytestmark = pytest.mark.paper

INSTANCE = {"workspace": "ws-tiny", "repository": "tiny__repo__multi-01"}
# What run.py all writes: every table (CSV, and Markdown for the tables), every figure, and each experiment's meta.
WRITTEN = ["table1.csv", "table1.md", "table1.png", "table1_hygiene.csv", "steps.csv", "steps.png", "budget.csv",
           "budget.png", "rounds.csv", "rounds.png", "demos.csv", "demos.md", "demos.png", "transfer.csv",
           "transfer.md", "transfer.png", "citations.csv", "citations.png", "poolsize.csv", "poolsize.png",
           "per_instance.csv", "per_instance.png",
           *[f"meta-{e}.json" for e in ("table1", "steps", "budget", "rounds", "demos", "transfer", "citations",
                                        "poolsize", "instances")]]


@pytest.fixture
def sim(monkeypatch, tmp_path):
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "TIDE_API_BASE", "TIDE_TEMPERATURE", "TIDE_MAX_TOKENS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TIDE_DATA", str(FIXTURE_DATA))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    with ProviderSimulator() as simulator:
        monkeypatch.setenv("OPENAI_API_KEY", simulator.keys["openai"])
        yield simulator


def hosted(sim) -> list[str]:
    return ["--backbone", "gpt-5-mini", "--judge", "gpt-5-mini", "--api-base", sim.base_url("openai"),
            "--judge-api-base", sim.base_url("openai")]


def rows(path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("setting", ["workspace", "repository"])
def test_run_py_all_writes_every_table_and_figure_at_the_papers_settings(sim, tmp_path, capsys, setting):
    programs, out = tmp_path / "programs", tmp_path / "out"
    assert tide(["distill", "--setting", setting, "--backbone", "gpt-5-mini", "--api-base", sim.base_url("openai"),
                 "--programs", str(programs), "--no-track"]) == 0
    assert (programs / setting / "gpt-5-mini" / "templates.json").exists()
    run = load_script("run")
    common = ["all", "--setting", setting, "--runs", "2", "--instances", INSTANCE[setting], *hosted(sim),
              "--programs", str(programs), "--out", str(out)]

    sent = len(sim.log)
    assert run.main([*common, "--dry-run", "--no-check"]) == 0
    assert "total: $" in capsys.readouterr().out and len(sim.log) == sent and not out.exists()

    assert run.main(common) == 0
    assert [f"{r.kind} {r.status}: {r.error}" for r in sim.rejected()] == []
    missing = [name for name in WRITTEN if not (out / name).is_file() or not (out / name).stat().st_size]
    assert missing == []
    meta = json.loads((out / "meta-table1.json").read_text())
    rounds, per_round = {"workspace": (10, 1), "repository": (3, 3)}[setting]
    tide_row = json.loads((out / "raw" / "tide" / "run1.jsonl").read_text().splitlines()[0])
    assert meta["instances"] == [INSTANCE[setting]] and len(tide_row["rounds"]) <= rounds
    assert max(len([f for f in tide_row["findings"] if f["round"] == t]) for t in range(1, rounds + 1)) <= per_round
    table1 = {r["method"]: r for r in rows(out / "table1.csv")}
    assert table1["tide"]["runs"] == "2" and float(table1["tide"]["retrieval_coverage"]) > 0
    transfer = rows(out / "transfer.csv")
    assert {"retrieval_coverage", "retrieval_f1"} <= set(transfer[0])
    assert [(r["inference"], r["templates_from"]) for r in transfer if r["method"] == "tide"] == [
        ("gpt-5-mini", "gpt-5-mini")]


def test_table1_with_two_runs_writes_intervals_paired_tests_and_cost(sim, tmp_path):
    """Table 1 on the two test workspaces, 2 runs, gpt-5-mini as backbone and PROBE judge: every method's cell has
    its 95% interval, TIDE has a paired test against every other method (with p, in Markdown and CSV), each
    method its calls and cost per matched gold problem, and the figure draws the intervals."""
    out = tmp_path / "out"
    run = load_script("run")
    assert run.main(["table1", "--setting", "workspace", "--runs", "2", *hosted(sim), "--templates",
                     "programs/workspace/local/templates.json", "--out", str(out)]) == 0
    assert [f"{r.kind} {r.status}: {r.error}" for r in sim.rejected()] == []
    table = {r["method"]: r for r in rows(out / "table1.csv")}
    assert list(table) == ["random", "first-listed", "lexical-join", "tfidf", "single", "multi", "iter", "tide"]
    for r in table.values():
        for c in ("retrieval", "identification", "resolution"):
            low, mean, high = (float(r[f"{c}_f1{x}"]) for x in ("_ci_low", "", "_ci_high"))
            assert low <= mean <= high and r["instances"] == "2" and r["runs"] == "2"
    assert float(table["tide"]["lm_calls"]) == sum(
        rd["lm_calls"] for line in (out / "raw" / "tide").glob("run*.jsonl")
        for row in map(json.loads, line.read_text().splitlines()) for rd in row["rounds"])
    assert float(table["tide"]["cost_usd"]) > 0 and float(table["tide"]["usd_per_matched"]) > 0
    assert table["random"]["lm_calls"] == "0"
    tests = rows(out / "table1_tests.csv")
    baselines = {r["baseline"] for r in tests if r["metric"] == "retrieval_f1"}
    assert baselines == set(table) - {"tide"}
    assert all(0 < float(r["p"]) <= 1 and r["test"].startswith("paired sign-flip") for r in tests)
    md = (out / "table1.md").read_text()
    assert "tide against each baseline" in md and ", p " in md and "paired sign-flip permutation test" in md
    assert "out of reach" in md  # two instances cannot give p < 0.05, and the table says so
    assert "cost per matched" in md and "judge: llm:" in md and "(probe)" in md
    meta = json.loads((out / "meta-table1.json").read_text())
    assert meta["settings"]["stop_on"] == "empty" and meta["settings"]["judge_rubric"] == "probe"
    assert (out / "table1.png").stat().st_size > 0
