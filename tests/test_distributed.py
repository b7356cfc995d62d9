"""Distributed tuning for real (experiments/tune_workers.py): two `tide tune` processes share one Optuna study on
PostgreSQL and log their runs to an MLflow tracking server backed by the same PostgreSQL, every service started and
stopped on 127.0.0.1. The LM is the loopback STUB server (no model), reached over HTTP as `--backbone
openai-compatible`.
"""

from __future__ import annotations

import json

import pytest

from scripts import load_script

TRIALS = 3

tune_workers = load_script("tune_workers")
MISSING = tune_workers.postgres_missing()

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.timeout(900),
    pytest.mark.skipif(MISSING is not None, reason=str(MISSING)),
]


def test_two_tune_workers_share_one_postgres_study_and_log_to_an_mlflow_server(tmp_path):
    assert tune_workers.main(["--workers", "2", "--trials", str(TRIALS), "--out", str(tmp_path)]) == 0
    result = json.loads(next(tmp_path.glob("*.json")).read_text())
    # None lost, none duplicated: 2 x 3 trials numbered 0..5, each finished.
    assert result["trials_in_study"] == 2 * TRIALS and result["none_lost_or_duplicated"]
    assert result["states"] == ["COMPLETE"]
    workers = result["per_worker"]
    assert [w["trials_in_study"] for w in workers] == [TRIALS, TRIALS]
    assert sorted(n for w in workers for n in w["trial_numbers"]) == list(range(2 * TRIALS))
    # Each worker reported exactly the trials the study credits to it.
    assert all(w["printed_trials"] == w["trial_numbers"] for w in workers)
    runs = result["mlflow_runs"]
    assert len(runs) == 2 and all(r["status"] == "FINISHED" and r["study"] == "shared" for r in runs)
    assert all(r["experiment"] == "tide-dspy" for r in runs)  # not "Default" for the worker that lost the race
    assert sorted(tuple(r["trial_steps"]) for r in runs) == sorted(tuple(w["trial_numbers"]) for w in workers)
    assert all("tune.json" in r["artifacts"] for r in runs)
