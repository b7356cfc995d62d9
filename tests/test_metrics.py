"""The TIDE metric on hand-computed cases, the judges with stubs and DummyLM, and the DSPy metric wrappers."""

from __future__ import annotations

import inspect
import sys
import threading
import types

import dspy
import pytest
from dspy.utils.dummies import DummyLM

from tide_dspy.metrics import (
    InstanceScore,
    LLMJudge,
    ProxyJudge,
    aggregate,
    make_judge,
    normalise_likert,
    retrieval_overlap,
    score_instance,
    tide_feedback_metric,
    tide_metric,
)
from tide_dspy.schemas import ChosenAction, Finding, GoldProblem, Instance

# ---- helpers ----


def gold(pid: str, evidence: list[str], action_id: str = "send_email", **params) -> GoldProblem:
    return GoldProblem(
        problem_id=pid,
        description=f"problem {pid}",
        evidence=evidence,
        action=ChosenAction(action_id=action_id, type="email", parameters=params),
    )


def finding(evidence: list[str], description: str = "something", action_id: str = "send_email", **params) -> Finding:
    return Finding(
        description=description, evidence=evidence, action=ChosenAction(action_id=action_id, parameters=params)
    )


class StubJudge:
    """Records which (gold, finding) pairs it was asked about."""

    label = "stub"

    def __init__(self, identification=1.0, resolution=0.5, failures=0):
        self.calls: list[tuple[str, str]] = []
        self.identification, self.resolution, self.failures = identification, resolution, failures

    def __call__(self, g, f, setting):
        self.calls.append((g.problem_id, f.description))
        return dspy.Prediction(
            identification=self.identification,
            identification_rationale="stub says so",
            resolution=self.resolution,
            resolution_rationale="stub",
            failures=self.failures,
        )


# Two gold problems; f1 and f2 both pick g1 (f2 better), f3 is exactly g2.
GOLD_A = [gold("g1", ["a", "b"]), gold("g2", ["c", "d"])]
FINDINGS_A = [finding(["a"], "f1"), finding(["a", "b"], "f2"), finding(["c", "d"], "f3")]


# ---- retrieval_overlap ----


@pytest.mark.parametrize(
    "kind, expected",
    [("f1", 2 / 3), ("jaccard", 0.5), ("recall", 2 / 3)],
)
def test_overlap_kinds(kind, expected):
    assert retrieval_overlap(["a", "b", "c"], ["b", "c", "d"], kind) == pytest.approx(expected)


def test_overlap_recall_ignores_extra_predicted_ids():
    assert retrieval_overlap(["a", "b", "x", "y"], ["a", "b"], "recall") == 1.0
    assert retrieval_overlap(["a", "b", "x", "y"], ["a", "b"], "f1") == pytest.approx(2 / 3)


@pytest.mark.parametrize("kind", ["f1", "jaccard", "recall"])
def test_overlap_empty_sets_score_zero(kind):
    assert retrieval_overlap([], ["a"], kind) == 0.0
    assert retrieval_overlap(["a"], [], kind) == 0.0
    assert retrieval_overlap([], [], kind) == 0.0


def test_overlap_rejects_unknown_kind_and_bare_strings():
    with pytest.raises(ValueError, match="overlap kind"):
        retrieval_overlap(["a"], ["a"], "cosine")
    with pytest.raises(TypeError, match="not the string"):
        retrieval_overlap("ab", ["a"])


# ---- matching, coverage, precision, F1 ----


def test_duplicates_picking_the_same_gold_only_credit_the_best():
    s = score_instance(GOLD_A, FINDINGS_A)
    # coverage: g1 <- f2 (1.0), g2 <- f3 (1.0); precision: f1 is a duplicate of g1 -> (0 + 1 + 1) / 3
    assert s.coverage["retrieval"] == pytest.approx(1.0)
    assert s.precision["retrieval"] == pytest.approx(2 / 3)
    assert s.f1["retrieval"] == pytest.approx(0.8)
    assert s.duplicate_findings == [0]
    assert s.spurious_findings == [] and s.unmatched_gold == []


def test_no_judge_reports_none_never_a_number():
    s = score_instance(GOLD_A, FINDINGS_A)
    for table in (s.coverage, s.precision, s.f1):
        assert table["identification"] is None and table["resolution"] is None
    assert s.judge_label == "none"
    assert all(p.identification is None for p in s.pairs)


def test_ties_go_to_the_earlier_finding():
    s = score_instance([gold("g1", ["a", "b"])], [finding(["a"], "first"), finding(["b"], "second")])
    # both have retrieval 2/3; the first is credited, the second is a duplicate
    assert [(p.finding_index, p.used_for) for p in s.pairs] == [(0, ["coverage", "precision"])]
    assert s.coverage["retrieval"] == pytest.approx(2 / 3)
    assert s.precision["retrieval"] == pytest.approx(1 / 3)
    assert s.f1["retrieval"] == pytest.approx(4 / 9)
    assert s.duplicate_findings == [1]


def test_no_findings_scores_zero_everywhere():
    judge = StubJudge()
    s = score_instance(GOLD_A, [], judge=judge)
    for table in (s.coverage, s.precision, s.f1):
        assert table == {"retrieval": 0.0, "identification": 0.0, "resolution": 0.0}
    assert judge.calls == [] and s.pairs == []
    assert s.unmatched_gold == [0, 1]
    assert score_instance(GOLD_A, []).f1 == {"retrieval": 0.0, "identification": None, "resolution": None}


def test_more_findings_than_gold():
    s = score_instance([gold("g1", ["a"])], [finding(["a"]), finding(["x"]), finding(["y", "z"])])
    assert s.coverage["retrieval"] == 1.0
    assert s.precision["retrieval"] == pytest.approx(1 / 3)
    assert s.f1["retrieval"] == pytest.approx(0.5)
    assert s.spurious_findings == [1, 2]


def test_finding_overlapping_two_golds():
    golds = [gold("g1", ["a", "b"]), gold("g2", ["c", "d", "e"])]
    s = score_instance(golds, [finding(["a", "b", "c"])])
    # R(g1) = 2*2/5 = 0.8, R(g2) = 2*1/6 = 1/3; the finding is credited to g1 only
    assert s.coverage["retrieval"] == pytest.approx((0.8 + 1 / 3) / 2)
    assert s.precision["retrieval"] == pytest.approx(0.8)
    used = {(p.gold_index, p.finding_index): p.used_for for p in s.pairs}
    assert used == {(0, 0): ["coverage", "precision"], (1, 0): ["coverage"]}


def test_finding_equally_close_to_two_golds_goes_to_the_earlier_gold():
    s = score_instance([gold("g1", ["a", "b"]), gold("g2", ["c", "d"])], [finding(["a", "c"])])
    assert s.finding_best == [0]
    assert s.coverage["retrieval"] == pytest.approx(0.5)
    assert s.precision["retrieval"] == pytest.approx(0.5)


def test_overlap_kind_is_used_for_matching_and_retrieval():
    g, f = [gold("g1", ["a", "b"])], [finding(["a", "b", "c", "d"])]
    assert score_instance(g, f, overlap="recall").coverage["retrieval"] == 1.0
    assert score_instance(g, f, overlap="jaccard").coverage["retrieval"] == 0.5
    assert score_instance(g, f).coverage["retrieval"] == pytest.approx(2 / 3)


def test_dict_inputs_score_like_schema_objects():
    gold_dicts = [g.model_dump(exclude={"problem_id"}) for g in GOLD_A]
    finding_dicts = [
        {"description": f.description, "evidence": f.evidence, "action": f.action.model_dump()} for f in FINDINGS_A
    ]
    from_dicts = score_instance(gold_dicts, finding_dicts, judge=ProxyJudge())
    from_objects = score_instance(GOLD_A, FINDINGS_A, judge=ProxyJudge())
    assert from_dicts.coverage == from_objects.coverage and from_dicts.precision == from_objects.precision
    assert from_dicts.pairs[0].problem_id == "gold-1"  # dicts without ids are numbered


def test_bad_dict_input_names_the_item():
    with pytest.raises(ValueError, match=r"findings\[1\]: missing 'evidence'"):
        score_instance(GOLD_A, [{"description": "x", "evidence": []}, {"description": "y"}])
    with pytest.raises(ValueError, match=r"gold\[0\]"):
        score_instance([{"description": "no evidence"}], [])


# ---- the judge is called only for matched pairs ----


def test_stub_judge_is_called_once_per_matched_pair_only():
    judge = StubJudge(identification=1.0, resolution=0.5)
    s = score_instance(GOLD_A, FINDINGS_A, judge=judge)
    # f1 (a duplicate) is never judged; (g1, f2) and (g2, f3) count on both sides but are judged once
    assert judge.calls == [("g1", "f2"), ("g2", "f3")]
    assert s.coverage["identification"] == 1.0 and s.precision["identification"] == pytest.approx(2 / 3)
    assert s.coverage["resolution"] == 0.5 and s.precision["resolution"] == pytest.approx(1 / 3)
    assert s.judge_label == "stub"
    assert all(p.identification_rationale == "stub says so" for p in s.pairs)


def test_stub_judge_skips_spurious_findings_and_judges_each_gold_side_pair():
    judge = StubJudge()
    golds = [gold("g1", ["a", "b"]), gold("g2", ["c"])]
    score_instance(golds, [finding(["a", "c"], "both"), finding(["zzz"], "spurious")], judge=judge)
    assert judge.calls == [("g1", "both"), ("g2", "both")]


def test_failed_judgements_count_zero_and_are_counted():
    s = score_instance(GOLD_A, FINDINGS_A, judge=StubJudge(identification=None, resolution=1.0, failures=1))
    assert s.coverage["identification"] == 0.0
    assert s.coverage["resolution"] == 1.0
    assert s.judge_failures == 2


# ---- aggregate ----


def test_aggregate_macro_average_keeps_none_components():
    a = score_instance(GOLD_A, FINDINGS_A)  # retrieval F1 0.8
    b = score_instance(GOLD_A, [])  # 0
    out = aggregate([a, b.model_dump()])  # rows read back from JSONL work too
    assert out["n_instances"] == 2 and out["judge"] == "none"
    assert out["f1"]["retrieval"] == pytest.approx(0.4)
    assert out["coverage"]["retrieval"] == pytest.approx(0.5)
    assert out["precision"]["retrieval"] == pytest.approx(1 / 3)
    assert out["f1"]["identification"] is None and out["coverage"]["resolution"] is None


def test_aggregate_with_a_judge_and_refusing_mixed_judges():
    judged = [score_instance(GOLD_A, FINDINGS_A, judge=StubJudge()), score_instance(GOLD_A, [], judge=StubJudge())]
    out = aggregate(judged)
    assert out["judge"] == "stub"
    assert out["coverage"]["resolution"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="different judges"):
        aggregate([judged[0], score_instance(GOLD_A, FINDINGS_A)])
    assert aggregate([])["n_instances"] == 0


# ---- LLMJudge with DummyLM ----


def test_likert_normalisation_and_clamping():
    assert normalise_likert(1) == (0.0, False)
    assert normalise_likert(4) == (0.75, False)
    assert normalise_likert(7) == (1.0, True)
    assert normalise_likert(0) == (0.0, True)


def test_likert_judge_parses_normalises_and_uses_its_own_lm():
    backbone = DummyLM([{"rationale": "backbone", "score": "1"}])
    dspy.configure(lm=backbone)
    judge_lm = DummyLM(
        [{"rationale": "same people and cause", "score": "4"}, {"rationale": "same action", "score": "5"}]
    )
    judge = LLMJudge(judge_lm, rubric="likert")
    s = score_instance([gold("g1", ["a"])], [finding(["a"])], judge=judge)
    assert s.coverage["identification"] == 0.75 and s.coverage["resolution"] == 1.0
    assert s.pairs[0].identification_rationale == "same people and cause"
    assert s.judge_label == "llm:dummy (likert)" and s.judge_failures == 0
    assert len(judge_lm.history) == 2 and len(backbone.history) == 0
    # workspace resolution shows the gold action (id, type, parameters) against the predicted one
    resolution_prompt = judge_lm.history[1]["messages"][-1]["content"]
    assert "send_email [email] parameters" in resolution_prompt


def test_likert_judge_clamps_out_of_range_scores():
    judge = LLMJudge(DummyLM([{"rationale": "very good", "score": "7"}, {"rationale": "bad", "score": "0"}]),
                     rubric="likert")
    verdict = judge(gold("g1", ["a"]), finding(["a"]), "workspace")
    assert verdict.identification == 1.0 and verdict.resolution == 0.0
    assert "clamped" in verdict.identification_rationale


def test_llm_judge_records_a_parse_failure_and_keeps_scoring():
    g = gold("g1", ["a"])
    g.description = "UNPARSEABLE case"
    judge = LLMJudge(DummyLM({"UNPARSEABLE": {"rationale": "hm", "score": "excellent"}}), rubric="likert")
    s = score_instance([g], [finding(["a"])], judge=judge)
    assert s.pairs[0].identification is None and s.pairs[0].resolution is None
    assert "failed after 2 attempts" in s.pairs[0].identification_rationale
    assert s.judge_failures == 2
    assert s.coverage["identification"] == 0.0 and s.coverage["retrieval"] == 1.0


def test_llm_judge_retry_recovers():
    lm = DummyLM(
        [{"rationale": "hm", "score": "n/a"}, {"rationale": "ok", "score": "3"}, {"rationale": "ok", "score": "2"}]
    )
    with dspy.context(adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        verdict = LLMJudge(lm, rubric="likert")(gold("g1", ["a"]), finding(["a"]), "workspace")
    assert verdict.identification == 0.5 and verdict.resolution == 0.25 and verdict.failures == 0


def test_likert_judge_repository_compares_patches_and_gates_missing_patch():
    g = GoldProblem(
        problem_id="b1", description="off by one", evidence=["m.py::f"], patch="diff --git a/m.py b/m.py\n-x\n+y\n"
    )
    lm = DummyLM(
        [
            {"rationale": "same bug", "score": "5"},
            {"rationale": "same fix", "score": "5"},
            {"rationale": "x", "score": "5"},
        ]
    )
    judge = LLMJudge(lm, rubric="likert")
    verdict = judge(g, Finding(description="off by one", evidence=["m.py::f"], patch=g.patch), "repository")
    assert verdict.resolution == 1.0 and "diff --git a/m.py" in lm.history[1]["messages"][-1]["content"]
    no_patch = judge(g, Finding(description="off by one", evidence=["m.py::f"]), "repository")
    assert no_patch.resolution == 0.0 and len(lm.history) == 3  # no LM call for a missing patch


# ---- ProxyJudge and make_judge ----


def test_proxy_judge_is_labelled_and_lexical():
    judge = ProxyJudge()
    same = judge(gold("g1", ["a"], to="ann"), finding(["a"], "problem g1", to="ann"), "workspace")
    assert same.identification == 1.0 and same.resolution == 1.0
    assert "proxy" in same.identification_rationale and "proxy" in same.resolution_rationale
    other = judge(gold("g1", ["a"]), finding(["a"], action_id="schedule_meeting"), "workspace")
    assert other.resolution == 0.0
    s = score_instance(GOLD_A, FINDINGS_A, judge=judge)
    assert s.judge_label == "proxy-lexical" and aggregate([s])["judge"] == "proxy-lexical"


def test_proxy_judge_repository_uses_changed_lines():
    patch = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-    return x\n+    return x + 1\n"
    g = GoldProblem(problem_id="b1", description="d", evidence=["m.py::f"], patch=patch)
    same = ProxyJudge()(
        g, Finding(description="d", evidence=["m.py::f"], patch=patch.replace("a/m.py", "a/./m.py")), "repository"
    )
    assert same.resolution == 1.0
    different = ProxyJudge()(
        g, Finding(description="d", evidence=["m.py::f"], patch=patch.replace("x + 1", "None")), "repository"
    )
    assert 0.0 < different.resolution < 1.0


def test_make_judge(monkeypatch):
    assert make_judge("none") is None and make_judge(None) is None
    assert isinstance(make_judge("proxy"), ProxyJudge)
    assert isinstance(make_judge(DummyLM([])), LLMJudge)
    fake = types.ModuleType("tide_dspy.backbones")
    fake.get_lm = lambda name, **kw: DummyLM([])
    monkeypatch.setitem(sys.modules, "tide_dspy.backbones", fake)
    assert make_judge("gpt-5-mini").label == "llm:dummy (probe)"
    assert make_judge("gpt-5-mini", rubric="likert", runs=3).label == "llm:dummy (likert, 3 runs)"
    with pytest.raises(ValueError, match="needs an LLM judge"):
        make_judge("proxy", runs=2)


# ---- DSPy metrics ----


@pytest.fixture
def example():
    instance = Instance(
        instance_id="ws-1",
        setting="workspace",
        artifacts=[{"id": x, "kind": "email"} for x in "abcd"],
        actions=[{"id": "send_email", "type": "email", "description": "send an email"}],
        problems=GOLD_A,
    )
    return dspy.Example(case=instance).with_inputs("case")


def test_tide_metric_on_an_example(example):
    pred = dspy.Prediction(findings=FINDINGS_A)
    assert tide_metric()(example, pred) == pytest.approx(0.8)
    assert tide_metric(kind="coverage")(example, pred) == 1.0
    mean = tide_metric("mean", judge=StubJudge(identification=1.0, resolution=0.5))(example, pred)
    assert mean == pytest.approx((0.8 + 0.8 + 2 * 0.5 * (1 / 3) / (0.5 + 1 / 3)) / 3)
    assert tide_metric()(dspy.Example(gold=GOLD_A), pred) == pytest.approx(0.8)
    assert tide_metric()(example, dspy.Prediction(findings=[])) == 0.0
    with pytest.raises(ValueError, match="needs a judge"):
        tide_metric("identification")
    with pytest.raises(ValueError, match="component"):
        tide_metric("speed")


def test_tide_metric_in_dspy_evaluate(example):
    def fixed_program(case):
        return dspy.Prediction(findings=FINDINGS_A)

    result = dspy.Evaluate(devset=[example], metric=tide_metric(), num_threads=1, display_progress=False)(fixed_program)
    assert result.score == pytest.approx(80.0)


def test_gold_findings_score_one_on_a_workspace_instance(workspace_instance):
    findings = [
        Finding(description=p.description, evidence=p.evidence, action=p.action) for p in workspace_instance.problems
    ]
    pred = dspy.Prediction(findings=findings)
    ex = dspy.Example(case=workspace_instance).with_inputs("case")
    assert tide_metric()(ex, pred) == 1.0
    assert tide_metric("mean", judge="proxy")(ex, pred) == 1.0


def test_gold_patches_score_one_on_a_repository_instance(repository_instance):
    findings = [
        Finding(description=p.description, evidence=p.evidence, patch=p.patch) for p in repository_instance.problems
    ]
    s = score_instance(repository_instance, findings, judge=ProxyJudge(), setting="repository")
    assert s.f1 == {"retrieval": 1.0, "identification": 1.0, "resolution": 1.0}


def test_feedback_metric_names_missed_spurious_and_duplicates(example):
    metric = tide_feedback_metric(judge=StubJudge(identification=0.5))
    inspect.signature(metric).bind(None, None, None, None, None)  # GEPA's own signature check
    pred = dspy.Prediction(findings=[finding(["a"], "f1"), finding(["a", "b"], "f2"), finding(["x"], "stray")])
    out = metric(example, pred, None, "predictor", None)
    assert out.score == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))
    assert "Missed gold problem g2" in out.feedback
    assert "Spurious finding #3" in out.feedback
    assert "Finding #1 repeats gold problem g1, already credited to finding #2" in out.feedback
    assert "identification 0.50: stub says so" in out.feedback


def test_feedback_metric_is_accepted_by_gepa(example):
    metric = tide_feedback_metric()
    gepa = dspy.GEPA(metric=metric, auto="light", reflection_lm=DummyLM([]))
    assert gepa.metric_fn is metric
    # Called the way GEPA calls it (gold, pred, trace, pred_name, pred_trace): an empty answer scores 0 and says why.
    out = gepa.metric_fn(example, dspy.Prediction(findings=[]), None, "discover", None)
    assert out.score == 0.0 and "Missed gold problem g1" in out.feedback


def test_instance_score_round_trips_through_json():
    s = score_instance(GOLD_A, FINDINGS_A, judge=StubJudge())
    assert InstanceScore.model_validate_json(s.model_dump_json()) == s


def test_plain_dicts_may_give_the_action_as_a_string():
    from tide_dspy.metrics.scoring import as_findings, as_gold_problems

    patch = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    gold = as_gold_problems([{"description": "d", "evidence": ["f"], "action": patch}])
    found = as_findings([{"description": "d", "evidence": ["f"], "action": "act_12345678"}])
    assert gold[0].patch == patch and gold[0].action is None
    assert found[0].action.action_id == "act_12345678"


class BatchedStubJudge(StubJudge):
    """A judge whose LM is batched (tide_dspy.batch marks it): every rating blocks until the other pair's has
    started too, which only happens when the pairs are rated at once."""

    lm = type("BatchedLM", (), {"tide_batch": "judge"})()

    def __init__(self, pairs: int):
        super().__init__()
        self.barrier = threading.Barrier(pairs, timeout=60)

    def __call__(self, g, f, setting):
        self.barrier.wait()  # BrokenBarrierError if the pairs were rated in turn
        return super().__call__(g, f, setting)


def test_a_batched_judge_rates_an_instances_pairs_at_once():
    golds = [gold("p1", ["a", "b"]), gold("p2", ["c", "d"])]
    judge = BatchedStubJudge(pairs=2)
    score = score_instance(golds, [finding(["a", "b"], "one"), finding(["c", "d"], "two")], judge=judge,
                           setting="workspace")
    assert sorted(judge.calls) == [("p1", "one"), ("p2", "two")] and score.coverage["identification"] == 1.0
