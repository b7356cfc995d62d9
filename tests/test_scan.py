"""The scan: per-artifact ratings with a shared prompt prefix, a position-free ranking, and shortlisted rounds."""

from __future__ import annotations

import math
import re
from pathlib import Path

import dspy
import pytest
from dspy.utils.dummies import DummyLM

from tide_dspy.data import load_instances
from tide_dspy.discovery import TIDE, SingleAgent
from tide_dspy.domains import REPOSITORY, ContextView
from tide_dspy.programs import load_program, save_program
from tide_dspy.scan import Scanner, Suspect, expected_rating, rank, recall_at

FIXTURES = Path(__file__).parent / "fixtures" / "instances"
SCORES = [1, 9, 0, 2, 8, 0]  # slugify, truncate, mean, clamp, Cache.get, Cache.put


@pytest.fixture(scope="module")
def repo():
    return load_instances(FIXTURES / "repository" / "instances.jsonl", setting="repository")[0]


def scan_answers(scores=SCORES) -> list[dict]:
    return [{"suspicion": s, "template_id": "", "reason": f"rated {s}"} for s in scores]


def finding(handle: str) -> dict:
    return {"description": f"bug in {handle}", "evidence_ids": [handle], "patch": "", "used_template_id": "", "why": ""}


def context_of(entry) -> str:
    user = entry["messages"][-1]["content"]
    return re.search(r"\[\[ ## context ## \]\]\n(.*?)\n\n\[\[ ## templates", user, re.S).group(1)


def test_scan_calls_share_everything_before_the_artifact(repo):
    lm = DummyLM([*scan_answers(), {"findings": []}])
    with dspy.context(lm=lm):
        TIDE("repository", max_rounds=1, scan=True)(repo)
    scans = lm.history[:len(repo.artifacts)]
    assert len({e["messages"][0]["content"] for e in scans}) == 1  # one system message
    users = [e["messages"][-1]["content"] for e in scans]
    prefixes = {u.split("[[ ## artifact ## ]]")[0] for u in users}
    assert len(prefixes) == 1 and "[[ ## templates ## ]]" in prefixes.pop()
    artifact = users[1].split("[[ ## artifact ## ]]")[1]
    assert "### pkg/text.py::truncate (" in artifact and "F2" not in artifact  # no handle: it tells the position


def test_ranking_puts_high_scores_first_and_breaks_ties_without_position(repo):
    view = ContextView.of(repo)
    suspects = [Suspect(artifact_id=i, handle=h, score=s) for i, h, s in zip(view.ids, view.handles, SCORES)]
    ranked = rank(suspects, seed="a").ids
    assert ranked[:4] == ("pkg/text.py::truncate", "pkg/cache.py::Cache.get", "pkg/mathx.py::clamp",
                          "pkg/text.py::slugify")
    flat = [s.model_copy(update={"score": 5}) for s in suspects]
    orders = {rank(flat, seed=str(k)).ids for k in range(6)}
    assert len(orders) > 1 and tuple(view.ids) != rank(flat, seed="a").ids
    assert rank(flat, seed="a").ids == rank(flat, seed="a").ids


def test_each_round_reads_the_most_suspect_unfound_artifacts_in_full(repo):
    lm = DummyLM([*scan_answers(), {"findings": [finding("F1")]}, {"findings": [finding("F1")]}])
    with dspy.context(lm=lm):
        out = TIDE("repository", max_rounds=2, per_round=1, scan=True, focus_size=2)(repo)
    round1, round2 = (context_of(e) for e in lm.history[len(repo.artifacts):])
    full = lambda ctx: re.findall(r"^### (F\d+ · \S+) ", ctx, re.M)  # noqa: E731
    assert full(round1) == ["F1 · pkg/text.py::truncate", "F2 · pkg/cache.py::Cache.get"]
    # truncate was found in round 1: clamp comes up, and the focus takes the first handles again
    assert full(round2) == ["F1 · pkg/cache.py::Cache.get", "F2 · pkg/mathx.py::clamp"]
    assert "- F4 · pkg/text.py::truncate: def truncate(s, n):" in round2
    assert [f.evidence for f in out.findings] == [["pkg/text.py::truncate"], ["pkg/cache.py::Cache.get"]]
    assert out.scan.lm_calls == len(repo.artifacts) and out.scan.ranked[0] == "pkg/text.py::truncate"
    assert (out.scan.focus_size, out.scan.recall_at_focus) == (2, 1.0)  # both gold functions in the first two


def test_a_shortlist_takes_the_first_handles_and_the_rest_keep_their_order(repo):
    shuffled = ContextView.of(repo, order_seed=3)
    view = ContextView.of(repo, order_seed=3, first=["pkg/cache.py::Cache.get", "pkg/text.py::truncate"])
    assert view.ids[:2] == ["pkg/cache.py::Cache.get", "pkg/text.py::truncate"]
    assert view.handles[:2] == ("F1", "F2")
    rest = [i for i in shuffled.ids if i not in view.ids[:2]]
    assert view.ids[2:] == rest


def test_a_failed_rating_ranks_last_and_is_counted(repo):
    answers = scan_answers()
    answers[1] = {"suspicion": "very", "template_id": "", "reason": ""}  # not an integer 0-9
    lm = DummyLM([*answers, {"findings": []}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        out = SingleAgent("repository", scan=True)(repo)
    assert out.scan.failures == 1
    assert out.scan.ranked[-1] == "pkg/text.py::truncate"


def test_recall_at_n_counts_gold_evidence_in_the_top_n(repo):
    ranked = ["pkg/text.py::truncate", "pkg/mathx.py::mean", "pkg/cache.py::Cache.get"]
    assert recall_at(ranked, repo, 1) == 0.5
    assert recall_at(ranked, repo, 3) == 1.0


def test_scan_settings_are_saved_and_loaded_with_the_program(tmp_path, repo):
    program = TIDE("repository", scan=True, focus_size=3)
    program.scanner.rate.signature = program.scanner.rate.signature.with_instructions("Rate harshly.")
    loaded = load_program(save_program(program, tmp_path / "p.json"))
    assert loaded.scanner is not None and loaded.focus_size == 3
    assert loaded.scanner.rate.signature.instructions == "Rate harshly."
    assert TIDE("repository").scanner is None


def test_a_rating_is_kept_from_an_answer_that_fails_after_it(repo):
    answers = scan_answers()
    answers[3] = {"suspicion": "7 (the reason was cut off", "template_id": "", "reason": ""}
    lm = DummyLM([*answers, {"findings": []}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        out = SingleAgent("repository", scan=True)(repo)
    assert (out.scan.salvaged, out.scan.failures) == (1, 0)
    assert out.scan.suspects[3].score == 7 and out.scan.ranked[2] == "pkg/mathx.py::clamp"


def digit_logprobs(written: str, weights: dict[str, float]) -> dict:
    """An answer's logprobs in OpenAI's shape: the rating step holds `weights` as its alternatives."""
    steps = [{"token": t, "logprob": 0.0, "top_logprobs": []} for t in ['{"', "suspicion", '":', " "]]
    tops = [{"token": t, "logprob": math.log(p)} for t, p in weights.items()]
    steps.append({"token": written, "logprob": tops[0]["logprob"], "top_logprobs": tops})
    steps.append({"token": ",", "logprob": 0.0, "top_logprobs": []})
    return {"content": steps}


def test_expected_rating_weighs_the_digits_and_ignores_other_alternatives():
    weights = {"0": 0.5, "3": 0.2, "9": 0.2, "x": 0.1}  # "x" is not a digit: left out, the rest renormalized
    assert expected_rating(digit_logprobs("0", weights)) == pytest.approx((3 * 0.2 + 9 * 0.2) / 0.9)


def test_expected_rating_is_none_without_a_rating_step():
    assert expected_rating({"content": [{"token": "7", "logprob": 0.0, "top_logprobs": []}]}) is None
    assert expected_rating(None) is None


class LogprobEngine:
    """Answers every scan call with rating 0, and logprobs that weigh 9 more for the artifacts in `suspicious`."""

    supports_response_schema = False
    supported_params = frozenset({"temperature", "max_tokens", "logprobs", "top_logprobs"})

    def __init__(self, suspicious: set[str], refuse_logprobs: bool = False):
        self.suspicious, self.refuse_logprobs = suspicious, refuse_logprobs

    def complete(self, request):
        from dspy.lm15 import Message, Response, TextPart, TokenLogprob, TopLogprob, Usage

        if request.config.logprobs is not None and self.refuse_logprobs:
            raise ValueError("this provider does not support logprobs")
        prompt = request.messages[-1].text
        answer = (
            "[[ ## suspicion ## ]]\n0\n\n[[ ## template_id ## ]]\n\n\n[[ ## reason ## ]]\nok\n\n[[ ## completed ## ]]"
        )
        p9 = (
            0.4 if any(f"### {name} " in prompt.split("[[ ## artifact ## ]]")[-1] for name in self.suspicious) else 0.05
        )
        steps = (TokenLogprob(token="[[ ## suspicion ## ]]\n", logprob=0.0),
                 TokenLogprob(token="0", logprob=math.log(1 - p9),
                              top=(TopLogprob(token="0", logprob=math.log(1 - p9)),
                                   TopLogprob(token="9", logprob=math.log(p9)))))
        return Response(id=None, model="scan", message=Message.assistant([TextPart(answer)]), finish_reason="stop",
                        usage=Usage(input_tokens=10, output_tokens=5), logprobs=steps)

    def stream(self, request):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def dump_state(self):
        return {}

    def close(self):
        pass


def test_scan_ranks_by_the_digits_probabilities_when_every_written_rating_is_zero(repo):
    lm = dspy.LM("llamacpp/scan-test", engine=LogprobEngine({"pkg/mathx.py::mean", "pkg/mathx.py::clamp"}),
                 cache=False)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        record = Scanner("repository")(repo, ContextView.of(repo), guidance="")
    assert {s.rating for s in record.suspects} == {0}
    assert record.from_probabilities == len(repo.artifacts)
    ranked = rank(record.suspects, seed="s").ids
    assert set(ranked[:2]) == {"pkg/mathx.py::mean", "pkg/mathx.py::clamp"}


def test_scan_falls_back_to_written_ratings_when_the_backend_refuses_logprobs(repo):
    lm = dspy.LM("llamacpp/scan-test", engine=LogprobEngine(set(), refuse_logprobs=True), cache=False)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        record = Scanner("repository")(repo, ContextView.of(repo), guidance="")
    assert record.failures == 0 and record.from_probabilities == 0
    assert [s.score for s in record.suspects] == [0] * len(repo.artifacts)


def test_scan_recall_metric_reads_the_scan_and_refuses_a_program_without_one(repo):
    from tide_dspy.optimize import make_metric

    lm = DummyLM([*scan_answers(), {"findings": []}])
    with dspy.context(lm=lm):
        pred = TIDE("repository", max_rounds=1, scan=True, focus_size=2)(repo)
    metric = make_metric("scan-recall")
    assert metric(dspy.Example(case=repo), pred) == 1.0  # both gold functions are rated highest (9 and 8)
    with pytest.raises(ValueError, match="scanning program"):
        metric(dspy.Example(case=repo), dspy.Prediction(findings=[], scan=None))


def test_evaluation_reports_the_mean_scan_recall(repo):
    from tide_dspy.evaluation import evaluate

    lm = DummyLM([*scan_answers(), {"findings": []}])
    with dspy.context(lm=lm):
        result = evaluate(TIDE("repository", max_rounds=1, scan=True, focus_size=2), [repo], lm=lm)
        plain = evaluate(TIDE("repository", max_rounds=1), [repo], lm=DummyLM([{"findings": []}]))
    assert result.scan_recall == 1.0
    assert plain.scan_recall is None


def test_a_baseline_scans_with_the_given_templates_and_rounds_without_them(repo, tmp_path):
    from tide_dspy.schemas import Template

    library = [Template(id="repo-t001", name="Off by one", pattern="a bound one too far", evidence_flow=["look"])]
    program = SingleAgent("repository", scan=True, scan_templates=library)
    lm = DummyLM([*scan_answers(), {"findings": []}])
    with dspy.context(lm=lm):
        program(repo)
    scan_prompt, round_prompt = (lm.history[i]["messages"][-1]["content"] for i in (0, len(repo.artifacts)))
    assert "a bound one too far" in scan_prompt and "a bound one too far" not in round_prompt
    loaded = load_program(save_program(program, tmp_path / "p.json"))
    assert [t.id for t in loaded.scan_templates] == ["repo-t001"] and loaded.templates == []


def test_scan_is_refused_for_a_chance_floor_built_or_loaded(tmp_path):
    from tide_dspy.programs import build_program
    from tide_dspy.workflows import ProgramShape, build_method

    with pytest.raises(ValueError, match="chance floor"):
        build_method(REPOSITORY, "first-listed", ProgramShape(scan=4))
    saved = load_program(save_program(build_program("random", "repository"), tmp_path / "r.json"))
    with pytest.raises(ValueError, match="chance floor"):
        ProgramShape(scan=4).apply_scan(saved)
    assert saved.scanner is None


def test_a_scan_says_how_far_it_is_with_its_rate_and_eta(repo):
    lines = []
    lm = DummyLM([*scan_answers(), {"findings": []}])
    with dspy.context(lm=lm):
        TIDE("repository", max_rounds=1, scan=True)(repo, on_progress=lines.append)
    n = len(repo.artifacts)
    assert lines[0].startswith(f"[scan] 1/{n} artifacts, ") and "/s" in lines[0] and "ETA" in lines[0]
    assert lines[-1].startswith(f"[scan] {n}/{n} artifacts, ") and "ETA" not in lines[-1]
