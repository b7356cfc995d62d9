"""Budget, per-step and per-instance analyses over evaluation rows (experiments/analysis.py; hand-built rows, no
LM)."""

from __future__ import annotations

from scripts import load_script
from tide_dspy.schemas import GoldProblem, Instance

analysis = load_script("analysis")

GOLD = [GoldProblem(problem_id="p1", description="a", evidence=["a1", "a2"]),
        GoldProblem(problem_id="p2", description="b", evidence=["b1"])]
INSTANCE = Instance(instance_id="i1", setting="repository",
                    artifacts=[{"id": x, "kind": "function"} for x in ("a1", "a2", "b1", "c1")], problems=GOLD)


def row(findings, rounds):
    return {"instance_id": "i1", "findings": findings, "rounds": rounds}


ROW = row(
    [{"description": "x", "evidence": ["a1", "a2"], "round": 1},
     {"description": "y", "evidence": ["c1"], "round": 2},
     {"description": "z", "evidence": ["b1"], "round": 3}],
    [{"new": 1, "rediscovered": 0}, {"new": 1, "rediscovered": 2}, {"new": 1, "rediscovered": 0}],
)


def test_budget_curve_scores_the_findings_of_the_first_k_rounds():
    curve = analysis.budget_curve([ROW], {"i1": INSTANCE}, [1, 2, 3])
    assert curve[1] == {"coverage": 0.5, "precision": 1.0, "f1": 2 / 3}
    assert curve[2]["coverage"] == 0.5 and curve[2]["precision"] == 0.5
    assert curve[3]["coverage"] == 1.0 and abs(curve[3]["precision"] - 2 / 3) < 1e-9


def test_steps_average_new_and_rediscovered_and_pad_stopped_runs():
    short = row([], [{"new": 0, "rediscovered": 1}])
    steps = analysis.steps_new_vs_rediscovered([ROW, short])
    assert steps[1] == {"new": 0.5, "rediscovered": 0.5}
    assert steps[2] == {"new": 0.5, "rediscovered": 1.0}
    assert steps[3] == {"new": 0.5, "rediscovered": 0.0}


def test_template_citations_count_novel_findings_separately():
    rows = [row([{"used_template_id": "t1"}, {"used_template_id": ""}, {"used_template_id": "t1"}], [])]
    assert analysis.template_citations(rows) == {"t1": 2, "novel": 1}


def test_per_instance_counts():
    scored = {**ROW, "score": {"coverage": {"retrieval": 0.5}}}
    counts = analysis.per_instance_counts([scored], {"i1": INSTANCE})
    assert counts == [{"instance_id": "i1", "gold_problems": 2, "findings": 3, "retrieval_coverage": 0.5}]


def test_mean_std_ignores_unjudged_components():
    assert analysis.mean_std([None, None]) == (None, None)
    mu, sd = analysis.mean_std([0.2, 0.4, None])
    assert abs(mu - 0.3) < 1e-12 and abs(sd - 0.1) < 1e-12


def test_output_hygiene_counts_what_the_answers_were_made_of():
    rounds = [{"dropped_evidence": 2, "aliased_evidence": 1, "parse_failures": 1, "failed": False, "lm_calls": 2},
              {"dropped_evidence": 1, "parse_failures": 3, "failed": True, "lm_calls": 3}]
    rows = [{**row([{"evidence": ["a1"]}, {"evidence": [], "flags": ["missing_parameters"]}], rounds), "seconds": 1.25},
            {**row([], []), "error": "boom", "seconds": 0.5}]
    assert analysis.output_hygiene(rows) == {
        "instances": 2, "errors": 1, "findings": 2, "with_valid_evidence": 1, "dropped_ids": 3, "aliased_ids": 1,
        "bad_actions": 1, "parse_failures": 4, "failed_rounds": 1, "lm_calls": 5, "seconds": 1.8}


def test_cited_position_is_0_for_first_listed_and_about_half_for_random(repository_fixture_instance):
    from tide_dspy.discovery import FirstListed, RandomBaseline

    inst = repository_fixture_instance
    by_id = {inst.instance_id: inst}
    rows = lambda program: [{"instance_id": inst.instance_id,  # noqa: E731
                             "findings": [f.model_dump() for f in program(inst).findings]}]
    assert analysis.cited_position(rows(FirstListed("repository", n_findings=1, evidence_size=1)), by_id) == 0.0
    assert analysis.cited_position(rows(FirstListed("repository", n_findings=1, evidence_size=1,
                                                    context_order_seed=3)), by_id, 3) == 0.0
    spread = analysis.cited_position(rows(RandomBaseline("repository", n_findings=30, evidence_size=2)), by_id)
    assert 0.3 < spread < 0.7


def test_scan_recall_averages_the_rows_that_scanned():
    rows = [{"scan": {"recall_at_focus": 0.5}}, {"scan": {"recall_at_focus": 1.0}}, {"findings": []}]
    assert analysis.scan_recall(rows) == 0.75
    assert analysis.scan_recall([{"findings": []}]) is None
