"""PROBE's rubric, the LLM judge's default: hand-checked verdicts and the scores they must give, the action-id check
in code, the patch grade, and repeated judge runs with their spread."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils.dummies import DummyLM

from tide_dspy.backbones.options import LMOptions
from tide_dspy.cli.options import add_lm_options
from tide_dspy.metrics import LLMJudge, make_judge, score_instance
from tide_dspy.metrics.judges import detail_fields, probe_score
from tide_dspy.schemas import ChosenAction, Finding, GoldProblem
from tide_dspy.signatures import JudgeBugDetails, JudgeProblemDetails

ESSENTIAL = {"who_blocked": "correct", "who_blocks": "correct", "task": "correct", "root_cause": "correct"}
SECONDARY = {"deadline": "correct", "system": "correct", "mechanism": "correct", "impact": "correct"}


def details(**changed) -> dict:
    return {"rationale": "checked detail by detail", **ESSENTIAL, **SECONDARY, **changed}


def grade(judgment: str) -> dict:
    return {"rationale": "the parameters", "judgment": judgment}


GOLD = GoldProblem(problem_id="g1", description="Timothy cannot finish the Q3 financials by March 23: Martha revoked "
                                                 "his econo.com access", evidence=["a", "b"],
                   action=ChosenAction(action_id="send_email", type="email", parameters={"to": "Martha"}))


def finding(action_id: str = "send_email") -> Finding:
    return Finding(description="Timothy's Q3 financials are blocked: Martha removed his access", evidence=["a", "b"],
                   action=ChosenAction(action_id=action_id, parameters={"to": "Martha"}))


def judged(answers: list[dict], found: Finding | None = None, **judge_options):
    lm = DummyLM(answers)
    score = score_instance([GOLD], [found or finding()], judge=LLMJudge(lm, **judge_options), setting="workspace")
    return score.pairs[0], lm


def test_the_verdicts_map_to_probes_three_scores():
    essential, secondary = detail_fields(JudgeProblemDetails)
    assert essential == list(ESSENTIAL) and secondary == list(SECONDARY)
    assert probe_score({**ESSENTIAL, **SECONDARY}, essential, secondary)[0] == 1.0
    assert probe_score({**ESSENTIAL, **SECONDARY, "deadline": "missing"}, essential, secondary)[0] == 0.5
    assert probe_score({**ESSENTIAL, **SECONDARY, "system": "incorrect"}, essential, secondary)[0] == 0.5
    assert probe_score({**ESSENTIAL, **SECONDARY, "deadline": "not_stated"}, essential, secondary)[0] == 1.0
    assert probe_score({**ESSENTIAL, **SECONDARY, "root_cause": "missing"}, essential, secondary)[0] == 0.0
    assert probe_score({**ESSENTIAL, "who_blocks": "incorrect", **SECONDARY, "deadline": "missing"}, essential,
                       secondary)[0] == 0.0


def test_all_details_right_scores_one():
    pair, lm = judged([details(), grade("correct")])
    assert (pair.identification, pair.resolution) == (1.0, 1.0)
    assert "every detail right" in pair.identification_rationale and len(lm.history) == 2


def test_essentials_only_score_one_half():
    pair, _ = judged([details(deadline="missing", system="incorrect"), grade("partially_correct")])
    assert (pair.identification, pair.resolution) == (0.5, 0.5)
    assert "deadline, system" in pair.identification_rationale


def test_a_wrong_essential_scores_zero():
    pair, _ = judged([details(who_blocked="incorrect"), grade("incorrect")])
    assert (pair.identification, pair.resolution) == (0.0, 0.0)


def test_a_wrong_action_id_scores_zero_resolution_without_asking_the_judge():
    pair, lm = judged([details(), grade("correct")], found=finding("schedule_meeting"))
    assert pair.identification == 1.0 and pair.resolution == 0.0
    assert "different action" in pair.resolution_rationale
    assert len(lm.history) == 1  # the parameters were not judged


def test_the_parameters_judge_sees_the_action_and_both_parameter_sets():
    _, lm = judged([details(), grade("correct")])
    prompt = lm.history[1]["messages"][-1]["content"]
    assert "send_email [email]" in prompt and '"to": "Martha"' in prompt


def test_repository_identification_checks_the_bug_details_and_grades_the_patch():
    patch = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-    return x\n+    return x + 1\n"
    gold = GoldProblem(problem_id="b1", description="f returns x, not x + 1", evidence=["m.py::f"], patch=patch)
    essential, secondary = detail_fields(JudgeBugDetails)
    answers = [{"rationale": "r", **dict.fromkeys(essential, "correct"), **dict.fromkeys(secondary, "not_stated")},
               grade("partially_correct")]
    lm = DummyLM(answers)
    verdict = LLMJudge(lm)(gold, Finding(description="f is off by one", evidence=["m.py::f"], patch=patch),
                           "repository")
    assert (verdict.identification, verdict.resolution) == (1.0, 0.5)
    assert "`location`" in lm.history[0]["messages"][0]["content"] and patch in lm.history[1]["messages"][-1]["content"]


def test_probe_is_the_default_rubric_of_an_llm_judge_and_of_the_cli():
    import argparse

    assert LLMJudge(DummyLM([])).rubric == "probe" and make_judge(DummyLM([])).label == "llm:dummy (probe)"
    parser = argparse.ArgumentParser()
    add_lm_options(parser)
    spec = LMOptions.from_namespace(parser.parse_args([])).judge_spec("gpt-5-mini")
    assert (spec.rubric, spec.runs) == ("probe", 1)
    spec = LMOptions.from_namespace(parser.parse_args(["--judge-rubric", "likert", "--judge-runs", "3"])).judge_spec(
        "gpt-5-mini")
    assert (spec.rubric, spec.runs) == ("likert", 3)


def test_one_judge_run_is_one_plain_call():
    _, lm = judged([details(), grade("correct")])
    assert all("rollout_id" not in entry["kwargs"] for entry in lm.history)


def test_repeated_judge_runs_are_fresh_samples_scored_by_their_mean_with_the_spread():
    answers = [details(), details(deadline="missing"), details(task="missing"),  # identification 1, 0.5, 0
               grade("correct"), grade("correct"), grade("partially_correct")]  # resolution 1, 1, 0.5
    lm = DummyLM(answers)
    score = score_instance([GOLD], [finding()], judge=LLMJudge(lm, runs=3), setting="workspace")
    pair = score.pairs[0]
    assert pair.identification_runs == [1.0, 0.5, 0.0] and pair.identification == pytest.approx(0.5)
    assert pair.resolution_runs == [1.0, 1.0, 0.5] and pair.resolution == pytest.approx(2.5 / 3)
    # one gold, one finding: each run's coverage and F1 are that run's score, so the spread is their SD
    assert score.judge_spread["f1"]["identification"] == pytest.approx(0.5)
    assert score.judge_spread["coverage"]["resolution"] == pytest.approx(0.288675, abs=1e-6)
    rollouts = [entry["kwargs"].get("rollout_id") for entry in lm.history]
    assert len(set(rollouts[:3])) == len(set(rollouts[3:])) == 3 and None not in rollouts  # a new cache entry each
    assert all(entry["kwargs"].get("temperature") == 1.0 for entry in lm.history)


def test_the_judge_spread_reaches_the_evaluation_summary(tmp_path):
    from tide_dspy.evaluation import evaluate, format_table
    from tide_dspy.schemas import Instance

    instance = Instance(instance_id="ws-1", setting="workspace", artifacts=[{"id": x, "kind": "email"} for x in "ab"],
                        problems=[GOLD], actions=[{"id": "send_email", "type": "email", "description": "mail"}])

    class Fixed(dspy.Module):
        def forward(self, case, on_round=None):
            return dspy.Prediction(findings=[finding()], rounds=[])

    answers = [details(), details(task="missing"), grade("correct"), grade("correct")]
    result = evaluate(Fixed(), [instance], judge=LLMJudge(DummyLM(answers), runs=2), progress=False, method="fixed")
    assert result.judge_spread["f1"]["identification"] == pytest.approx(0.7071068, abs=1e-6)
    assert result.judge_spread["f1"]["resolution"] == 0.0
    assert "judge spread (SD over its runs" in format_table(result)
