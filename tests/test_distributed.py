"""Distributed tuning for real: two `tide tune` processes share one Optuna study on PostgreSQL and log their runs to
an MLflow tracking server (itself backed by the same PostgreSQL), every service started and stopped here on
127.0.0.1. The LM is the loopback STUB server (experiments/stub_server.py, no model), reached over HTTP as
`--backbone openai-compatible`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from services import mlflow_server, postgres_cluster, postgres_missing

from tide_dspy.schemas import Template
from tide_dspy.templates import TemplateLibrary

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "tiny_workspace.jsonl"
TRIALS_PER_WORKER = 3

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.timeout(900),
    pytest.mark.skipif(postgres_missing() is not None, reason=str(postgres_missing())),
]


def _stub_server():
    spec = importlib.util.spec_from_file_location("stub_server", ROOT / "experiments" / "stub_server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.StubServer


def _train_file(folder: Path) -> Path:
    """Four train instances: the fixture's two, twice, with their own ids."""
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    path = folder / "train.jsonl"
    with path.open("w") as f:
        for k in range(4):
            f.write(json.dumps(dict(rows[k % 2], instance_id=f"tiny-train-{k}", split="train")) + "\n")
    return path


def test_two_tune_workers_share_one_postgres_study_and_log_to_an_mlflow_server(tmp_path):
    import optuna
    from mlflow import MlflowClient

    data = _train_file(tmp_path)
    templates = TemplateLibrary([Template(id=f"ws-t0{i}", name=f"pattern {i}", pattern=f"shape {i}",
                                          evidence_flow=["x"]) for i in range(1, 5)], "workspace").save(
        tmp_path / "templates.json")
    with _stub_server()(delay=0.05, max_requests=2000) as stub, postgres_cluster(("optuna", "mlflow")) as db, \
            mlflow_server(tmp_path / "mlflow", db["mlflow"]) as tracking:
        def worker(k: int) -> subprocess.Popen:
            cmd = [sys.executable, "-m", "tide_dspy.cli.main", "tune", "--setting", "workspace", "--data", str(data),
                   "--templates", str(templates), "--trials", str(TRIALS_PER_WORKER), "--storage", db["optuna"],
                   "--study", "shared", "--tracking-uri", tracking, "--backbone", "openai-compatible",
                   "--api-base", stub.api_base, "--judge", "proxy", "--programs", str(tmp_path / f"programs-{k}")]
            env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "MLFLOW_DISABLE_TELEMETRY": "true"}
            return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        procs = [worker(0), worker(1)]
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            outputs.append(out)
            assert proc.returncode == 0, f"worker exited {proc.returncode}:\n{out[-2000:]}\n{err[-4000:]}"

        study = optuna.load_study(study_name="shared", storage=db["optuna"])
        trials = study.trials
        # None lost, none duplicated: 2 x 3 trials, numbered 0..5, each finished.
        assert sorted(t.number for t in trials) == list(range(2 * TRIALS_PER_WORKER))
        assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
        per_worker = Counter(t.user_attrs["worker"].rsplit(":", 1)[1] for t in trials)
        assert per_worker == {str(p.pid): TRIALS_PER_WORKER for p in procs}
        # Each worker reported exactly the trials the study credits to it.
        for proc, out in zip(procs, outputs):
            printed = sorted(int(n) for n in re.findall(r"^trial (\d+): ", out, re.M))
            assert printed == sorted(t.number for t in trials if t.user_attrs["worker"].endswith(f":{proc.pid}"))

        client = MlflowClient(tracking_uri=tracking)
        experiment = client.get_experiment_by_name("tide-dspy")
        runs = client.search_runs([experiment.experiment_id], "tags.`tide.command` = 'tune'")
        assert len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs)
        logged = sorted(m.step for r in runs for m in client.get_metric_history(r.info.run_id, "trial_value"))
        assert logged == list(range(2 * TRIALS_PER_WORKER))
        assert all(r.data.params["study"] == "shared" for r in runs)
        assert {a.path for a in client.list_artifacts(runs[0].info.run_id)} >= {"tune.json"}
