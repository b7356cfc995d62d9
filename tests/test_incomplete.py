"""No silent truncation: an instance cut short after round 1, or with a judge call that failed, is marked
incomplete, counted, and run (or judged) again by --resume, which keeps the finished rows."""

from __future__ import annotations

import json

import dspy
import pytest
from routed_lm import RoutedLM, fixture_instances

from tide_dspy.evaluation import evaluate, format_table, incomplete_reasons, read_rows, resume_plan
from tide_dspy.programs import build_program


class RateLimitedLater(RoutedLM):
    """Answers round 1 of each instance; every later round fails as a rate-limited provider would."""

    def route(self, message: str, system: str = ""):
        if "[[ ## findings ## ]]" in message.split("Respond with")[-1] and "(nothing yet)" not in message:
            raise RuntimeError("RateLimitError: 429 Too Many Requests")
        return super().route(message, system)


class FlakyJudge:
    """A judge whose identification calls all fail (`failing`), or all succeed."""

    label = "stub-judge"

    def __init__(self, failing: bool = False):
        self.failing, self.calls = failing, 0

    def __call__(self, gold, finding, setting):
        self.calls += 1
        failed = self.failing
        return dspy.Prediction(identification=None if failed else 1.0, identification_rationale="",
                               resolution=1.0, resolution_rationale="", failures=int(failed))


@pytest.fixture(scope="module")
def train():
    return fixture_instances("workspace", "train")


def test_an_aborted_later_round_marks_the_row_incomplete_and_resume_reruns_it(tmp_path, train):
    program = build_program("iter", "workspace", max_rounds=3, per_round=1)
    out = tmp_path / "results.jsonl"
    first = evaluate(program, train, out_path=out, lm=RateLimitedLater(train), progress=False)
    rows = read_rows(out)
    for row in rows.values():
        assert row["error"] is None and len(row["findings"]) == 1  # round 1's finding is kept
        assert row["incomplete"] and "round 2 aborted" in row["incomplete"][0] and "429" in row["incomplete"][0]
    assert first.n_incomplete == 2 and first.n_failed == 0
    assert "incomplete: 2" in format_table(first)
    assert json.loads((tmp_path / "summary.json").read_text())["n_incomplete"] == 2

    lm = RoutedLM(train)
    again = evaluate(program, train, out_path=out, lm=lm, progress=False, resume=True)
    assert lm.calls == 2 * 3  # both instances ran again, all three rounds
    assert again.n_incomplete == 0 and again.n_run == 2
    assert all(len(r["findings"]) == 3 and not r["incomplete"] for r in read_rows(out).values())


def test_resume_reruns_only_the_incomplete_and_failed_rows(tmp_path, train):
    program = build_program("iter", "workspace", max_rounds=2, per_round=1)
    out = tmp_path / "results.jsonl"
    evaluate(program, train[:1], out_path=out, lm=RoutedLM(train), progress=False)
    evaluate(program, train[1:], out_path=out, lm=RateLimitedLater(train), progress=False, resume=True)
    finished = read_rows(out)[train[0].instance_id]
    lm = RoutedLM(train)
    result = evaluate(program, train, out_path=out, lm=lm, progress=False, resume=True)
    assert lm.calls == 2 and result.n_resumed == 1 and result.n_run == 1
    assert read_rows(out)[train[0].instance_id] == finished  # the finished row is untouched


def test_a_failed_judge_call_marks_the_row_and_resume_judges_it_again_without_the_backbone(tmp_path, train):
    program = build_program("iter", "workspace", max_rounds=2, per_round=2)
    out = tmp_path / "results.jsonl"
    first = evaluate(program, train, judge=FlakyJudge(failing=True), out_path=out, lm=RoutedLM(train), progress=False)
    assert first.n_incomplete == 2 and first.judge_failures > 0
    assert first.coverage["identification"] == 0  # the failed pairs count 0 ...
    row = read_rows(out)[train[0].instance_id]
    assert "judge call(s) failed" in row["incomplete"][0]  # ... and the row says so
    kept, rejudge = resume_plan(read_rows(out))
    assert kept == {} and set(rejudge) == {i.instance_id for i in train}

    lm, judge = RoutedLM(train), FlakyJudge()
    again = evaluate(program, train, judge=judge, out_path=out, lm=lm, progress=False, resume=True)
    assert lm.calls == 0 and judge.calls > 0  # judged again; the findings were kept
    assert again.n_rejudged == 2 and again.n_incomplete == 0 and again.judge_failures == 0
    assert again.coverage["identification"] == pytest.approx(0.8)
    assert read_rows(out)[train[0].instance_id]["findings"] == row["findings"]


def test_error_rows_and_complete_rows_are_not_incomplete():
    assert incomplete_reasons({"error": "every round failed", "rounds": [{"round": 1, "aborted": True}]}) == []
    assert incomplete_reasons({"error": None, "rounds": [{"round": 1}, {"round": 2}],
                               "score": {"judge_failures": 0}}) == []
    # Round 1 aborting is an error row (nothing was found), so only t >= 2 truncates.
    assert incomplete_reasons({"error": None, "rounds": [{"round": 1, "aborted": True}], "score": {}}) == []
