"""evaluate(workers=N): instances run concurrently, rows still land one per instance as each finishes, resume holds."""

from __future__ import annotations

import json
import threading
import time

import dspy
import pytest
from routed_lm import RoutedLM, fixture_instances

from scripts import load_script
from tide_dspy.evaluation import check_workers, evaluate, read_rows
from tide_dspy.programs import build_program


class Slow(dspy.Module):
    """Runs the wrapped program after a pause, counting how many instances are inside at once; raises `error` on
    the instances named in `fail` (after the pause)."""

    def __init__(self, inner, pause: float, fail: set[str] = frozenset(), error: BaseException | None = None):
        super().__init__()
        self.inner, self.pause, self.fail, self.error = inner, pause, set(fail), error
        self.inside = self.most_inside = 0
        self.lock = threading.Lock()

    def forward(self, instance, on_round=None):
        with self.lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            time.sleep(self.pause * (2 if instance.instance_id in self.fail else 1))
            if instance.instance_id in self.fail:
                raise self.error
            return self.inner(instance, on_round=on_round)
        finally:
            with self.lock:
                self.inside -= 1

    def config(self):
        return self.inner.config()

    def dump_state(self, json_mode=True):  # the same program, so the same state hash in config.json
        return self.inner.dump_state(json_mode)


class Crash(BaseException):
    """Stands for a kill."""


@pytest.fixture(scope="module")
def train():
    return fixture_instances("workspace", "train")


def test_workers_run_instances_at_once_with_the_callers_lm(tmp_path, train):
    program = build_program("iter", "workspace", max_rounds=2, per_round=2)
    serial = evaluate(program, train, out_path=tmp_path / "one" / "results.jsonl", lm=RoutedLM(train), progress=False)
    slow = Slow(program, pause=0.3)
    # The LM comes only from dspy.context in the caller's thread: the worker threads must see it too.
    with dspy.context(lm=RoutedLM(train)):
        parallel = evaluate(slow, train, out_path=tmp_path / "two" / "results.jsonl", progress=False, workers=2,
                            method="iter")
    assert slow.most_inside == 2
    rows = read_rows(tmp_path / "two" / "results.jsonl")
    assert sorted(rows) == sorted(i.instance_id for i in train)
    assert all(r["error"] is None for r in rows.values())
    assert parallel.f1 == serial.f1 and parallel.n_run == 2
    assert parallel.lm_usage["backbone"]["calls"] == serial.lm_usage["backbone"]["calls"] == 4


def test_rows_of_finished_instances_survive_a_crash_and_resume_runs_the_rest(tmp_path, train):
    program = build_program("iter", "workspace", max_rounds=2, per_round=2)
    out = tmp_path / "results.jsonl"
    first, second = train
    with pytest.raises(Crash):
        evaluate(Slow(program, 0.2, {second.instance_id}, Crash()), train, out_path=out, lm=RoutedLM(train),
                 progress=False, workers=2, method="iter")
    assert list(read_rows(out)) == [first.instance_id]
    lm = RoutedLM(train)
    result = evaluate(program, train, out_path=out, lm=lm, progress=False, resume=True, workers=2)
    assert lm.calls == 2 and result.n_resumed == 1 and result.n_run == 1
    assert sorted(read_rows(out)) == sorted([first.instance_id, second.instance_id])


def test_the_progress_bar_counts_instances_and_lm_tokens(train, capsys):
    program = build_program("iter", "workspace", max_rounds=1, per_round=1)
    evaluate(program, train, lm=RoutedLM(train), progress=True, workers=2)
    err = capsys.readouterr().err
    assert "2/2" in err and "LM tokens in 20 out 10" in err


def test_workers_must_be_positive_and_the_embedded_engine_says_it_serializes(capsys, monkeypatch):
    from tide_dspy import evaluation
    from tide_dspy.backbones.llamacpp import LlamaCppEngine

    monkeypatch.setattr(evaluation, "_noted_serial", [])
    with pytest.raises(ValueError, match="--workers must be a whole number >= 1"):
        check_workers(0, None)
    embedded = dspy.LM("llamacpp/test", engine=LlamaCppEngine("qwen2.5-coder-0.5b-instruct", llama=object()))
    assert check_workers(1, embedded) == 1 and capsys.readouterr().err == ""
    assert check_workers(4, embedded) == 4
    assert "embedded llama.cpp backbone: its calls take turns" in capsys.readouterr().err
    check_workers(4, embedded)
    assert capsys.readouterr().err == ""  # said once per process
    check_workers(4, RoutedLM([]))
    assert capsys.readouterr().err == ""


def test_the_workers_bench_overlaps_calls_on_the_stub(tmp_path, capsys):
    bench = load_script("bench_workers")
    assert bench.main(["--instances", "4", "--delay", "0.3", "--workers", "4", "--out", str(tmp_path)]) == 0
    result = json.loads(next(tmp_path.glob("*.json")).read_text())
    serial, parallel = result["runs"]
    assert serial["requests"] == parallel["requests"] >= 4 and serial["failed"] == parallel["failed"] == 0
    assert serial["most_in_flight"] == 1 and parallel["most_in_flight"] == 4
    assert result["speedup"] > 2
    assert "STUB endpoint (no model)" in capsys.readouterr().out
