"""experiments/run.py end to end on one small repository instance, with a DummyLM standing in for the backbone."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import dspy
import pytest
from dspy.utils.dummies import DummyLM

from scripts import load_script
from tide_dspy.schemas import Template
from tide_dspy.templates import TemplateLibrary


@pytest.fixture
def run_module(monkeypatch, tmp_path, repository_instance):
    module = load_script("run")
    ids = [a.id for a in repository_instance.artifacts]
    gold = repository_instance.problems[0].evidence
    # Every round answers the same two findings: one on a gold function, one on a distractor.
    answer = {
        "findings": [
            {
                "description": "bug in the gold function",
                "evidence_ids": gold,
                "patch": "no diff",
                "used_template_id": "repo-t001",
                "why": "fits",
            },
            {
                "description": "bug elsewhere",
                "evidence_ids": [i for i in ids if i not in gold][:1],
                "patch": "",
                "used_template_id": "",
                "why": "",
            },
        ]
    }
    dspy.configure(lm=DummyLM({"max_new": answer}))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("TIDE_DATA", str(Path(__file__).resolve().parent / "fixtures" / "instances"))
    return module


def test_experiments_write_tables_plots_and_meta(run_module, tmp_path, repository_instance):
    library = TemplateLibrary([Template(id="repo-t001", name="n", pattern="p", evidence_flow=["a"])], "repository")
    templates = library.save(tmp_path / "templates.json")
    out = tmp_path / "out"
    common = [
        "--setting",
        "repository",
        "--split",
        repository_instance.split,
        "--instances",
        repository_instance.instance_id,
        "--templates",
        str(templates),
        "--judge",
        "proxy",
        "--out",
        str(out),
    ]
    for experiment in ("table1", "steps", "rounds", "instances"):
        assert run_module.main([experiment, *common]) == 0
    assert run_module.main(["budget", *common, "--budgets", "2", "3"]) == 0
    assert run_module.main(["poolsize", *common, "--pool-sizes", "0", "1"]) == 0
    assert run_module.main(["demos", *common, "--demos", "1"]) == 0

    table = list(csv.DictReader((out / "table1.csv").open()))
    assert [r["method"] for r in table] == ["random", "first-listed", "lexical-join", "single", "multi", "iter", "tide"]
    # TIDE finds the same two findings in round 1, re-discovers them in round 2 and stops.
    tide_row = json.loads((out / "raw" / "tide" / "run0.jsonl").read_text().splitlines()[0])
    assert [(r["new"], r["rediscovered"]) for r in tide_row["rounds"]] == [(2, 0), (0, 2)]
    assert float(table[-1]["retrieval_coverage"]) > 0
    assert "Highest chance floor:" in (out / "table1.md").read_text()
    steps = list(csv.DictReader((out / "steps.csv").open()))
    assert {"tide", "multi"} == {r["method"] for r in steps}
    budget = list(csv.DictReader((out / "budget.csv").open()))
    assert sorted({int(r["budget"]) for r in budget}) == [2, 3]
    pools = list(csv.DictReader((out / "poolsize.csv").open()))
    assert [int(r["pool_size"]) for r in pools] == [0, 1]
    demos = list(csv.DictReader((out / "demos.csv").open()))
    assert [r["method"] for r in demos] == ["random", "first-listed", "lexical-join", "iter-demos", "tide"]
    for name in ("poolsize.png", "table1.png", "steps.png", "rounds.png", "budget.png", "per_instance.png", "table1.md",
                 "table1_hygiene.csv"):
        assert (out / name).stat().st_size > 0
    meta = json.loads((out / "meta-table1.json").read_text())
    assert meta["judge"] == "proxy-lexical" and meta["instances"] == [repository_instance.instance_id]
    assert set(meta["raw_lm_seconds"]) == {"random/run0", "first-listed/run0", "lexical-join/run0", "single/run0",
                                           "multi/run0", "iter/run0", "tide/run0"}
    assert {"random", "first-listed", "lexical-join", "tide", "multi"} == {r["method"] for r in budget}
