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
