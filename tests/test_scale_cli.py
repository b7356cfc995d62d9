"""Scale-out options: credentials stay out of provenance, tune trials say which worker ran them."""

from __future__ import annotations

import os
import socket

from routed_lm import RoutedLM, fixture_instances

from tide_dspy.cli.common import command_line
from tide_dspy.cli.main import build_parser
from tide_dspy.domains import WORKSPACE
from tide_dspy.optimize import tune
from tide_dspy.schemas import Template
from tide_dspy.templates import TemplateLibrary


def test_command_line_drops_passwords_from_storage_and_tracking_urls():
    args = build_parser().parse_args(["tune", "--setting", "workspace", "--trials", "1", "--workers", "4",
                                      "--storage", "postgresql://tide:SENTINEL@db.lab:5432/optuna",
                                      "--tracking-uri", "http://me:SENTINEL@mlflow.lab:5000"])
    line = command_line(args)
    assert "SENTINEL" not in line
    assert "postgresql://db.lab:5432/optuna" in line and "--workers 4" in line


def test_tune_trials_record_the_worker_that_ran_them(tmp_path):
    train = fixture_instances("workspace", "train")
    library = TemplateLibrary([Template(id="ws-t01", name="n", pattern="p", evidence_flow=["x"])], "workspace")
    study = tune(WORKSPACE, library, train[:1], lm=RoutedLM(train), n_trials=2, workers=2,
                 storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="w")
    assert [t.user_attrs["worker"] for t in study.trials] == [f"{socket.gethostname()}:{os.getpid()}"] * 2


def test_a_run_lands_in_its_experiment_when_another_process_created_it_first(tmp_path, monkeypatch):
    import mlflow
    from mlflow import MlflowClient

    from tide_dspy.tracking import tracked_run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    created = MlflowClient(uri).create_experiment("tide-dspy")  # the other worker won the race

    def lost_the_race(name):  # what MLflow's set_experiment returns then: the experiment, not made active
        return MlflowClient(uri).get_experiment_by_name(name)

    monkeypatch.setattr(mlflow, "set_experiment", lost_the_race)
    with tracked_run("tune", setting="workspace", backbone="b", uri=uri) as run:
        pass
    assert run.info.experiment_id == created
