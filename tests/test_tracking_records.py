"""What each command records in MLflow: its run's params, metrics, artifacts, tags and status, read back from a real
MLflow store (a temporary sqlite file) after distill, compile, tune, evaluate and an experiment of
experiments/run.py ran on the fixture instances with a DummyLM."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils.dummies import DummyLM
from routed_lm import FIXTURE_DATA, RoutedLM, fixture_instances

from scripts import load_script
from tide_dspy.schemas import Template
from tide_dspy.templates import TemplateLibrary

# data_version too, of a versioned set (the fixtures have none; tests/test_data_sets.py runs on the shipped set)
COMMON_PARAMS = {"backbone", "command", "data_set", "data_sha256", "dataset_hash", "git_sha", "judge", "lm",
                 "n_instances", "setting", "split"}
USAGE_METRICS = {"backbone_calls", "backbone_completion_tokens", "backbone_prompt_tokens"}
SCORES = {f"{part}_{component}" for part in ("coverage", "precision", "f1")
          for component in ("retrieval", "identification", "resolution")} | {"findings", "n_failed", "n_instances"}


def recorded(uri: str) -> dict[str, dict]:
    """run name -> what the run holds: param and metric names, artifact paths, tide.* tags, status, and the
    metrics' values and histories."""
    import mlflow
    from mlflow import MlflowClient

    mlflow.set_tracking_uri(uri)
    client = MlflowClient()

    def artifacts(run_id: str, path: str | None = None) -> list[str]:
        found = []
        for a in client.list_artifacts(run_id, path):
            found += artifacts(run_id, a.path) if a.is_dir else [a.path]
        return found

    out = {}
    for run in client.search_runs([client.get_experiment_by_name("tide-dspy").experiment_id]):
        out[run.info.run_name] = {
            "params": set(run.data.params), "metrics": run.data.metrics, "artifacts": set(artifacts(run.info.run_id)),
            "tags": {k: v for k, v in run.data.tags.items() if k.startswith("tide.")}, "status": run.info.status,
            "history": lambda key, run_id=run.info.run_id: [m.value for m in client.get_metric_history(run_id, key)],
            "run_id": run.info.run_id, "uri": uri}
    return out


@pytest.fixture(scope="module")
def commands(tmp_path_factory) -> dict[str, dict]:
    """distill -> compile -> tune -> evaluate through the CLI, tracked in one sqlite store."""
    from tide_dspy.cli.main import main

    tmp = tmp_path_factory.mktemp("tracked")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    common = ["--setting", "workspace", "--backbone", "dummy"]
    with pytest.MonkeyPatch.context() as mp, dspy.context(lm=RoutedLM(fixture_instances("workspace"),
                                                                       instruction="Compiled instruction.")):
        mp.chdir(tmp)
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.setenv("MLFLOW_REGISTRY_URI", uri)  # mlflow writes it; set here, it is restored when the context ends
        mp.setenv("TIDE_DATA", str(FIXTURE_DATA))
        dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
        assert main(["distill", *common]) == 0
        assert main(["compile", *common, "--optimizer", "copro", "--opt", "init.breadth=2", "--opt", "init.depth=1",
                     "--rounds", "2", "--per-round", "2"]) == 0
        assert main(["tune", *common, "--trials", "2", "--storage", f"sqlite:///{tmp / 'optuna.db'}"]) == 0
        assert main(["evaluate", "--program", "programs/workspace/dummy/tide.json", "--backbone", "dummy",
                     "--limit", "2", "--out", "eval"]) == 0
    return recorded(uri)


def test_each_command_is_one_finished_run_tagged_with_its_command(commands):
    assert {name: (r["status"], r["tags"]) for name, r in commands.items()} == {
        f"{command}-workspace-dummy": ("FINISHED", {"tide.command": command, "tide.setting": "workspace",
                                                    "tide.backbone": "dummy"})
        for command in ("distill", "compile", "tune", "evaluate")}


def test_distill_records_its_counts_usage_failures_and_library(commands):
    run = commands["distill-workspace-dummy"]
    assert run["params"] == COMMON_PARAMS | {"max_attempts", "cases", "max_templates", "merge_threshold"}
    assert set(run["metrics"]) == USAGE_METRICS | {"capped", "cases", "draft_mean_abstraction_score", "failed",
                                                   "mean_abstraction_score", "merges", "passed", "seconds",
                                                   "templates"}
    assert {k: run["metrics"][k] for k in ("cases", "passed", "failed", "templates")} == {
        "cases": 10, "passed": 10, "failed": 0, "templates": 10}
    assert run["artifacts"] == {"distill_failures.json", "lm_usage.json", "templates.json"}


def test_compile_records_scores_before_and_after_the_search_and_its_program(commands):
    run = commands["compile-workspace-dummy"]
    assert run["params"] == COMMON_PARAMS | {"T", "k", "method", "metric", "optimizer", "options", "pool_size",
                                             "train_ids", "val_ids"}
    assert set(run["metrics"]) == USAGE_METRICS | {f"before_{s}" for s in SCORES} | {f"after_{s}" for s in SCORES} | {
        "metric_after", "metric_before", "search_lm_calls", "seconds_after", "seconds_before", "seconds_compile",
        "trials"}
    assert run["metrics"]["trials"] == 2
    assert run["artifacts"] == {"lm_usage.json", "program/tide.json", "templates.json", "trials.jsonl",
                                "trials_summary.json", "val_after.jsonl", "val_before.jsonl"}


def test_compile_registers_its_program_from_its_run(commands):
    from mlflow import MlflowClient

    run = commands["compile-workspace-dummy"]
    version = MlflowClient(run["uri"], run["uri"]).get_model_version("tide-workspace-dummy", "1")
    assert version.run_id == run["run_id"]


def test_tune_records_each_trial_the_best_params_and_tune_json(commands):
    run = commands["tune-workspace-dummy"]
    assert run["params"] == COMMON_PARAMS | {"base_program", "best_max_rounds", "best_per_round", "best_pool_size",
                                             "best_temperature", "metric", "pool_max", "storage", "study", "val_ids"}
    assert set(run["metrics"]) == {"best_value", "seconds", "trial_value"}
    assert len(run["history"]("trial_value")) == 2
    assert run["artifacts"] == {"tune.json"}


def test_evaluate_records_scores_counts_usage_rows_and_the_program(commands):
    run = commands["evaluate-workspace-dummy"]
    assert run["params"] == COMMON_PARAMS | {"T", "k", "method", "pool_size", "program"}
    assert set(run["metrics"]) == USAGE_METRICS | SCORES | {"n_incomplete", "n_skipped", "seconds"}
    assert run["metrics"]["n_instances"] == 2
    assert run["artifacts"] == {"evaluation/config.json", "evaluation/results.jsonl", "evaluation/summary.json",
                                "lm_usage.json", "program/tide.json"}


def test_an_experiment_records_its_table_scores_and_every_output_file(tmp_path, monkeypatch, repository_instance):
    run_module = load_script("run")
    gold = repository_instance.problems[0].evidence
    answer = {"findings": [{"description": "bug in the gold function", "evidence_ids": gold, "patch": "no diff",
                            "used_template_id": "repo-t001", "why": "fits"}]}
    dspy.configure(lm=DummyLM({"max_new": answer}))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("TIDE_DATA", str(FIXTURE_DATA))
    library = TemplateLibrary([Template(id="repo-t001", name="n", pattern="p", evidence_flow=["a"])], "repository")
    out = tmp_path / "out"
    assert run_module.main(["table1", "--setting", "repository", "--split", repository_instance.split,
                            "--instances", repository_instance.instance_id, "--methods", "tide", "--templates",
                            str(library.save(tmp_path / "templates.json")), "--judge", "proxy",
                            "--out", str(out)]) == 0
    (run,) = recorded(uri).values()
    assert run["status"] == "FINISHED"
    assert run["tags"] == {"tide.command": "experiment-table1", "tide.setting": "repository",
                           "tide.backbone": "local"}
    assert {"command", "setting", "backbone", "git_sha", "split", "instances", "runs", "judge", "model"} <= (
        run["params"])
    methods = ("random", "first-listed", "lexical-join", "tide")
    assert set(run["metrics"]) == {f"{m}.{c}_f1" for m in methods for c in ("retrieval", "identification",
                                                                             "resolution")}
    assert run["artifacts"] == {p.name for p in out.glob("*.*")}
    assert run["artifacts"] >= {"table1.csv", "table1.md", "table1_hygiene.csv", "meta-table1.json"}


def test_what_a_failed_step_recorded_is_logged_in_its_failed_run(tmp_path):
    from tide_dspy.tracking import tracked_run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(RuntimeError, match="step failed"):
        with tracked_run("evaluate", setting="workspace", backbone="b", uri=uri) as run:
            run.record(metrics={"seconds": 1.5, "unknown": None})
            raise RuntimeError("step failed")
    (failed,) = recorded(uri).values()
    assert failed["status"] == "FAILED" and failed["metrics"] == {"seconds": 1.5}


def test_an_untracked_step_records_without_a_store(tmp_path, monkeypatch):
    from tide_dspy.tracking import tracked_run

    monkeypatch.chdir(tmp_path)
    with tracked_run("evaluate", setting="workspace", backbone="b", enabled=False) as run:
        run.record(metrics={"seconds": 1.0}, files={tmp_path / "missing.json": None})
        run.log_step("trial_value", 1.0, 0)
    assert list(tmp_path.iterdir()) == []


def test_a_second_store_in_one_process_gets_its_own_registry(tmp_path, monkeypatch):
    import mlflow

    from tide_dspy.tracking import configure_tracking

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)
    first, second = (f"sqlite:///{tmp_path / name}" for name in ("a.db", "b.db"))
    configure_tracking(first)
    assert configure_tracking(second) == second and mlflow.get_registry_uri() == second


def test_a_registry_the_user_names_is_kept_across_stores(tmp_path, monkeypatch):
    import mlflow

    from tide_dspy.tracking import configure_tracking

    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", registry)
    configure_tracking(f"sqlite:///{tmp_path / 'a.db'}")
    configure_tracking(f"sqlite:///{tmp_path / 'b.db'}")
    assert mlflow.get_registry_uri() == registry
