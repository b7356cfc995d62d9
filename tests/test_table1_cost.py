"""experiments/run.py table1: --dry-run estimates the whole table without a model; an instance over the window is
left out of every method and named under the table."""

from __future__ import annotations

import csv
from pathlib import Path

import dspy
import pytest
from routed_lm import RoutedLM, fixture_instances

from scripts import load_script
from tide_dspy.cost.estimate import Estimator
from tide_dspy.programs import build_program
from tide_dspy.templates import TemplateLibrary

SHIPPED_TEMPLATES = Path(__file__).resolve().parents[1] / "programs" / "workspace" / "local" / "templates.json"


@pytest.fixture
def run_module(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("TIDE_DATA", str(Path(__file__).resolve().parent / "fixtures" / "instances"))
    return load_script("run")


def test_table1_dry_run_estimates_every_method_run_and_judge_call(run_module, tmp_path, capsys):
    lm = RoutedLM(fixture_instances("workspace"))
    dspy.configure(lm=lm)
    out = tmp_path / "out"
    assert run_module.main(["table1", "--setting", "workspace", "--split", "train", "--rounds", "2",
                            "--per-round", "1", "--templates", str(SHIPPED_TEMPLATES), "--backbone", "gpt-5-mini",
                            "--judge", "gpt-5-mini", "--runs", "3", "--dry-run", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert lm.calls == 0 and not out.exists()
    for method in ("random", "first-listed"):
        assert f"| {method} | backbone | gpt-5-mini | 0 |" in printed
    # 2 instances x 3 runs: single asks once, multi, iter and tide twice (T = 2).
    assert "| single | backbone | gpt-5-mini | 6 |" in printed and "| tide | backbone | gpt-5-mini | 12 |" in printed
    assert "| tide | judge | gpt-5-mini |" in printed and "2 workspace instances (train split) x 3 run(s)" in printed


def test_an_instance_over_the_window_is_left_out_of_every_method(run_module, tmp_path):
    train = fixture_instances("workspace", "train")
    templates = TemplateLibrary.load(SHIPPED_TEMPLATES).templates
    programs = [build_program("single", "workspace", max_findings=2), build_program("multi", "workspace", max_rounds=2,
                per_round=1), build_program("tide", "workspace", templates=templates, max_rounds=2, per_round=1)]
    largest = {i.instance_id: max(Estimator().largest_prompt(p, i) for p in programs) for i in train}
    big, small = sorted(largest, key=largest.get, reverse=True)
    window = (largest[big] + largest[small]) // 2 + 1000  # RoutedLM asks for 1000 output tokens
    dspy.configure(lm=RoutedLM(train))
    out = tmp_path / "out"
    assert run_module.main(["table1", "--setting", "workspace", "--split", "train", "--rounds", "2",
                            "--per-round", "1", "--methods", "single", "multi", "tide", "--templates",
                            str(SHIPPED_TEMPLATES), "--judge", "proxy", "--context-window", str(window),
                            "--out", str(out)]) == 0
    table = (out / "table1.md").read_text()
    assert f"skipped: 1 (over the window), left out of every method: {big}" in table
    rows = list(csv.DictReader((out / "table1.csv").open()))
    assert {(r["instances"], r["skipped"]) for r in rows} == {("1", "1")}  # every method scored the same one
