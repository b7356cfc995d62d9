"""experiments/run.py end to end on one small repository instance, with a DummyLM standing in for the backbone."""

from __future__ import annotations

import copy
import csv
import json
from dataclasses import dataclass
from pathlib import Path

import dspy
import pytest
from dspy.dsp.utils.settings import DEFAULT_CONFIG
from dspy.utils.dummies import DummyLM

from scripts import load_script
from tide_dspy.schemas import Template
from tide_dspy.templates import TemplateLibrary


@dataclass
class Experiments:
    out: Path
    codes: dict[str, int]  # experiment -> exit status

    def csv(self, name: str) -> list[dict]:
        with (self.out / name).open() as f:
            return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def experiments(tmp_path_factory, repository_instance) -> Experiments:
    """Every experiment of experiments/run.py run once on the repository instance, into one output folder. Every
    round answers the same two findings: one on a gold function, one on a distractor."""
    module = load_script("run")
    root = tmp_path_factory.mktemp("experiments")
    ids = [a.id for a in repository_instance.artifacts]
    gold = repository_instance.problems[0].evidence
    answer = {"findings": [
        {"description": "bug in the gold function", "evidence_ids": gold, "patch": "no diff",
         "used_template_id": "repo-t001", "why": "fits"},
        {"description": "bug elsewhere", "evidence_ids": [i for i in ids if i not in gold][:1], "patch": "",
         "used_template_id": "", "why": ""},
    ]}
    library = TemplateLibrary([Template(id="repo-t001", name="n", pattern="p", evidence_flow=["a"])], "repository")
    templates = library.save(root / "templates.json")
    out = root / "out"
    common = ["--setting", "repository", "--split", repository_instance.split,
              "--instances", repository_instance.instance_id, "--templates", str(templates), "--judge", "proxy",
              "--out", str(out)]
    runs = {"table1": [], "steps": [], "rounds": [], "instances": [], "budget": ["--budgets", "2", "3"],
            "poolsize": ["--pool-sizes", "0", "1"], "demos": [], "transfer": [], "citations": []}
    codes = {}
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
        patch.setenv("MLFLOW_REGISTRY_URI", f"sqlite:///{root / 'mlflow.db'}")  # restored when the context ends
        patch.setenv("TIDE_DATA", str(Path(__file__).resolve().parent / "fixtures" / "instances"))
        dspy.configure(lm=DummyLM({"max_new": answer}))
        try:
            for experiment, extra in runs.items():
                codes[experiment] = module.main([experiment, *common, *extra])
        finally:
            dspy.configure(**copy.deepcopy(DEFAULT_CONFIG))
    return Experiments(out, codes)


FLOORS = ["random", "first-listed", "lexical-join", "tfidf"]


@pytest.mark.parametrize("experiment", ["table1", "steps", "rounds", "instances", "budget", "poolsize", "demos",
                                        "transfer", "citations"])
def test_each_experiment_exits_zero(experiments, experiment):
    assert experiments.codes[experiment] == 0


def test_table1_lists_the_floors_then_the_methods(experiments):
    assert [r["method"] for r in experiments.csv("table1.csv")] == [*FLOORS, "single", "multi", "iter", "tide"]


def test_tide_goes_on_after_a_round_that_only_rediscovers(experiments):
    # The same two findings in round 1, re-discovered in rounds 2 and 3: no round is empty, so all T=3 run.
    tide_row = json.loads((experiments.out / "raw" / "tide" / "run0.jsonl").read_text().splitlines()[0])
    assert [(r["new"], r["rediscovered"]) for r in tide_row["rounds"]] == [(2, 0), (0, 2), (0, 2)]


def test_tide_covers_gold_evidence_in_table1(experiments):
    assert float(experiments.csv("table1.csv")[-1]["retrieval_coverage"]) > 0


def test_table1_md_names_the_highest_chance_floor(experiments):
    assert "Highest chance floor:" in (experiments.out / "table1.md").read_text()


def test_steps_compares_tide_and_multi(experiments):
    assert {r["method"] for r in experiments.csv("steps.csv")} == {"tide", "multi"}


def test_budget_runs_each_budget_asked_for(experiments):
    assert sorted({int(r["budget"]) for r in experiments.csv("budget.csv")}) == [2, 3]


def test_budget_compares_the_floors_tide_and_multi(experiments):
    assert {r["method"] for r in experiments.csv("budget.csv")} == {*FLOORS, "tide", "multi"}


def test_poolsize_runs_each_pool_size_asked_for_beside_the_floors(experiments):
    records = experiments.csv("poolsize.csv")
    assert [int(r["pool_size"]) for r in records if r["method"] == "tide"] == [0, 1]
    assert {r["method"] for r in records} == {"tide", *FLOORS}


def test_the_curves_carry_intervals(experiments):
    for name, key in (("budget.csv", "f1"), ("rounds.csv", "coverage"), ("poolsize.csv", "retrieval_f1")):
        records = experiments.csv(name)
        assert {f"{key}_ci_low", f"{key}_ci_high"} <= set(records[0]), name


def test_demos_compares_iter_demos_with_the_floors_and_tide(experiments):
    assert [r["method"] for r in experiments.csv("demos.csv")] == [*FLOORS, "iter-demos", "tide"]


def test_transfer_reports_retrieval_coverage_and_f1_per_backbone_and_template_source(experiments):
    rows = experiments.csv("transfer.csv")
    assert [(r["method"], r["inference"], r["templates_from"]) for r in rows] == [
        *[(f, "-", "-") for f in FLOORS], ("tide", "local", "local")]  # the default backbone's own library
    assert all(r["retrieval_coverage"] != "" and r["retrieval_f1"] != "" for r in rows)
    assert "| local | " in (experiments.out / "transfer.md").read_text()


def test_citations_counts_the_templates_tides_findings_cite(experiments):
    cited = {r["template"]: int(r["citations"]) for r in experiments.csv("citations.csv")}
    assert cited["repo-t001"] > 0 and cited["novel"] > 0


@pytest.mark.parametrize("name", ["poolsize.png", "table1.png", "steps.png", "rounds.png", "budget.png",
                                  "per_instance.png", "table1.md", "table1_hygiene.csv", "transfer.png",
                                  "transfer.md", "citations.png"])
def test_each_plot_and_table_is_written(experiments, name):
    assert (experiments.out / name).stat().st_size > 0


def test_table1_meta_names_the_judge_and_the_instances(experiments, repository_instance):
    meta = json.loads((experiments.out / "meta-table1.json").read_text())
    assert meta["judge"] == "proxy-lexical" and meta["instances"] == [repository_instance.instance_id]


def test_table1_meta_times_every_method_run(experiments):
    meta = json.loads((experiments.out / "meta-table1.json").read_text())
    assert set(meta["raw_lm_seconds"]) == {f"{m}/run0" for m in [*FLOORS, "single", "multi", "iter", "tide"]}


def test_table1_carries_intervals_tests_and_cost(experiments):
    table = {r["method"]: r for r in experiments.csv("table1.csv")}
    assert {"retrieval_f1_ci_low", "retrieval_f1_ci_high", "lm_calls", "cost_usd", "usd_per_matched",
            "calls_per_matched"} <= set(table["tide"])
    tests = experiments.csv("table1_tests.csv")
    assert {r["baseline"] for r in tests} == set(table) - {"tide"}
    assert all(r["n"] == "1" and r["p"] == "1.0" for r in tests)  # one instance: no test can say anything
    assert "out of reach" in (experiments.out / "table1.md").read_text()


def test_the_table1_figure_draws_each_interval(monkeypatch, tmp_path):
    import matplotlib.axes

    plots = load_script("plots")
    drawn = []
    real_bar = matplotlib.axes.Axes.bar

    def bar(self, x, height, *args, **kwargs):
        drawn.append(kwargs.get("yerr"))
        return real_bar(self, x, height, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", bar)
    record = {"method": "tide"}
    for c in ("retrieval", "identification", "resolution"):
        for kind in ("coverage", "f1"):
            record.update({f"{c}_{kind}": 40.0, f"{c}_{kind}_ci_low": 30.0, f"{c}_{kind}_ci_high": 55.0})
    plots.table1([record], tmp_path / "t.png", title="t")
    assert drawn and all(yerr == [[10.0], [15.0]] for yerr in drawn)
