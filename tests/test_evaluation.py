"""evaluate(): incremental JSONL rows, resume after a crash, failures recorded, config and usage beside results."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import dspy
import pytest
from conftest import FIXTURE_DATA
from routed_lm import RoutedLM, fixture_instances

from tide_dspy import metrics
from tide_dspy.data.selection import data_path, select_instances
from tide_dspy.evaluation import EvaluationSummary, evaluate, format_table, read_rows
from tide_dspy.programs import build_program


class Crash(BaseException):
    """Stands for a kill: not an Exception, so nothing inside evaluate() may swallow it."""


class Flaky(dspy.Module):
    """Runs the wrapped program, except on the instances named in `fail` (raises `error` there)."""

    def __init__(self, inner, fail: set[str], error: BaseException):
        super().__init__()
        self.inner, self.fail, self.error = inner, fail, error

    def forward(self, instance, on_round=None):
        if instance.instance_id in self.fail:
            raise self.error
        return self.inner(instance, on_round=on_round)

    def config(self):
        return self.inner.config()

    def dump_state(self, json_mode=True):  # the same program, so the same state hash in config.json
        return self.inner.dump_state(json_mode)


@pytest.fixture(scope="module")
def train():
    return fixture_instances("workspace", "train")


@dataclass
class Evaluated:
    result: EvaluationSummary
    folder: Path  # results.jsonl, config.json, lm_usage.json
    rows: list[dict]

    def read(self, name: str) -> dict:
        return json.loads((self.folder / name).read_text())


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, train) -> Evaluated:
    """Method iter (T=2, k=2) evaluated once on the two train workspaces with the proxy judge. The routed LM answers
    with gold problems: 4 of each instance's 5 found, all precise."""
    out = tmp_path_factory.mktemp("evaluated") / "run" / "results.jsonl"
    program = build_program("iter", "workspace", max_rounds=2, per_round=2)
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    result = evaluate(program, train, judge="proxy", out_path=out, lm=RoutedLM(train), progress=False)
    return Evaluated(result, out.parent, [json.loads(line) for line in out.read_text().splitlines()])


def test_evaluate_writes_one_row_per_instance_in_order(evaluated, train):
    assert [r["instance_id"] for r in evaluated.rows] == [i.instance_id for i in train]


def test_a_row_holds_the_instance_method_findings_rounds_score_and_error(evaluated):
    assert set(evaluated.rows[0]) >= {"instance_id", "method", "findings", "rounds", "score", "seconds", "error"}


def test_a_row_names_its_method_and_no_error(evaluated):
    assert evaluated.rows[0]["method"] == "iter" and evaluated.rows[0]["error"] is None


def test_a_row_keeps_every_round_and_finding(evaluated):
    assert len(evaluated.rows[0]["findings"]) == 4 and len(evaluated.rows[0]["rounds"]) == 2


def test_finding_nothing_scores_zero(train):
    scores = [metrics.score_instance(i.problems, [], judge=metrics.ProxyJudge()) for i in train]
    assert metrics.aggregate(scores)["f1"]["retrieval"] == 0


def test_evaluate_aggregates_coverage_and_precision(evaluated):
    assert evaluated.result.coverage["retrieval"] == pytest.approx(0.8)
    assert evaluated.result.precision["retrieval"] == pytest.approx(1.0)


def test_evaluate_counts_the_instances_run_and_failed(evaluated):
    result = evaluated.result
    assert (result.n_instances, result.n_run, result.n_failed) == (2, 2, 0)


def test_config_json_names_the_method_judge_and_instances(evaluated, train):
    config = evaluated.read("config.json")
    assert config["method"] == "iter" and config["judge"] == "proxy-lexical"
    assert config["instances"] == [i.instance_id for i in train]


def test_lm_usage_json_counts_the_backbone_calls_and_tokens(evaluated):
    usage = evaluated.read("lm_usage.json")["backbone"]
    assert usage["calls"] == 4 and usage["prompt_tokens"] == 40


def test_format_table_shows_the_scores_as_percentages(evaluated):
    assert "| retrieval | 80.00 | 100.00 |" in format_table(evaluated.result)


def test_resume_after_a_crash_reruns_only_unfinished_instances(tmp_path, train):
    program = build_program("iter", "workspace", max_rounds=2, per_round=2)
    out = tmp_path / "results.jsonl"
    first, second = train
    with pytest.raises(Crash):
        evaluate(Flaky(program, {second.instance_id}, Crash()), train, out_path=out, lm=RoutedLM(train),
                 progress=False, method="iter")
    assert list(read_rows(out)) == [first.instance_id]  # the finished instance survived the crash
    lm = RoutedLM(train)
    result = evaluate(program, train, out_path=out, lm=lm, progress=False, resume=True)
    assert lm.calls == 2  # only the second instance ran (two rounds)
    assert result.n_resumed == 1 and result.n_run == 1 and result.n_instances == 2
    assert list(read_rows(out)) == [first.instance_id, second.instance_id]
    # resume=False starts over.
    evaluate(program, train[:1], out_path=out, lm=RoutedLM(train), progress=False, resume=False)
    assert list(read_rows(out)) == [first.instance_id]


def test_a_resumed_run_adds_instances_and_usage_and_refuses_another_config(tmp_path, train):
    program = build_program("iter", "workspace", max_rounds=2, per_round=2)
    out = tmp_path / "results.jsonl"
    first, second = train
    evaluate(program, [first], out_path=out, lm=RoutedLM(train), progress=False)
    evaluate(program, [second], out_path=out, lm=RoutedLM(train), progress=False, resume=True)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["instances"] == [first.instance_id, second.instance_id]
    assert json.loads((tmp_path / "lm_usage.json").read_text())["backbone"]["calls"] == 4  # two sessions of 2 calls
    assert json.loads((tmp_path / "summary.json").read_text())["instances"] == [second.instance_id]

    other = build_program("iter", "workspace", max_rounds=3, per_round=2)
    with pytest.raises(
        ValueError, match=r"config.json: the rows here came from another run configuration \(differs in program"
    ):
        evaluate(other, train, out_path=out, lm=RoutedLM(train), progress=False, resume=True)
    evaluate(other, train[:1], out_path=out, lm=RoutedLM(train), progress=False, resume=False)  # starting over is fine


def test_a_failing_instance_is_recorded_scored_zero_and_rerun_on_resume(tmp_path, train):
    program = build_program("iter", "workspace", max_rounds=1, per_round=5)
    out = tmp_path / "results.jsonl"
    first, second = train
    result = evaluate(Flaky(program, {first.instance_id}, RuntimeError("boom")), train, out_path=out,
                      lm=RoutedLM(train), progress=False, method="iter")
    rows = read_rows(out)
    assert rows[first.instance_id]["error"] == "RuntimeError: boom"
    assert rows[first.instance_id]["score"]["f1"]["retrieval"] == 0
    assert rows[second.instance_id]["error"] is None
    assert result.n_failed == 1 and result.f1["retrieval"] == pytest.approx(0.5)
    result = evaluate(program, train, out_path=out, lm=RoutedLM(train), progress=False, resume=True)
    assert result.n_run == 1 and result.n_failed == 0 and result.f1["retrieval"] == pytest.approx(1.0)


def test_a_cut_last_line_is_ignored(tmp_path):
    out = tmp_path / "results.jsonl"
    row = {
        "instance_id": "a",
        "score": metrics.score_instance([], [], setting="workspace").model_dump(),
        "findings": [],
    }
    out.write_text(json.dumps(row) + "\n" + '{"instance_id": "b", "sco')
    assert list(read_rows(out)) == ["a"]


def test_judge_none_leaves_judged_components_unscored(train, tmp_path):
    program = build_program("iter", "workspace", max_rounds=1, per_round=1)
    result = evaluate(program, train[:1], judge=None, lm=RoutedLM(train), progress=False)
    assert result.f1["identification"] is None and result.f1["retrieval"] > 0
    assert "| identification | - | - | - |" in format_table(result)


def test_select_instances_by_context_size(repository_instance, workspace_instance):
    from tide_dspy.data.selection import context_tokens

    small, large = sorted([repository_instance, workspace_instance], key=context_tokens)
    assert select_instances([large, small], max_context_tokens=context_tokens(small)) == [small]
    assert select_instances([large, small], max_context_tokens=10**9) == [small, large]
    assert select_instances([large, small], limit=1) == [large]


def test_data_path_resolution(tmp_path, monkeypatch):
    shutil.copytree(FIXTURE_DATA / "workspace", tmp_path / "workspace")
    monkeypatch.setenv("TIDE_DATA", str(tmp_path))
    assert data_path("workspace") == tmp_path / "workspace"
    assert data_path("workspace", tmp_path / "workspace" / "workspaces.jsonl") == tmp_path / "workspace" / \
        "workspaces.jsonl"
    with pytest.raises(FileNotFoundError, match="TIDE_DATA"):
        data_path("repository")


def test_repository_instance_scores_with_patches(repository_instance):
    program = build_program("iter", "repository", max_rounds=3, per_round=1)
    result = evaluate(program, [repository_instance], judge="proxy", lm=RoutedLM([repository_instance]),
                      progress=False)
    n = len(repository_instance.problems)
    assert result.coverage["retrieval"] == pytest.approx(min(3, n) / n)
    assert result.precision["retrieval"] == pytest.approx(1.0)
    assert result.f1["resolution"] > 0.9  # the gold patch itself, judged by the proxy
