"""MLflow tracking for distill / compile / tune / evaluate runs (LM usage is counted in backbones.usage).

The store is `sqlite:///mlflow.db` (in the working directory) unless MLFLOW_TRACKING_URI names another. mlflow is
imported only inside the functions that use it, so importing this module stays cheap.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tide_dspy.backbones.registry import scrub_secrets

log = logging.getLogger(__name__)

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
EXPERIMENT = "tide-dspy"
MODEL_TYPE = "tide-dspy-json-state"
PARAM_MAX_CHARS = 6000
def configure_tracking(uri: str | None = None) -> str:
    import mlflow

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(os.environ.get("MLFLOW_REGISTRY_URI") or uri)
    return uri


# ---- provenance ----

def git_sha(cwd: str | Path | None = None) -> str | None:
    """HEAD of the repository holding the package (with "-dirty" when tracked files changed), or None."""
    cwd = cwd or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return sha + ("-dirty" if dirty else "")


def dataset_hash(instances) -> str:
    """A short SHA-256 over the instances' full content, in order: it changes when any record does."""
    h = hashlib.sha256()
    for inst in instances:
        h.update(inst.model_dump_json().encode())
    return h.hexdigest()[:16]


# ---- runs ----

def _param_value(v) -> str:
    text = v if isinstance(v, str) else json.dumps(v, default=str, sort_keys=True)
    return text if len(text) <= PARAM_MAX_CHARS else text[: PARAM_MAX_CHARS - 3] + "..."


def log_params(params: dict) -> None:
    import mlflow

    clean = scrub_secrets({k: v for k, v in params.items() if v is not None})
    mlflow.log_params({k: _param_value(v) for k, v in clean.items()})


def score_metrics(result: dict, prefix: str = "") -> dict[str, float]:
    """Flatten an aggregate into MLflow metric names like `before_f1_retrieval` (unjudged components left out)."""
    out = {}
    for part in ("coverage", "precision", "f1"):
        for component, value in (result.get(part) or {}).items():
            if value is not None:
                out[f"{prefix}{part}_{component}"] = float(value)
    for key in ("n_instances", "n_failed", "findings"):
        if isinstance(result.get(key), (int, float)):
            out[f"{prefix}{key}"] = float(result[key])
    return out


def log_scores(result: dict, prefix: str = "") -> None:
    import mlflow

    mlflow.log_metrics(score_metrics(result, prefix))


def log_usage(usage: dict | None, name: str = "lm_usage.json") -> None:
    """The usage summary as an artifact, and its totals as metrics."""
    import mlflow

    if not usage:
        return
    mlflow.log_dict(usage, name)
    for role, summary in usage.items():
        for key in ("calls", "prompt_tokens", "completion_tokens", "cost_usd"):
            value = (summary or {}).get(key)
            if value is not None:
                mlflow.log_metric(f"{role}_{key}", float(value))


@contextmanager
def tracked_run(command: str, *, setting: str, backbone: str, params: dict | None = None,
                uri: str | None = None, experiment: str = EXPERIMENT, enabled: bool = True) -> Iterator:
    """An MLflow run named `<command>-<setting>-<backbone>` with the common params (and the git SHA) logged.

    With enabled=False nothing is logged and None is yielded, so callers can run without a tracking store."""
    if not enabled:
        yield None
        return
    import mlflow

    configure_tracking(uri)
    # The run names its experiment: when two processes create it at once, the loser's set_experiment returns it
    # without making it active (MLflow 3.x), and a bare start_run would land in "Default".
    experiment_id = mlflow.set_experiment(experiment).experiment_id
    with mlflow.start_run(run_name=f"{command}-{setting}-{backbone}", experiment_id=experiment_id) as run:
        mlflow.set_tags({"tide.command": command, "tide.setting": setting, "tide.backbone": backbone})
        log_params({"command": command, "setting": setting, "backbone": backbone, "git_sha": git_sha(),
                    **(params or {})})
        yield run


def model_name(setting: str, backbone: str) -> str:
    """`tide-<setting>-<backbone>`, with characters the registry dislikes replaced."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"tide-{setting}-{backbone}").strip("-")


def register_program(program_path: str | Path, setting: str, backbone: str, params: dict | None = None):
    """Log the program JSON as an MLflow LoggedModel of the active run and register it as tide-<setting>-<backbone>.

    The model's only artifact is the JSON state; `tide_dspy.load_program("models:/<name>/<version>")` fetches it."""
    import mlflow
    from mlflow import MlflowClient

    run = mlflow.active_run()
    name = model_name(setting, backbone)
    clean = {k: _param_value(v) for k, v in scrub_secrets({k: v for k, v in (params or {}).items() if v is not None}).items()}
    model = mlflow.initialize_logged_model(name=name, source_run_id=run.info.run_id if run else None,
                                           params=clean, model_type=MODEL_TYPE)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(program_path, Path(tmp) / Path(program_path).name)
        MlflowClient().log_model_artifacts(model.model_id, tmp)
    mlflow.finalize_logged_model(model.model_id, "READY")
    return mlflow.register_model(f"models:/{model.model_id}", name)


@contextmanager
def dspy_autolog(enabled: bool = True) -> Iterator[None]:
    """mlflow.dspy autologging for an optimizer's compile: its params, the best program's state, the LM params and
    the train/validation tables (which serialize every instance in full, so this is opt-in).

    Traces are off: every trace would hold the whole rendered context. Disabled again on exit."""
    if not enabled:
        yield
        return
    import mlflow

    try:
        mlflow.dspy.autolog(log_traces=False, log_compiles=True, log_evals=True, silent=True)
    except Exception as exc:  # noqa: BLE001 - tracking extras must never stop a compile
        log.warning("mlflow.dspy autolog unavailable: %s", exc)
        yield
        return
    try:
        yield
    finally:
        mlflow.dspy.autolog(disable=True, silent=True)
