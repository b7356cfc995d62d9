"""`--dry-run` on evaluate, distill, compile, tune and discover: prompts rendered and counted, costs printed, no LM
called."""

from __future__ import annotations

import re

import dspy
import pytest
from dspy.utils.dummies import DummyLM
from routed_lm import FIXTURE_DATA, RoutedLM, fixture_instances

from tide_dspy import domains
from tide_dspy.budget import Estimator
from tide_dspy.cli.main import main
from tide_dspy.data.selection import Selection
from tide_dspy.evaluation import evaluate
from tide_dspy.programs import build_program
from tide_dspy.templates import Distiller, distill_one, solved_cases
from tide_dspy.workflows import ProgramShape, estimate_distill, estimate_split

WORKSPACE = str(FIXTURE_DATA / "workspace")


@pytest.fixture()
def lm():
    """A configured LM that counts its calls: a dry run must leave it at 0 (lm_from_options returns it)."""
    routed = RoutedLM(fixture_instances("workspace"))
    dspy.configure(lm=routed)
    return routed


def total_usd(printed: str) -> float:
    return float(re.search(r"\| \*\*total\*\* \|.*?\| \*\*\$([\d.,]+)\*\* \|", printed).group(1).replace(",", ""))


def test_evaluate_dry_run_prints_calls_tokens_and_usd_per_method_and_role(lm, capsys, tmp_path):
    rc = main(["evaluate", "--setting", "workspace", "--split", "train", "--data", WORKSPACE, "--method", "iter",
               "--rounds", "3", "--per-round", "1", "--backbone", "gpt-5-mini", "--judge", "gpt-5-mini",
               "--dry-run", "--out", str(tmp_path / "out")])
    assert rc == 0
    printed = capsys.readouterr().out
    assert lm.calls == 0 and not lm.history
    assert not (tmp_path / "out").exists()  # nothing written
    assert "| iter | backbone | gpt-5-mini | 6 |" in printed  # 2 instances x 3 rounds
    assert "| iter | judge | gpt-5-mini |" in printed
    assert "prompt $0.25/M" in printed and "dry run: no model was called" in printed
    assert total_usd(printed) > 0


def test_price_overrides_the_map_and_prices_an_unpriced_backbone(lm, capsys):
    common = ["evaluate", "--setting", "workspace", "--split", "train", "--data", WORKSPACE, "--method", "single",
              "--judge", "none", "--dry-run"]
    assert main([*common, "--backbone", "openai/not-in-the-map"]) == 0
    assert "n/a (no price: pass --price IN,OUT)" in capsys.readouterr().out
    assert main([*common, "--backbone", "openai/not-in-the-map", "--price", "1000,1000"]) == 0
    priced = total_usd(capsys.readouterr().out)
    assert main([*common, "--backbone", "openai/not-in-the-map", "--price", "2000,2000"]) == 0
    assert total_usd(capsys.readouterr().out) == pytest.approx(2 * priced, rel=0.01)
    assert lm.calls == 0


def test_the_dry_run_counts_the_calls_a_run_makes(lm):
    train = fixture_instances("workspace", "train")
    estimate = estimate_split(Selection(setting=domains.WORKSPACE, split="train", data=WORKSPACE), lm=lm,
                              backbone="local", method="iter", judge="proxy",
                              shape=ProgramShape(rounds=2, per_round=2))
    assert lm.calls == 0
    program = build_program("iter", "workspace", max_rounds=2, per_round=2)
    evaluate(program, train, lm=lm, progress=False)
    assert estimate.totals().calls == lm.calls == 4  # the fixtures' answers fill every round, as assumed


def test_compile_and_tune_dry_runs_call_no_model(lm, capsys):
    common = ["--setting", "workspace", "--data", WORKSPACE, "--backbone", "gpt-5-mini", "--dry-run"]
    assert main(["compile", *common, "--optimizer", "copro", "--opt", "init.breadth=2", "--opt", "init.depth=1",
                 "--rounds", "2", "--per-round", "1"]) == 0
    printed = capsys.readouterr().out
    assert "before (validation)" in printed and "optimizer: 2 passes over train" in printed
    assert "optimizer: proposals" in printed and "after (validation)" in printed and "COPRO: 2 candidates" in printed
    assert main(["tune", *common, "--trials", "3"]) == 0
    printed = capsys.readouterr().out
    assert "| 3 trial(s) | backbone | gpt-5-mini |" in printed and "largest shape (T=10, k=3" in printed
    assert lm.calls == 0 and not lm.history


def test_discover_dry_run_calls_no_model_and_writes_no_report(lm, capsys, tmp_path):
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "note.md").write_text("# Launch\nThe vendor contract expires on Friday and nobody owns the renewal.\n")
    (folder / "mail.eml").write_text("From: a@example.com\nTo: b@example.com\nSubject: renewal\n\nWho signs it?\n")
    out = tmp_path / "report"
    rc = main(["discover", "workspace", str(folder), "--backbone", "claude-sonnet-4.5", "--dry-run", "--out", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "| discover | backbone | claude-sonnet-4.5 |" in printed and "no report written" in printed
    assert lm.calls == 0 and not out.exists()


def test_evaluate_max_cost_stops_with_its_own_exit_status_and_resumes(lm, capsys, tmp_path):
    common = ["evaluate", "--setting", "workspace", "--split", "train", "--data", WORKSPACE, "--method", "iter",
              "--rounds", "1", "--judge", "proxy", "--no-track", "--out", str(tmp_path / "run"), "--price", "1,1"]
    assert main([*common, "--max-cost", "0.000001"]) == 4  # not even one instance fits this budget
    printed = capsys.readouterr().out
    assert "stopped at the budget" in printed and "2 instance(s) not run" in printed and lm.calls == 0
    assert main([*common, "--resume", "--max-cost", "5"]) == 0
    assert "spent $0.0000 of --max-cost $5" in capsys.readouterr().out and lm.calls == 2


def test_a_dry_run_on_a_hosted_backbone_makes_no_preflight_call(monkeypatch, capsys, tmp_path):
    def preflight(*args, **kwargs):
        raise AssertionError("a dry run made the preflight call")

    monkeypatch.setattr("tide_dspy.backbones.preflight.require_ready", preflight)
    rc = main(["evaluate", "--setting", "workspace", "--split", "train", "--data", WORKSPACE, "--method", "single",
               "--backbone", "gpt-5-mini", "--judge", "claude-sonnet-4.5", "--dry-run", "--out", str(tmp_path / "o")])
    assert rc == 0 and "| single | judge | claude-sonnet-4.5 |" in capsys.readouterr().out


def test_distill_dry_run_lists_the_shipped_v2_train_cases_and_calls_no_model(lm, capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("TIDE_DATA", raising=False)
    rc = main(["distill", "--setting", "workspace", "--backbone", "gpt-5-mini", "--dry-run", "--no-track",
               "--programs", str(tmp_path / "programs")])
    assert rc == 0
    printed = capsys.readouterr().out
    cases = [line.split() for line in printed.splitlines() if line.startswith("  ws-")]
    assert "52 solved cases to distil" in printed and len(cases) == 52 >= 40  # the paper distils 40 templates
    assert all(problem.startswith(instance + "-p") and len(rest) >= 2 for instance, problem, *rest in cases)
    assert "| distill: first attempts | backbone | gpt-5-mini | 52 |" in printed
    assert "| distill: retries (at most) | backbone | gpt-5-mini | 104 |" in printed  # --max-attempts 3
    assert total_usd(printed) > 0 and "dry run: no model was called" in printed
    assert lm.calls == 0 and not lm.history and not (tmp_path / "programs").exists()


# Leaks the names and the id of the first train fixture's case, so every attempt fails the check.
LEAKY = {"template": {"name": "Priya Anand never e-signed", "pattern": "PO-58-3301 waits on the controller",
                      "evidence_flow": ["find the request still pending in the tracker"]}}


def test_the_distill_dry_run_counts_the_calls_and_prompts_a_run_sends():
    selection = Selection(setting=domains.WORKSPACE, split="train", data=WORKSPACE)
    plan = estimate_distill(selection, lm=DummyLM([]), backbone="dummy", max_attempts=2)
    lm, distiller, estimator = DummyLM([LEAKY] * 2 * len(plan.cases)), Distiller(domains.WORKSPACE), Estimator()
    sent = []
    for instance, problem in solved_cases(selection.load()):
        outcome = distill_one(distiller, instance, problem, max_attempts=2, lm=lm)
        assert not outcome.passed and len(outcome.scores) == 2  # both attempts: the estimate's upper bound
        first, retry = [estimator.counter.messages(entry["messages"]) for entry in outcome.history]
        counted = estimator.distill_calls(domains.WORKSPACE, instance, problem, attempts=2)
        assert counted[0].prompt == first  # the first attempt is rendered as sent
        # The retry carries the hint; the stand-in names 12 leaked tokens, these drafts' hints 3 or fewer.
        assert first < retry <= counted[1].prompt < retry + 150
        sent += [first, retry]
    assert plan.estimate.totals().calls == len(sent) == 2 * len(plan.cases)
    assert plan.estimate.tallies[("distill: first attempts", "backbone")].prompt == sum(sent[::2])
