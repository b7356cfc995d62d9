"""`--traces` through the provider simulator: a tracked `tide evaluate` leaves one MLflow LM span per LM call made
(backbone and judge, cache hits included and marked), each tagged with its instance and round; with tracking off
the calls go to a JSONL per instance. The key in the environment is in no trace."""

from __future__ import annotations

import json

import dspy
import pytest

from tide_dspy.cli.main import main
from tide_dspy.testing.provider_sim import ProviderSimulator

WORKSPACES = "tests/fixtures/instances/workspace/workspaces.jsonl"
TEMPLATES = "programs/workspace/local/templates.json"
FAKE_KEY = "sk-fake-TRACE-SECRET-0123456789"


@pytest.fixture
def sim(monkeypatch, tmp_path):
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "TIDE_API_BASE", "TIDE_TEMPERATURE", "TIDE_MAX_TOKENS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    with ProviderSimulator(keys={"openai": FAKE_KEY}) as simulator:
        monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
        yield simulator


def evaluate(sim, out, *extra: str) -> dict:
    """One `tide evaluate --traces` of TIDE (3 rounds) on one workspace, judged by gpt-5-mini; its LM usage."""
    assert main(["evaluate", "--setting", "workspace", "--data", WORKSPACES, "--ids", "ws-tiny", "--method", "tide",
                 "--templates", TEMPLATES, "--rounds", "3", "--backbone", "gpt-5-mini", "--judge", "gpt-5-mini",
                 "--api-base", sim.base_url("openai"), "--judge-api-base", sim.base_url("openai"), "--traces",
                 "--fresh", "--out", str(out), *extra]) == 0
    usage = json.loads((out / "lm_usage.json").read_text())
    return {"calls": usage["backbone"]["calls"] + usage["judge"]["calls"], "backbone": usage["backbone"]["calls"]}


def lm_spans(run_id: str) -> list:
    """The run's LM-call spans (MLflow's DSPy tracing names them <LM class>.__call__), each checked to carry what
    the recorder adds."""
    import mlflow

    traces = mlflow.search_traces(run_id=run_id, return_type="list")
    spans = [s for t in traces for s in t.data.spans if s.name.endswith(".__call__")
             and s.span_type in ("CHAT_MODEL", "LLM")]
    assert all("tide.cache_hit" in s.attributes and "tide.instance_id" in s.attributes for s in spans)
    return spans


def runs() -> list:
    import mlflow

    experiment = mlflow.get_experiment_by_name("tide-dspy")
    return mlflow.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"],
                              output_format="list")


def test_a_tracked_run_has_one_mlflow_span_per_lm_call_cache_hits_marked_and_no_key(sim, tmp_path, capfd):
    import mlflow

    dspy.configure_cache(enable_memory_cache=True, enable_disk_cache=False)
    first = evaluate(sim, tmp_path / "first")
    assert "traces: about" in capfd.readouterr().err  # the size is said before the run
    sent = len(sim.requests("openai", "findings")) + len(sim.requests("openai", "judge"))
    second = evaluate(sim, tmp_path / "second")  # the same prompts again: DSPy's cache answers every one
    assert len(sim.requests("openai", "findings")) + len(sim.requests("openai", "judge")) == sent
    fresh, cached = (lm_spans(run.info.run_id) for run in runs())
    assert first["calls"] > first["backbone"] >= 3 and second["calls"] == first["calls"]
    assert len(fresh) == first["calls"] and not any(s.attributes["tide.cache_hit"] for s in fresh)
    assert len(cached) == second["calls"] and all(s.attributes["tide.cache_hit"] for s in cached)
    rounds = sorted(s.attributes["tide.round"] for s in fresh if s.attributes.get("tide.role") == "round")
    assert rounds == [1, 2, 3] and {s.attributes["tide.instance_id"] for s in fresh} == {"ws-tiny"}
    assert {s.attributes["tide.role"] for s in fresh} == {"round", "judge"}
    assert all(s.attributes.get("tide.input_tokens") for s in fresh)
    fresh_rounds, cached_rounds = (json.loads((tmp_path / run / "results.jsonl").read_text())["rounds"]
                                   for run in ("first", "second"))
    assert all(r["cache_hits"] == 0 and r["cost_usd"] > 0 for r in fresh_rounds)
    assert all(r["cache_hits"] == r["lm_calls"] == 1 and r["cost_usd"] is None for r in cached_rounds)
    everything = json.dumps([t.to_json() for run in runs()
                             for t in mlflow.search_traces(run_id=run.info.run_id, return_type="list")])
    assert "ws-tiny" in everything and FAKE_KEY not in everything


def test_with_tracking_off_each_instance_gets_a_jsonl_of_its_calls(sim, tmp_path):
    made = evaluate(sim, tmp_path / "out", "--no-track")
    path = tmp_path / "out" / "traces" / "ws-tiny.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == made["calls"] and [r["round"] for r in records if r["role"] == "round"] == [1, 2, 3]
    assert all(r["instance_id"] == "ws-tiny" and r["cache_hit"] is False and r["messages"] and r["answer"]
               for r in records)
    assert FAKE_KEY not in path.read_text()


def test_without_traces_nothing_is_recorded(sim, tmp_path):
    assert main(["evaluate", "--setting", "workspace", "--data", WORKSPACES, "--ids", "ws-tiny", "--method",
                 "single", "--backbone", "gpt-5-mini", "--judge", "proxy", "--api-base", sim.base_url("openai"),
                 "--no-track", "--out", str(tmp_path / "out")]) == 0
    assert not (tmp_path / "out" / "traces").exists()
    assert not any(type(c).__name__ == "TraceRecorder" for c in dspy.settings.callbacks)


@pytest.mark.paper  # experiments/run.py end to end against the simulator: the paper lane
def test_run_py_traces_every_lm_call_of_its_raw_runs(sim, tmp_path, monkeypatch):
    from scripts import load_script

    monkeypatch.setenv("TIDE_DATA", "tests/fixtures/instances")
    out = tmp_path / "out"
    assert load_script("run").main([
        "table1", "--setting", "workspace", "--instances", "ws-tiny", "--methods", "single", "tide", "--rounds", "2",
        "--templates", TEMPLATES, "--backbone", "gpt-5-mini", "--judge", "proxy", "--api-base",
        sim.base_url("openai"), "--traces", "--out", str(out)]) == 0
    calls = sum(rd["lm_calls"] for method in ("single", "tide")
                for rd in json.loads((out / "raw" / method / "run0.jsonl").read_text())["rounds"])
    (run,) = runs()
    spans = lm_spans(run.info.run_id)
    assert len(spans) == calls == 3 and {s.attributes["tide.method"] for s in spans} == {"single", "tide"}


def test_a_compiles_autologging_keeps_the_traces_on(tmp_path, monkeypatch):
    from dspy.utils.dummies import DummyLM

    from tide_dspy import tracing
    from tide_dspy.tracking import dspy_autolog, tracked_run

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    lm = DummyLM([{"answer": "a"}] * 3)
    predict = dspy.Predict("question -> answer")
    with tracked_run("compile", setting="workspace", backbone="dummy") as run:
        with tracing.traces(True, tracking=True), tracing.scope(instance_id="ws-1"):
            with dspy_autolog(True):  # what compile --autolog wraps the optimizer in
                with dspy.context(lm=lm):
                    predict(question="inside the optimizer")
            with dspy.context(lm=lm):
                predict(question="after it")
        run_id = run.info.run_id
    assert len(lm_spans(run_id)) == 2 == len(lm.history)
    assert not tracing.mlflow_traces_on()


def test_an_untracked_compile_traces_every_call_to_jsonl(tmp_path, monkeypatch, capfd):
    from dspy.clients.base_lm import GLOBAL_HISTORY
    from routed_lm import FIXTURE_DATA, RoutedLM, fixture_instances

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TIDE_DATA", str(FIXTURE_DATA))
    library = tmp_path / "templates.json"
    library.write_text(json.dumps({"setting": "workspace", "templates": [
        {"id": "ws-t01", "name": "n", "pattern": "p", "evidence_flow": ["a", "b"]}]}))
    dspy.configure(lm=RoutedLM(fixture_instances("workspace")))
    before = GLOBAL_HISTORY[-1]["uuid"] if GLOBAL_HISTORY else None
    assert main(["compile", "--setting", "workspace", "--backbone", "dummy", "--templates", str(library),
                 "--no-track", "--rounds", "2", "--opt", "init.breadth=2", "--opt", "init.depth=1", "--traces"]) == 0
    made = list(GLOBAL_HISTORY)
    made = made[[e["uuid"] for e in made].index(before) + 1:] if before else made
    folder = tmp_path / "programs" / "workspace" / "dummy" / "compile" / "traces"
    records = [json.loads(line) for path in folder.glob("*.jsonl") for line in path.read_text().splitlines()]
    assert len(records) == len(made) > 0 and "traces: about" in capfd.readouterr().err
    assert {r["role"] for r in records if r.get("instance_id")} >= {"round"}
