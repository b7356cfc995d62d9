"""One tracked run per command: timing, LM usage, MLflow and provenance.json (`tracked_run`), plus the model registry.
A step records its metrics, params, scores, usage and files on the run (`TrackedRun.record`); they are logged
once, when the run ends.

LM usage is counted in cost.usage. The store is `sqlite:///mlflow.db` (in the working directory) unless
MLFLOW_TRACKING_URI names another. mlflow is imported only inside the functions that use it, so importing this
module stays cheap.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tide_dspy.util.git import head_sha
from tide_dspy.util.hashing import short_sha256
from tide_dspy.util.jsonio import read_json_file, write_json
from tide_dspy.util.secrets import scrub_secrets, scrub_text

log = logging.getLogger(__name__)

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
EXPERIMENT = "tide-dspy"
MODEL_TYPE = "tide-dspy-json-state"
PARAM_MAX_CHARS = 6000
class TrackingError(ValueError):
    """The MLflow store cannot be used (locked, read-only, unreachable): one line, with the way around it."""


def tracking_error(uri: str | None, exc: BaseException) -> TrackingError:
    """`exc` from MLflow as one line that names the store and the `--no-track` way around it."""
    from tide_dspy.retry import describe_error

    first = (describe_error(exc).splitlines() or [type(exc).__name__])[0][:400]
    where = scrub_text(uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI)
    return TrackingError(f"MLflow store {where} cannot be used ({first}); pass --no-track to run without "
                         "tracking, or --tracking-uri for another store")


# MLflow's SQL store logs every database error with its whole traceback (ERROR, before it raises it); the error
# itself reaches the user as one TrackingError line, so that log is kept for --verbose.
_NOISY = ("mlflow.store.db.utils",)


@contextmanager
def tracking_errors(uri: str | None) -> Iterator[None]:
    """Any error of the MLflow calls inside becomes a TrackingError (one line, not MLflow's traceback)."""
    loggers = [logging.getLogger(name) for name in _NOISY]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        if logger.getEffectiveLevel() > logging.DEBUG:
            logger.setLevel(logging.CRITICAL)
    try:
        yield
    except TrackingError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the store raises, the user gets one line
        log.debug("MLflow error", exc_info=True)
        raise tracking_error(uri, exc) from None
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


# variable -> (the value configure_tracking set it to, the user's own value then). mlflow.set_tracking_uri and
# set_registry_uri write MLFLOW_TRACKING_URI and MLFLOW_REGISTRY_URI, so a later call in the same process must not
# take that write for the user's choice.
_WRITTEN: dict[str, tuple[str, str | None]] = {}


def _user_env(name: str) -> str | None:
    """The user's value of an MLflow variable, not the one an earlier configure_tracking wrote."""
    value = os.environ.get(name)
    written, user = _WRITTEN.get(name, (None, None))
    return user if value is not None and value == written else value


def configure_tracking(uri: str | None = None) -> str:
    """Point MLflow at `uri`, else $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db; the registry at
    $MLFLOW_REGISTRY_URI, else the same store."""
    import mlflow

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    user_tracking, user_registry = _user_env("MLFLOW_TRACKING_URI"), _user_env("MLFLOW_REGISTRY_URI")
    uri = uri or user_tracking or DEFAULT_TRACKING_URI
    registry = user_registry or uri
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(registry)
    _WRITTEN.update(MLFLOW_TRACKING_URI=(uri, user_tracking), MLFLOW_REGISTRY_URI=(registry, user_registry))
    return uri


# ---- provenance ----

def git_sha(cwd: str | Path | None = None) -> str | None:
    """HEAD of the repository holding the package (with "-dirty" when tracked files changed), or None."""
    return head_sha(cwd or Path(__file__).resolve().parent)


def dataset_hash(instances) -> str:
    """A short SHA-256 over the instances' full content, in order: it changes when any record does."""
    return short_sha256(*(inst.model_dump_json() for inst in instances), sep="")


def record_provenance(folder: str | Path, artifact: str, command: str | None, **info) -> Path:
    """provenance.json beside the artifacts: for each file, the command that made it and when (secrets scrubbed)."""
    folder = Path(folder)
    path = folder / "provenance.json"
    data = read_json_file(path, "") if path.exists() else {}
    data[artifact] = scrub_secrets({"command": command,
                                    "date": datetime.now(UTC).isoformat(timespec="seconds"), **info})
    folder.mkdir(parents=True, exist_ok=True)
    write_json(path, data, ensure_ascii=True)
    return path


# ---- runs ----

def _param_value(v) -> str:
    text = v if isinstance(v, str) else json.dumps(v, default=str, sort_keys=True)
    return text if len(text) <= PARAM_MAX_CHARS else text[: PARAM_MAX_CHARS - 3] + "..."


def log_params(params: dict) -> None:
    import mlflow

    clean = scrub_secrets({k: v for k, v in params.items() if v is not None})
    mlflow.log_params({k: _param_value(v) for k, v in clean.items()})


def score_metrics(result, prefix: str = "") -> dict[str, float]:
    """Flatten an EvaluationSummary into MLflow metric names like `before_f1_retrieval` (unjudged components left
    out)."""
    out = {}
    for part in ("coverage", "precision", "f1"):
        for component, value in (getattr(result, part, None) or {}).items():
            if value is not None:
                out[f"{prefix}{part}_{component}"] = float(value)
    for key in ("n_instances", "n_failed", "findings"):
        if isinstance(getattr(result, key, None), (int, float)):
            out[f"{prefix}{key}"] = float(getattr(result, key))
    return out


def usage_metrics(usage: dict) -> dict[str, float]:
    """The totals of a usage summary ({role: summary}) as metric names like `backbone_calls`."""
    from tide_dspy.cost.usage import USAGE_METRICS

    return {f"{role}_{key}": float(value) for role, summary in usage.items() for key in USAGE_METRICS
            if (value := (summary or {}).get(key)) is not None}


@dataclass
class Record:
    """What a step leaves in its MLflow run, logged once when the run ends: metrics (None values left out), params,
    evaluation scores by metric prefix, an LM usage summary (lm_usage.json and its totals as metrics), JSON
    artifacts by name, and files with the artifact folder each goes to (None: the top; missing files left out)."""

    metrics: dict[str, float | None] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    scores: dict[str, Any] = field(default_factory=dict)  # prefix -> EvaluationSummary
    usage: dict | None = None
    dicts: dict[str, dict] = field(default_factory=dict)
    files: dict[Path, str | None] = field(default_factory=dict)

    def add(self, *, metrics: dict | None = None, params: dict | None = None, scores: dict | None = None,
            usage: dict | None = None, dicts: dict | None = None, files: dict | None = None) -> None:
        """Add to what is recorded; a later value of the same name replaces an earlier one."""
        self.metrics.update(metrics or {})
        self.params.update(params or {})
        self.scores.update(scores or {})
        self.usage = usage if usage is not None else self.usage
        self.dicts.update(dicts or {})
        self.files.update({Path(path): folder for path, folder in (files or {}).items()})

    def log(self) -> None:
        """Log all of it to the active MLflow run."""
        import mlflow

        metrics = {k: float(v) for k, v in self.metrics.items() if v is not None}
        for prefix, result in self.scores.items():
            metrics.update(score_metrics(result, prefix))
        if self.usage:
            mlflow.log_dict(self.usage, "lm_usage.json")
            metrics.update(usage_metrics(self.usage))
        if metrics:
            mlflow.log_metrics(metrics)
        if self.params:
            log_params(self.params)
        for name, data in self.dicts.items():
            mlflow.log_dict(data, name)
        for path, folder in self.files.items():
            if path.exists():
                mlflow.log_artifact(str(path), artifact_path=folder)


@dataclass
class TrackedRun:
    """What `tracked_run` yields: the clock, the LM usage counters, provenance, what the step records (`record`,
    logged when the run ends) and, when tracking is on, the MLflow run. A step records unconditionally: with
    tracking off nothing is logged."""

    run: Any = None  # the active MLflow run, or None when tracking is off
    command_line: str | None = None
    lms: dict[str, Any] = field(default_factory=dict)  # role -> LM whose usage counts from the start of the run
    started: float = field(default_factory=time.perf_counter)
    marks: dict[str, str | None] = field(default_factory=dict)
    uri: str | None = None  # the MLflow store, for error messages
    recorded: Record = field(default_factory=Record)

    def __post_init__(self):
        from tide_dspy.cost.usage import usage_mark

        self.marks = {role: usage_mark(lm) for role, lm in self.lms.items()}

    @property
    def enabled(self) -> bool:
        return self.run is not None

    @property
    def info(self):
        return self.run.info

    def seconds(self, since: float | None = None) -> float:
        """Seconds since the run (or `since`, a time.perf_counter() value) started, to 0.1 s."""
        return round(time.perf_counter() - (self.started if since is None else since), 1)

    def usage(self) -> dict:
        """{role: calls, tokens and cost of that LM since the run started}."""
        from tide_dspy.cost.usage import lm_usage

        return {role: lm_usage(lm, self.marks[role]) for role, lm in self.lms.items()}

    def provenance(self, folder: str | Path, artifact: str, **info) -> None:
        record_provenance(folder, artifact, self.command_line, **info)

    def record(self, **what) -> None:
        """Record metrics, params, scores, usage, dicts or files (the fields of `Record`) for the end of the run."""
        self.recorded.add(**what)

    def log_step(self, name: str, value: float, step: int) -> None:
        """One point of a metric that grows while the run goes (a trial's value): logged at once, not at the end."""
        if self.enabled:
            import mlflow

            with tracking_errors(self.uri):
                mlflow.log_metric(name, value, step=step)


@contextmanager
def tracked_run(command: str, *, setting: str, backbone: str, params: dict | None = None,
                uri: str | None = None, experiment: str = EXPERIMENT, enabled: bool = True,
                command_line: str | None = None, lms: dict | None = None) -> Iterator[TrackedRun]:
    """A run named `<command>-<setting>-<backbone>`: an MLflow run with the common params (and the git SHA) logged,
    a clock, usage counters for `lms` ({role: LM}) and the `command_line` that provenance.json records. What the
    step records (`TrackedRun.record`) is logged when it ends, a failed step's too.

    With enabled=False nothing goes to MLflow; the TrackedRun still times, counts and writes provenance."""
    lms = dict(lms or {})
    if not enabled:
        yield TrackedRun(None, command_line, lms)
        return
    import mlflow

    with tracking_errors(uri):
        uri = configure_tracking(uri)
        # The run names its experiment: when two processes create it at once, the loser's set_experiment returns
        # it without making it active (MLflow 3.x), and a bare start_run would land in "Default".
        experiment_id = mlflow.set_experiment(experiment).experiment_id
        run = mlflow.start_run(run_name=f"{command}-{setting}-{backbone}", experiment_id=experiment_id)
    status = "FAILED"
    try:
        with tracking_errors(uri):
            mlflow.set_tags({"tide.command": command, "tide.setting": setting, "tide.backbone": backbone})
            log_params({"command": command, "setting": setting, "backbone": backbone, "git_sha": git_sha(),
                        **(params or {})})
        tracked = TrackedRun(run, command_line, lms, uri=uri)
        try:
            yield tracked
        except BaseException:
            try:
                tracked.recorded.log()
            except Exception as exc:  # noqa: BLE001 - the step's own error is the one to report
                log.warning("%s", tracking_error(uri, exc))
            raise
        try:
            with tracking_errors(uri):
                tracked.recorded.log()
        except TrackingError as exc:  # the step's work is done and written: say what MLflow lacks, keep the result
            log.warning("%s; the step finished and its files are written, but its metrics are not in MLflow", exc)
        status = "FINISHED"
    finally:
        try:
            with tracking_errors(uri):
                mlflow.end_run(status)
        except TrackingError as exc:  # a store that fails at the end: one line, and the step's result stands
            log.warning("%s; the run is not marked %s in MLflow", exc, status)


def model_name(setting: str, backbone: str) -> str:
    """`tide-<setting>-<backbone>`, with characters the registry dislikes replaced."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"tide-{setting}-{backbone}").strip("-")


def register_program(program_path: str | Path, setting: str, backbone: str, params: dict | None = None):
    """Log the program JSON as an MLflow LoggedModel of the active run and register it as tide-<setting>-<backbone>.

    The model's only artifact is the JSON state; `tide_dspy.load_program("models:/<name>/<version>")` fetches it."""
    with tracking_errors(None):
        return _register_program(program_path, setting, backbone, params)


def _register_program(program_path: str | Path, setting: str, backbone: str, params: dict | None):
    import mlflow
    from mlflow import MlflowClient

    run = mlflow.active_run()
    name = model_name(setting, backbone)
    clean = {
        k: _param_value(v) for k, v in scrub_secrets({k: v for k, v in (params or {}).items() if v is not None}).items()
    }
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

    Traces stay as they are: on inside `tracing.traces` (`--traces`), else off, since every trace holds the whole
    rendered context. On exit, autologging returns to tracing alone or to nothing."""
    if not enabled:
        yield
        return
    import mlflow

    from tide_dspy.tracing import mlflow_traces_on

    traces = mlflow_traces_on()
    try:
        mlflow.dspy.autolog(log_traces=traces, log_compiles=True, log_evals=True, silent=True)
    except Exception as exc:  # noqa: BLE001 - tracking extras must never stop a compile
        log.warning("mlflow.dspy autolog unavailable: %s", exc)
        yield
        return
    try:
        yield
    finally:
        if traces:
            mlflow.dspy.autolog(log_traces=True, log_compiles=False, log_evals=False, silent=True)
        else:
            mlflow.dspy.autolog(disable=True, silent=True)
