"""tide compile's trial log and bounds: an interrupted compile resumes from the evaluations already scored, a call
budget stops it cleanly with the best candidate so far, and a scan-recall compile runs and tunes only the scan."""

from __future__ import annotations

import json
import math
from pathlib import Path

import dspy
import pytest
from routed_lm import FIXTURE_DATA, RoutedLM, field_block, fixture_instances

from tide_dspy.cost.guard import Budget, Guard
from tide_dspy.cost.prices import Overrides
from tide_dspy.discovery import TIDE
from tide_dspy.optimize import compile_program, make_metric, parse_options, split_train
from tide_dspy.programs import load_program
from tide_dspy.schemas import Template
from tide_dspy.trials import TrialLog

TEMPLATES = [Template(id="repo-t001", name="off by one", pattern="a bound one step off", evidence_flow=["a", "b"])]
TINY_COPRO = parse_options(["init.breadth=2", "init.depth=1"])
GOOD = "Rate the functions that the gold patch touches highest."


class ScanLM(RoutedLM):
    """Rates an artifact 9 when it is gold evidence and the prompt carries `instruction`, else 0; counts scans and
    rounds; answers everything else as RoutedLM does (a proposal is `instruction`)."""

    def __init__(self, instances, instruction=GOOD):
        super().__init__(instances, instruction=instruction)
        self.scans = self.rounds = 0

    def copy(self, **kwargs):
        new = super().copy(**kwargs)
        new.scans = new.rounds = 0
        return new

    def route(self, message: str, system: str = ""):
        tail = message.split("Respond with")[-1]
        if "[[ ## suspicion ## ]]" in tail:
            self.scans += 1
            artifact = field_block(message, "artifact")
            gold = {e for i in self.instances for p in i.problems for e in p.evidence}
            hit = any(f"### {g} " in artifact or artifact.startswith(f"### {g}\n") for g in gold)
            return {"suspicion": 9 if hit and self.instruction in system else 0, "template_id": "",
                    "reason": "looked at it"}
        if "[[ ## findings ## ]]" in tail:
            self.rounds += 1
        return super().route(message, system)


@pytest.fixture()
def ledgers():
    """Five train copies of the ledger fixture (8 functions, 2 gold): a train part of 2, three held out."""
    base = fixture_instances("repository", "train")[0]
    return [base.model_copy(update={"instance_id": f"ledger-{n}"}) for n in range(5)]


def scanning_program():
    return TIDE("repository", templates=TEMPLATES, max_rounds=1, per_round=1, scan=True, focus_size=2)


def open_log(folder: Path, lm=None, budget: Budget = Budget()):
    """A trial log maker whose guard holds the search to `budget`, counting the calls of `lm`."""
    guard = Guard(budget, Overrides().targets({"backbone": lm}), estimates=False)
    return lambda metric, planned: TrialLog(folder, {"test": 1}, metric, expected=planned, progress=False, guard=guard)


def test_a_scan_recall_compile_runs_and_tunes_only_the_scan(ledgers):
    program = scanning_program()
    train, val = split_train(ledgers)
    lm = ScanLM(ledgers)
    compiled = compile_program(program, train, val, "copro", "scan-recall", lm=lm, options=TINY_COPRO)
    assert lm.rounds == 0 and lm.scans == 2 * 2 * 8  # 2 candidates x 2 train instances x 8 functions
    assert compiled.scanner.rate.signature.instructions == GOOD
    assert compiled.discover.signature.instructions == program.discover.signature.instructions
    assert program.scanner.rate.signature.instructions != GOOD  # the input program is left as it was
    with dspy.context(lm=ScanLM(ledgers)):
        assert compiled(val[0]).scan.recall_at_focus == 1.0


def test_a_scan_compiled_alone_is_sized_by_its_scan_calls_before_it_runs(ledgers):
    """The window check sizes what a scan-recall compile sends: one scan call per function and no round."""
    from tide_dspy.cost.estimate import Estimator
    from tide_dspy.scan import ScanOnly

    program, estimator = scanning_program(), Estimator()
    calls = estimator.program_calls(ScanOnly(program), ledgers[0])
    assert [c.step for c in calls] == ["scan"] * 8
    scans = [c for c in estimator.program_calls(program, ledgers[0]) if c.step == "scan"]
    assert [c.prompt for c in calls] == [c.prompt for c in scans]
    assert estimator.largest_prompt(ScanOnly(program), ledgers[0]) == max(c.prompt for c in scans)


def test_an_interrupted_compile_resumes_from_the_trials_already_scored(tmp_path, ledgers):
    train, val = split_train(ledgers)
    first = ScanLM(ledgers)
    log = open_log(tmp_path)
    compile_program(scanning_program(), train, val, "copro", "scan-recall", lm=first, options=TINY_COPRO, trials=log)
    rows = (tmp_path / "trials.jsonl").read_text().splitlines()
    assert json.loads(rows[0]) == {"header": {"test": 1}} and len(rows) == 1 + 4
    assert first.scans == 32

    # Cut the log after its first two trials' rows, as a crash would (the last one cut mid-line).
    (tmp_path / "trials.jsonl").write_text("\n".join(rows[:3]) + "\n" + rows[3][:50])
    again = ScanLM(ledgers)
    opened = []

    def keep(metric, planned):
        opened.append(open_log(tmp_path)(metric, planned))
        return opened[-1]

    compiled = compile_program(scanning_program(), train, val, "copro", "scan-recall", lm=again, options=TINY_COPRO,
                               trials=keep)
    summary = opened[0].summary()
    assert (summary["resumed"], summary["replayed"], summary["live"]) == (2, 2, 2)
    assert again.scans == 16  # only the two evaluations the log did not hold
    assert summary["trials"] == 2 and summary["best_score"] == 1.0
    assert compiled.scanner.rate.signature.instructions == GOOD


def test_a_trial_log_of_another_setup_is_not_continued(tmp_path):
    TrialLog(tmp_path, {"metric": "scan-recall"}, make_metric("scan-recall"), progress=False).close()
    with pytest.raises(ValueError, match="differs in metric.*--fresh"):
        TrialLog(tmp_path, {"metric": "retrieval-f1"}, make_metric("scan-recall"), progress=False)
    fresh = TrialLog(tmp_path, {"metric": "retrieval-f1"}, make_metric("scan-recall"), fresh=True, progress=False)
    assert fresh.rows == {}


def compile_within(budget: Budget, lm, tmp_path, ledgers):
    """The scan compiled by TINY_COPRO under `budget`; returns the program and its trial log's summary."""
    train, val = split_train(ledgers)
    opened = []

    def bounded(metric, planned):
        opened.append(open_log(tmp_path, lm, budget)(metric, planned))
        return opened[-1]

    compiled = compile_program(scanning_program(), train, val, "copro", "scan-recall", lm=lm, options=TINY_COPRO,
                               trials=bounded)
    return compiled, opened[0].summary()


def test_the_budget_stops_the_search_with_the_best_candidate_so_far(tmp_path, ledgers):
    train, val = split_train(ledgers)
    lm = ScanLM(ledgers)
    # 1 proposal call, then 8 scan calls per evaluation: the check before the third evaluation sees 17 >= 10.
    compiled, summary = compile_within(Budget(max_calls=10), lm, tmp_path, ledgers)
    assert summary["stopped"].startswith("budget of 10 LM calls reached (17 calls")
    assert summary["evaluations"] == 2 and lm.scans == 16
    assert compiled.scanner.rate.signature.instructions == GOOD  # the proposal, scored on both train instances

    # A rerun without the bound replays the two and scores the rest.
    opened = []
    compile_program(scanning_program(), train, val, "copro", "scan-recall", lm=ScanLM(ledgers), options=TINY_COPRO,
                    trials=lambda m, p: opened.append(open_log(tmp_path)(m, p)) or opened[-1])
    assert (opened[0].summary()["replayed"], opened[0].summary()["evaluations"]) == (2, 4)


class PricedScanLM(ScanLM):
    """ScanLM whose every call the provider bills at one cent."""

    def forward(self, *args, **kwargs):
        response = super().forward(*args, **kwargs)
        response._hidden_params = {"response_cost": 0.01}
        return response


def test_the_cost_cap_stops_the_search_before_an_evaluation_once_spent(tmp_path, ledgers):
    lm = PricedScanLM(ledgers)
    # 1 proposal call, then 8 scan calls per evaluation at $0.01: the check before the third evaluation sees $0.17.
    compiled, summary = compile_within(Budget(max_cost=0.1), lm, tmp_path, ledgers)
    assert summary["stopped"] == "budget of $0.1 reached (17 calls, $0.17)"
    assert summary["evaluations"] == 2 and lm.scans == 16
    assert compiled.scanner.rate.signature.instructions == GOOD


def test_budget_values_are_checked():
    with pytest.raises(ValueError, match="max-calls"):
        Budget(max_calls=0)
    for usd in (-1.0, 0.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="max-cost"):
            Budget(max_cost=usd)


@pytest.mark.parametrize("command", ["compile", "evaluate"])
@pytest.mark.parametrize("usd", ["nan", "inf", "0", "-1"])
def test_max_cost_takes_a_finite_positive_usd_on_every_command(command, usd, capsys):
    from tide_dspy.cli.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--setting", "workspace", "--method", "iter", "--max-cost", usd])
    assert "--max-cost" in capsys.readouterr().err


def test_cli_compile_stops_at_max_calls_saves_the_best_so_far_and_resumes(tmp_path, monkeypatch, capsys):
    from tide_dspy.cli.main import main

    workspace = fixture_instances("workspace")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TIDE_DATA", str(FIXTURE_DATA))
    library = tmp_path / "templates.json"
    library.write_text(json.dumps({"setting": "workspace", "templates": [
        {"id": "ws-t01", "name": "n", "pattern": "p", "evidence_flow": ["a", "b"]}]}))
    dspy.configure(lm=RoutedLM(workspace, instruction="Read every artifact twice.", gated=True))
    command = ["compile", "--setting", "workspace", "--backbone", "dummy", "--templates", str(library), "--no-track",
               "--rounds", "1", "--opt", "init.breadth=2", "--opt", "init.depth=1"]

    assert main([*command, "--max-calls", "2"]) == 0
    printed = capsys.readouterr()
    assert "stopped early: budget of 2 LM calls reached" in printed.err
    saved = json.loads(Path("programs/workspace/dummy/tide.json").read_text())
    validation = saved["tide_extra"]["validation"]
    assert saved["tide_extra"]["search"]["stopped"] and validation["after"] > validation["before"]
    assert validation["kept"] == "compiled"
    assert load_program("programs/workspace/dummy/tide.json").discover.signature.instructions == (
        "Read every artifact twice.")

    assert main(command) == 0
    printed = capsys.readouterr().out
    assert "2 evaluations (1 replayed from the trial log)" in printed
    provenance = json.loads(Path("programs/workspace/dummy/provenance.json").read_text())["tide.json"]
    assert provenance["search"]["stopped"] is None and provenance["val_after"] > provenance["val_before"]
    assert provenance["search"]["candidates"][0]["instructions"]


def test_cli_compile_prices_unbilled_calls_at_price_for_max_cost(tmp_path, monkeypatch, capsys):
    from tide_dspy.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TIDE_DATA", str(FIXTURE_DATA))
    library = tmp_path / "templates.json"
    library.write_text(json.dumps({"setting": "workspace", "templates": [
        {"id": "ws-t01", "name": "n", "pattern": "p", "evidence_flow": ["a", "b"]}]}))
    dspy.configure(lm=RoutedLM(fixture_instances("workspace"), instruction="Read every artifact twice.", gated=True))
    # RoutedLM reports 10 prompt tokens a call and no cost: at $100,000 per million prompt tokens, $1 a call.
    assert main(["compile", "--setting", "workspace", "--backbone", "dummy", "--templates", str(library),
                 "--no-track", "--rounds", "1", "--opt", "init.breadth=2", "--opt", "init.depth=1",
                 "--price", "100000,0", "--max-cost", "2"]) == 0
    assert "stopped early: budget of $2 reached (2 calls, $2)" in capsys.readouterr().err


def test_cli_scan_recall_compile_validates_the_scan_alone(tmp_path, monkeypatch, capsys, ledgers):
    from tide_dspy.cli.main import main

    record = json.loads((FIXTURE_DATA / "repository" / "instances.jsonl").read_text().splitlines()[1])
    assert record["split"] == "train"
    data = tmp_path / "ledgers.jsonl"
    data.write_text("".join(json.dumps({**record, "instance_id": f"ledger-{n}"}) + "\n" for n in range(3)))
    library = tmp_path / "templates.json"
    library.write_text(json.dumps({"setting": "repository", "templates": [t.model_dump() for t in TEMPLATES]}))
    monkeypatch.chdir(tmp_path)
    lm = ScanLM(ledgers)
    dspy.configure(lm=lm)
    assert main(["compile", "--setting", "repository", "--backbone", "dummy", "--data", str(data), "--no-track",
                 "--templates", str(library), "--scan", "2", "--metric", "scan-recall",
                 "--opt", "init.breadth=2", "--opt", "init.depth=1"]) == 0
    assert lm.rounds == 0  # neither the search nor the validation ran a round
    printed = capsys.readouterr().out
    assert "scan-recall: " in printed and "-> 1.0000" in printed
    program = load_program("programs/repository/dummy/tide.json")
    assert program.scanner.rate.signature.instructions == GOOD and program.focus_size == 2
    assert program.discover.signature.instructions == scanning_program().discover.signature.instructions


def test_gepa_tunes_the_scan_from_feedback_that_names_where_gold_ranked(ledgers):
    from tide_dspy.metrics import scan_feedback_metric

    program = scanning_program()
    with dspy.context(lm=ScanLM(ledgers, instruction="an instruction nobody proposes")):
        pred = program(ledgers[0])
    feedback = scan_feedback_metric(dspy.Example(case=ledgers[0]).with_inputs("case"), pred).feedback
    assert feedback.startswith("Scan recall@2 ") and "ledger/money.py::to_cents ranked" in feedback
    train, val = split_train(ledgers)
    compiled = compile_program(program, train, val, "gepa", "scan-recall", lm=ScanLM(ledgers),
                               options=parse_options(["init.max_metric_calls=6"]))
    assert compiled.scanner.rate.signature.instructions == GOOD
