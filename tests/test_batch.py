"""Batch mode (tide_dspy.batch) driven through the provider simulator's batch APIs, with simulated time compressed:
batched requests are the online requests, a run gives the same findings batched or not, a T-round TIDE run sends
at most T backbone batches, failed lines are sent again alone, and a stopped run resumes from its ledger without
sending a batch twice. Nothing here asserts a timing: batches are sent when every worker waits (the window, the
fallback, is a minute), and simulated time runs 36,000 times faster than real time."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import dspy
import pytest
from dspy.utils.exceptions import LMInvalidRequestError

from tide_dspy.backbones import get_lm
from tide_dspy.backbones.batch_rules import OPENAI_BATCH
from tide_dspy.batch import LEDGER, BatchSettings, Collector, Ledger, batch_judge, batch_lm
from tide_dspy.data.selection import Selection
from tide_dspy.domains import get_setting
from tide_dspy.evaluation import evaluate
from tide_dspy.metrics.judges import LLMJudge
from tide_dspy.testing.provider_sim import Fault, ProviderSimulator
from tide_dspy.workflows import ProgramShape, evaluation_program

KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY",
           "dashscope": "DASHSCOPE_API_KEY"}
BACKBONE = {"openai": "gpt-5-mini", "anthropic": "claude-sonnet-4.5", "gemini": "gemini-3.5-flash"}
DATA = {"workspace": "tests/fixtures/instances/workspace/workspaces.jsonl",
        "repository": "tests/fixtures/instances/repository/instances.jsonl"}
TEMPLATES = {"workspace": "programs/workspace/local/templates.json",
             "repository": "programs/repository/local/templates.json"}
# A request without workers holding the collector waits the window (a tenth of a second here); a whole evaluation
# holds it, and its window is a minute (the fallback, never reached).
FAST = BatchSettings(window=0.1, poll_initial=0.02, poll_max=0.05)


@pytest.fixture
def sim(monkeypatch):
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL", "GEMINI_API_BASE",
                 "GEMINI_BASE_URL", "TIDE_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    with ProviderSimulator() as simulator:
        simulator.batches.plan.speed = 36_000  # a batch of 5 simulated minutes takes a hundredth of a second
        for provider, env in KEY_ENV.items():
            monkeypatch.setenv(env, simulator.keys[provider])
        yield simulator


def collector(tmp_path=None, **settings) -> Collector:
    lines = []
    col = Collector(BatchSettings(**{**FAST.__dict__, **settings}), Ledger.open(tmp_path), progress=lines.append)
    col.lines = lines
    return col


def hosted(sim, provider: str, **kw):
    return get_lm(BACKBONE[provider], api_base=sim.base_url(provider), **kw)


def in_threads(calls):
    """Run each call in its own thread; their results (or exceptions) in order."""
    out = [None] * len(calls)

    def run(i, call):
        try:
            out[i] = call()
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            out[i] = exc
    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


# ---- the requests ----

@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_a_batched_request_is_the_online_request(sim, provider):
    hosted(sim, provider, cache=False)("Say hello.")
    online = sim.log[-1].body
    with collector() as col:
        batch_lm(hosted(sim, provider, cache=False), col)("Say hello.")
    line = next(r for r in sim.log if r.batch)
    assert line.body == online


def test_claude_keeps_its_prompt_cache_marks_in_a_batch(sim):
    program = dspy.Predict("context, question -> answer")
    with collector() as col:
        lm = batch_lm(hosted(sim, "anthropic", cache=False), col)
        with dspy.context(lm=lm):
            program(context="The static part. " * 400, question="what?")
    line = next(r for r in sim.log if r.batch)
    assert "cache_control" in json.dumps(line.body)


def test_an_answer_in_dspys_cache_is_not_sent_again(sim):
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    with collector() as col:
        lm = batch_lm(hosted(sim, "openai"), col)
        first, second = lm("Say hello once."), lm("Say hello once.")
    assert first == second
    assert sum(1 for r in sim.log if r.batch) == 1 and col.summary()["backbone"]["lines"] == 1


def test_a_provider_base_variable_is_where_the_batch_goes(sim, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", sim.base_url("openai"))  # online, this sends through LiteLLM
    with collector() as col:
        answer = batch_lm(get_lm("gpt-5-mini", cache=False), col)("hello")
    assert isinstance(answer, list) and [j.provider for j in sim.batches.received()] == ["openai"]


def test_dashscope_is_refused_with_the_reason(sim):
    with collector() as col, pytest.raises(ValueError, match="LiteLLM"):
        batch_lm(get_lm("qwen-3.6-flash"), col)


def test_a_local_backbone_has_no_batch_api():
    with collector() as col, pytest.raises(ValueError, match="no batch API"):
        batch_lm(dspy.utils.DummyLM([{"answer": "x"}]), col)


# ---- gathering ----

def test_the_queue_waits_until_every_worker_waits(sim):
    lm_release = threading.Event()
    with collector(window=60) as col:
        lm = batch_lm(hosted(sim, "openai", cache=False), col)
        col.expect(2)

        def first():
            with col.holding():
                return lm("first")

        def second():
            with col.holding():
                lm_release.wait()
                return lm("second")
        results = []
        t = threading.Thread(target=lambda: results.append(in_threads([first, second])))
        t.start()
        while not col.queued:  # the first request is queued ...
            threading.Event().wait(0.01)
        assert sim.batches.received() == []  # ... and not sent while the second worker is still busy
        lm_release.set()
        t.join()
    assert [len(j.lines) for j in sim.batches.received()] == [2]


def test_a_group_larger_than_the_providers_limit_goes_as_several_batches(sim):
    with collector() as col:
        lm = hosted(sim, "openai", cache=False)
        lm.tide_rules = replace(lm.tide_rules, batch=replace(OPENAI_BATCH, max_requests=2))
        batched = batch_lm(lm, col)
        in_threads([lambda i=i: batched(f"request {i}") for i in range(5)])
    assert sorted(len(j.lines) for j in sim.batches.received()) == [1, 2, 2]


def test_judge_batches_are_counted_apart(sim):
    with collector() as col:
        backbone = batch_lm(hosted(sim, "openai", cache=False), col)
        judge = batch_lm(hosted(sim, "openai", cache=False), col, role="judge")
        in_threads([lambda: backbone("a backbone call"), lambda: judge("a judge call")])
    summary = col.summary()
    assert summary["backbone"]["batches"] == 1 and summary["judge"]["batches"] == 1
    assert set(summary["backbone"]["batch_ids"]).isdisjoint(summary["judge"]["batch_ids"])


def test_progress_names_each_batch_in_flight_its_state_and_age(sim):
    sim.batches.plan.speed = 1.0  # the batch stays in flight
    with collector() as col:
        lm = batch_lm(hosted(sim, "openai", cache=False), col)
        thread = threading.Thread(target=lambda: in_threads([lambda: lm("slow")]))
        thread.start()
        while not col.in_flight():
            threading.Event().wait(0.01)
        line = col.status_line()
        sim.batches.advance(sim.batches.plan.seconds)
        thread.join()
    batch = sim.batches.received()[0].id
    assert line.startswith("batches in flight: 1 (backbone openai/gpt-5-mini " + batch)
    assert any(" 0m0" in entry for entry in col.lines)  # the age, in minutes and seconds


# ---- failed lines ----

def test_a_partly_failed_batch_sends_its_failed_lines_again_alone(sim):
    sim.batches.plan.line_faults.append(Fault(500, count=1))
    with collector() as col:
        lm = batch_lm(hosted(sim, "openai", cache=False), col)
        answers = in_threads([lambda i=i: lm(f"request {i}") for i in range(3)])
    assert all(isinstance(a, list) for a in answers), answers
    assert [len(j.lines) for j in sim.batches.received()] == [3, 1]
    assert col.summary()["backbone"]["retried"] == 1


def test_an_expired_line_is_sent_again(sim):
    sim.batches.plan.seconds = 30 * 3600  # the first batch runs past its 24-hour window
    with collector() as col:
        lm = batch_lm(hosted(sim, "openai", cache=False), col)
        sim_plan = sim.batches.plan

        def shorten_after_first():
            while not sim.batches.received():
                threading.Event().wait(0.01)
            sim_plan.seconds = 300.0
        threading.Thread(target=shorten_after_first).start()
        answers = in_threads([lambda i=i: lm(f"request {i}") for i in range(2)])
    assert all(isinstance(a, list) for a in answers), answers
    first, second = sim.batches.received()
    assert len(first.lines) == 2 and len(second.lines) == 1  # only the expired one went again


def test_a_line_refused_for_what_it_asks_is_not_sent_again(sim):
    sim.batches.plan.line_faults.append(Fault(400, count=1))
    with collector() as col:
        lm = batch_lm(hosted(sim, "openai", cache=False), col)
        with pytest.raises(LMInvalidRequestError):
            lm("hello")
    assert len(sim.batches.received()) == 1 and col.summary()["backbone"]["retried"] == 0


def test_a_line_that_keeps_failing_gives_up_after_its_attempts(sim):
    sim.batches.plan.line_faults.append(Fault(503, count=10))
    with collector(line_attempts=2) as col:
        lm = batch_lm(hosted(sim, "openai", cache=False), col)
        with pytest.raises(Exception, match="after 2 batch"):
            lm("doomed")
    assert len(sim.batches.received()) == 2


def test_a_batch_the_provider_refuses_fails_its_callers_at_once(sim, monkeypatch):
    lm = hosted(sim, "openai", cache=False)
    monkeypatch.setenv("OPENAI_API_KEY", "not-the-key")
    with collector() as col:
        with pytest.raises(Exception, match="did not accept the batch"):
            batch_lm(lm, col)("hello")
    assert sim.batches.received() == []


# ---- the ledger ----

def test_a_request_answered_in_an_earlier_session_is_answered_from_the_ledger(sim, tmp_path):
    with collector(tmp_path) as col:
        first = batch_lm(hosted(sim, "openai", cache=False), col)("remember me")
    with collector(tmp_path) as col:
        again = batch_lm(hosted(sim, "openai", cache=False), col)("remember me")
    assert again == first and len(sim.batches.received()) == 1
    assert col.summary()["backbone"]["replayed"] == 1


def test_a_stopped_session_resumes_its_batch_in_flight_without_sending_it_again(sim, tmp_path):
    sim.batches.plan.speed = 1.0  # the batch stays in flight until the test moves time on
    col = collector(tmp_path)
    lm = batch_lm(hosted(sim, "openai", cache=False), col)
    stopped = threading.Thread(target=lambda: in_threads([lambda: lm("in flight")]))
    stopped.start()
    while not (tmp_path / LEDGER).exists():
        threading.Event().wait(0.01)
    col.close()  # the session stops; its batch stays with the provider
    stopped.join()
    sim.batches.advance(sim.batches.plan.seconds)
    with collector(tmp_path) as col:
        answer = batch_lm(hosted(sim, "openai", cache=False), col)("in flight")
    assert isinstance(answer, list) and len(sim.batches.received()) == 1
    assert col.summary()["backbone"]["resumed"] == 1 and col.summary()["backbone"]["batches"] == 0


def test_the_ledger_holds_no_key(sim, tmp_path):
    with collector(tmp_path) as col:
        batch_lm(hosted(sim, "openai", cache=False), col)("hello")
    assert sim.keys["openai"] not in (tmp_path / LEDGER).read_text()


# ---- a whole evaluation ----

class HeldJudge(LLMJudge):
    """The judge as evaluate runs it with --batch: batched (batch_judge), each rating holding the collector while
    it waits."""

    def __init__(self, lm, col: Collector):
        super().__init__(lm)
        self.col = col
        batch_judge(self, col)

    def __call__(self, *args, **kwargs):
        with self.col.holding():
            return super().__call__(*args, **kwargs)


def run_evaluation(sim, provider: str, setting: str, rounds: int, batched: bool, tmp_path, judge: bool = False):
    """One TIDE evaluation of the setting's test instances, every instance in flight; (result, rows, collector)."""
    selection = Selection(setting=get_setting(setting), split="test", data=DATA[setting])
    instances = selection.load()
    program, _, _ = evaluation_program(selection, backbone=BACKBONE[provider], program=None, method="tide",
                                       shape=ProgramShape(rounds=rounds), templates=TEMPLATES[setting],
                                       programs="programs")
    lm, judge_lm, col = hosted(sim, provider), hosted(sim, provider), None
    if batched:
        col = collector(window=60)
        lm = batch_lm(lm, col)
        forward = program.forward

        def held(*args, **kwargs):  # what evaluate does with --batch: each instance in flight holds the collector
            with col.holding():
                return forward(*args, **kwargs)
        program.forward = held
        col.expect(len(instances))
    rater = (HeldJudge(judge_lm, col) if batched else LLMJudge(judge_lm)) if judge else "proxy"
    out = tmp_path / ("batch" if batched else "online") / "results.jsonl"
    try:
        result = evaluate(program, instances, judge=rater, lm=lm, workers=len(instances), progress=False,
                          out_path=out, method="tide")
    finally:
        if col is not None:
            col.close()
    rows = {r["instance_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    return result, rows, col


@pytest.mark.paper  # a run of T rounds, online and batched, per provider: the paper lane
@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_a_batched_run_finds_what_the_online_run_finds_in_at_most_t_batches(sim, tmp_path, provider):
    online, online_rows, _ = run_evaluation(sim, provider, "workspace", 3, False, tmp_path)
    batched, batched_rows, col = run_evaluation(sim, provider, "workspace", 3, True, tmp_path)
    assert batched.n_failed == 0 and sim.rejected() == []
    assert {k: r["findings"] for k, r in batched_rows.items()} == {k: r["findings"] for k, r in online_rows.items()}
    assert batched.coverage == online.coverage
    jobs = [j for j in sim.batches.received(provider) if any(line.kind == "findings" for line in j.lines)]
    assert 1 <= len(jobs) <= 3 and col.summary()["backbone"]["batches"] == len(jobs)


@pytest.mark.paper
@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
@pytest.mark.parametrize("setting,rounds", [("workspace", 10), ("repository", 3)])
def test_the_papers_settings_batched_match_online_with_a_batched_judge(sim, tmp_path, provider, setting, rounds):
    online, online_rows, _ = run_evaluation(sim, provider, setting, rounds, False, tmp_path, judge=True)
    batched, batched_rows, col = run_evaluation(sim, provider, setting, rounds, True, tmp_path, judge=True)
    assert batched.n_failed == 0 and batched.judge_failures == 0 and sim.rejected() == []
    assert {k: r["findings"] for k, r in batched_rows.items()} == {k: r["findings"] for k, r in online_rows.items()}
    assert batched.coverage == online.coverage and batched.f1 == online.f1
    summary = col.summary()
    assert 1 <= summary["backbone"]["batches"] <= rounds and summary["judge"]["batches"] >= 1
    judged = [line for j in sim.batches.received(provider) for line in j.lines if line.kind == "judge"]
    assert len(judged) == summary["judge"]["lines"]


@pytest.mark.paper  # two processes per provider: about 20 s each
@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_a_run_killed_while_its_batch_is_in_flight_resumes_without_sending_it_again(sim, tmp_path, provider):
    sim.batches.plan.speed = 1.0  # the first batch (five simulated minutes) is still in flight when the run dies
    out = tmp_path / "run"
    command = [sys.executable, str(Path(__file__).parent / "batch_run.py"), provider, sim.base_url(provider),
               str(out), "3"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not (out / LEDGER).exists() or '"submitted"' not in (out / LEDGER).read_text():
            assert first.poll() is None, first.communicate()
            threading.Event().wait(0.05)
    finally:
        first.kill()  # SIGKILL: no cleanup of any kind
        first.communicate()
    in_flight = sim.batches.received(provider)
    assert len(in_flight) == 1 and not (out / "results.jsonl").exists()
    sim.batches.plan.seconds = 1.0  # later batches finish within a real second
    sim.batches.advance(300.0)  # the batch in flight has ended meanwhile
    second = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    report = json.loads(second.stdout.strip().splitlines()[-1])
    sent_before = {line.custom_id for line in in_flight[0].lines}
    sent_after = {line.custom_id for job in sim.batches.received(provider)[1:] for line in job.lines}
    assert sent_before and not sent_before & sent_after  # nothing the killed run sent went again
    assert report["summary"]["backbone"]["resumed"] == len(sent_before) and report["n_failed"] == 0
    rows = [json.loads(r) for r in (out / "results.jsonl").read_text().splitlines()]
    assert rows and all(r["error"] is None and r["findings"] for r in rows)


def test_batch_judge_batches_an_llm_judge_and_leaves_the_proxy_judge_alone(sim):
    from tide_dspy.metrics.judges import ProxyJudge

    with collector() as col:
        judge = batch_judge(LLMJudge(hosted(sim, "openai")), col)
        proxy = ProxyJudge()
        assert batch_judge(proxy, col) is proxy
    assert judge.lm.tide_batch == "judge"


def test_a_ledger_line_cut_off_by_a_kill_is_skipped_with_its_line_named(tmp_path, caplog):
    (tmp_path / LEDGER).write_text('{"event": "answer", "key": "k-0", "batch": "b", "status": 200, "body": "{}"}\n'
                                   '{"event": "answer", "key": "k-1", "bat')
    ledger = Ledger.open(tmp_path)
    assert set(ledger.answers) == {"k-0"} and "line 2" in caplog.text
