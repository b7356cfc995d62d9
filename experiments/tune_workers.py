"""Distributed tuning on one machine, for real: N `tide tune` processes share one Optuna study on PostgreSQL and log
their runs to an MLflow tracking server (backed by the same PostgreSQL), all on 127.0.0.1 and all started and
stopped here.

    python experiments/tune_workers.py                 # 2 workers x 3 trials

The LM is the STUB server (experiments/stub_server.py: no model, empty answers), reached over HTTP as
`--backbone openai-compatible`, so every trial scores 0: this checks the bookkeeping, not the search. The data are
four train copies of tests/fixtures/tiny_workspace.jsonl. Reported: the trials per worker (by the `worker`
attribute each trial records), whether any trial number is missing or repeated, each worker's MLflow run and
the trial steps it logged, and the wall time. Needs PostgreSQL (Debian: apt-get install postgresql) and the
`distributed` extra.

Writes experiments/results/tune_workers/<date>.{json,txt}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from services import mlflow_server, postgres_cluster, postgres_missing  # noqa: E402
from stub_server import StubServer  # noqa: E402

from tide_dspy.domains import WORKSPACE  # noqa: E402
from tide_dspy.util.safe_write import write_text  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "tiny_workspace.jsonl"
OUT = ROOT / "experiments" / "results" / "tune_workers"


def write_inputs(folder: Path) -> tuple[Path, Path]:
    """Four train instances (the fixture's two, twice, with their own ids) and a four-template library."""
    from tide_dspy.schemas import Template
    from tide_dspy.templates import TemplateLibrary

    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    data = folder / "train.jsonl"
    write_text(data, "".join(json.dumps(dict(rows[k % len(rows)], instance_id=f"tiny-train-{k}", split="train")) + "\n"
                             for k in range(4)))
    library = TemplateLibrary([Template(id=f"ws-t0{i}", name=f"pattern {i}", pattern=f"shape {i}",
                                        evidence_flow=["x"]) for i in range(1, 5)], WORKSPACE.name)
    return data, library.save(folder / "templates.json")


def run(workers: int = 2, trials: int = 3, timeout: float = 600) -> dict:
    import optuna
    from mlflow import MlflowClient

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tide-tune-workers-") as tmp, \
            StubServer(delay=0.05, max_requests=200 * workers * trials) as stub, \
            postgres_cluster(("optuna", "mlflow")) as db, \
            mlflow_server(Path(tmp) / "mlflow", db["mlflow"]) as tracking:
        tmp = Path(tmp)
        data, templates = write_inputs(tmp)
        started = time.perf_counter()
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "MLFLOW_DISABLE_TELEMETRY": "true"}
        procs = [subprocess.Popen(
            [sys.executable, "-m", "tide_dspy.cli.main", "tune", "--setting", WORKSPACE.name, "--data", str(data),
             "--templates", str(templates), "--trials", str(trials), "--storage", db["optuna"], "--study", "shared",
             "--tracking-uri", tracking, "--backbone", "openai-compatible", "--api-base", stub.api_base,
             "--judge", "proxy", "--programs", str(tmp / f"programs-{k}")],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(workers)]
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            if proc.returncode != 0:
                raise RuntimeError(f"a tune worker exited {proc.returncode}:\n{out[-2000:]}\n{err[-4000:]}")
            outputs.append(out)
        tune_seconds = time.perf_counter() - started

        # Read before the database stops.
        study_trials = optuna.load_study(study_name="shared", storage=db["optuna"]).trials
        numbers = [t.number for t in study_trials]
        by_pid = Counter(t.user_attrs.get("worker", "?:?").rsplit(":", 1)[1] for t in study_trials)
        client = MlflowClient(tracking_uri=tracking)
        experiments = {e.experiment_id: e.name for e in client.search_experiments()}
        runs = client.search_runs(list(experiments), "tags.`tide.command` = 'tune'")
        per_worker = []
        for proc, out in zip(procs, outputs):
            mine = sorted(t.number for t in study_trials if t.user_attrs.get("worker", "").endswith(f":{proc.pid}"))
            per_worker.append({"pid": proc.pid, "trials_in_study": by_pid.get(str(proc.pid), 0),
                               "trial_numbers": mine,
                               "printed_trials": sorted(int(n) for n in re.findall(r"^trial (\d+): ", out, re.M))})
        mlflow_runs = [{"run_id": r.info.run_id, "experiment": experiments[r.info.experiment_id],
                        "status": r.info.status, "study": r.data.params.get("study"),
                        "trial_steps": sorted(m.step for m in client.get_metric_history(r.info.run_id, "trial_value")),
                        "artifacts": sorted(a.path for a in client.list_artifacts(r.info.run_id))} for r in runs]
    expected = list(range(workers * trials))
    return {
        "workers": workers, "trials_per_worker": trials, "trials_in_study": len(numbers),
        "states": sorted({t.state.name for t in study_trials}),
        "none_lost_or_duplicated": sorted(numbers) == expected,
        "per_worker": per_worker, "mlflow_runs": mlflow_runs,
        "mlflow_steps_match_study": sorted(s for r in mlflow_runs for s in r["trial_steps"]) == expected,
        "tune_seconds": round(tune_seconds, 1), "total_seconds": round(time.perf_counter() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--trials", type=int, default=3, help="trials per worker")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    if not 1 <= args.workers * args.trials <= 40:
        parser.error("keep it bounded: workers x trials must be between 1 and 40")
    missing = postgres_missing()
    if missing:
        raise SystemExit(f"cannot run: {missing}")
    result = run(args.workers, args.trials)
    lines = [f"{args.workers} `tide tune` processes x {args.trials} trials on one PostgreSQL study, MLflow server on "
             "127.0.0.1, STUB LM (no model)",
             "| worker pid | trials in the study | trial numbers | printed by the worker |", "|---|---|---|---|"]
    lines += [f"| {w['pid']} | {w['trials_in_study']} | {w['trial_numbers']} | {w['printed_trials']} |"
              for w in result["per_worker"]]
    lines.append(f"study: {result['trials_in_study']} trials, states {result['states']}, none lost or duplicated: "
                 f"{'yes' if result['none_lost_or_duplicated'] else 'NO'}")
    lines.append(f"MLflow: {len(result['mlflow_runs'])} tune runs, their trial_value steps match the study: "
                 f"{'yes' if result['mlflow_steps_match_study'] else 'NO'}")
    lines.append(f"tune wall time {result['tune_seconds']} s (total with the servers {result['total_seconds']} s)")
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    write_text(out / f"{stamp}.json", json.dumps({"date": stamp, **result}, indent=1) + "\n")
    write_text(out / f"{stamp}.txt", text + "\n")
    print(f"-> {out / stamp}.{{json,txt}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
