"""experiments/run.py --dry-run: every experiment, and `all`, prints what it would send and cost and calls no model."""

from __future__ import annotations

from pathlib import Path

import dspy
import pytest
from routed_lm import FIXTURE_DATA, RoutedLM, fixture_instances

from scripts import load_script

SHIPPED_TEMPLATES = Path(__file__).resolve().parents[1] / "programs" / "workspace" / "local" / "templates.json"
EXPERIMENTS = ["table1", "steps", "budget", "rounds", "demos", "transfer", "citations", "poolsize", "instances"]


@pytest.fixture
def run_module(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("TIDE_DATA", str(FIXTURE_DATA))
    return load_script("run")


def dry_run(run_module, tmp_path, experiment: str, *extra: str) -> tuple[int, str, RoutedLM, Path]:
    lm = RoutedLM(fixture_instances("workspace"))
    dspy.configure(lm=lm)
    out = tmp_path / "out"
    rc = run_module.main([experiment, "--setting", "workspace", "--split", "train", "--rounds", "2", "--per-round",
                          "1", "--budgets", "2", "--backbone", "gpt-5-mini", "--judge", "gpt-5-mini",
                          "--programs", str(tmp_path / "programs"), "--dry-run", "--out", str(out), *extra])
    return rc, out, lm, out


@pytest.mark.parametrize("experiment", [*EXPERIMENTS, "all"])
def test_every_experiment_estimates_without_calling_a_model(run_module, tmp_path, capsys, experiment):
    rc, _, lm, out = dry_run(run_module, tmp_path, experiment)
    printed = capsys.readouterr().out
    assert rc == 0 and lm.calls == 0 and not out.exists()
    assert f"## {experiment if experiment != 'all' else ', '.join(EXPERIMENTS)} on gpt-5-mini" in printed
    assert "total: $" in printed and "dry run: no model was called, nothing written" in printed
    # No library for gpt-5-mini under --programs: the estimate says what stands in for it.
    assert "no template library for gpt-5-mini" in printed


def test_all_counts_each_shared_raw_run_once(run_module, tmp_path, capsys):
    assert dry_run(run_module, tmp_path, "all")[0] == 0
    printed = capsys.readouterr().out
    # table1, steps, budget (T = 2), rounds, transfer, citations and instances share one TIDE run: 2 train
    # instances x 2 rounds.
    assert printed.count("| tide | backbone | gpt-5-mini |") == 1
    assert "| tide | backbone | gpt-5-mini | 4 |" in printed


def test_transfer_estimates_each_inference_backbone(run_module, tmp_path, capsys):
    rc = dry_run(run_module, tmp_path, "transfer", "--backbones", "gpt-5-mini", "claude-sonnet-4.5",
                 "--template-sources", "gpt-5-mini", "claude-sonnet-4.5")[0]
    printed = capsys.readouterr().out
    assert rc == 0
    assert "## transfer on gpt-5-mini" in printed and "## transfer on claude-sonnet-4.5" in printed
    assert "| tide-claude-sonnet-4.5-with-gpt-5-mini | backbone | claude-sonnet-4.5 | 4 |" in printed
