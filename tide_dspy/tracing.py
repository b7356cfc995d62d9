"""Traces of LM calls (`--traces`): each call's prompt, answer, tokens, whether DSPy's cache answered it, and the
instance and round it served.

With MLflow tracking on, the calls are MLflow traces made by MLflow's own DSPy tracing (`mlflow.dspy.autolog`), so
the MLflow UI shows them; `TraceRecorder` adds what MLflow cannot know to each LM span (`tide.*` attributes: the
instance, round and role, tokens, cache hit). With tracking off, the recorder writes one JSON line per call to
`<folder>/<instance id>.jsonl` instead.

A trace holds the whole rendered context of every call, so traces are opt-in and `announce` says how large they
are likely to be before a run starts. Text is scrubbed of secrets before it is written (util.secrets), and no LM
setting that carries a key is recorded: MLflow leaves out the LM's api_* settings, and the recorder records only
the model and the call's sampling settings.

The scope (instance, method, round, role) travels in a context variable: `scope(...)` sets it around a piece of
work (an instance in evaluation, a round in discovery, the judge in scoring), and thread pools that copy the
context (evaluation's workers) carry it along.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dspy.utils.callback import BaseCallback

log = logging.getLogger(__name__)

_SCOPE: contextvars.ContextVar[tuple[tuple[str, Any], ...]] = contextvars.ContextVar("tide_trace_scope", default=())
# The call settings a trace records (never api_key, api_base or headers).
RECORDED_KWARGS = ("temperature", "max_tokens", "max_completion_tokens", "rollout_id", "seed", "n")
UNSCOPED = "unscoped"  # the JSONL file of calls made outside any instance
_MLFLOW_TRACES: list[bool] = []  # one entry per `traces` context that turned MLflow's DSPy tracing on


def mlflow_traces_on() -> bool:
    """Whether LM calls are being traced to MLflow now (tracking.dspy_autolog keeps them on)."""
    return bool(_MLFLOW_TRACES)


@contextlib.contextmanager
def scope(**fields) -> Iterator[None]:
    """Tag the LM calls made inside with `fields` (instance_id, method, round, role), on top of the scope around
    it. Costs nothing when no recorder is listening."""
    token = _SCOPE.set(tuple({**dict(_SCOPE.get()), **{k: v for k, v in fields.items() if v is not None}}.items()))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def current_scope() -> dict[str, Any]:
    return dict(_SCOPE.get())


def _history_entry(lm, outputs) -> dict | None:
    """The LM's history entry of the call that returned `outputs` (the same object DSPy stored), searched from
    the newest, so concurrent calls on one LM each find their own."""
    history = list(getattr(lm, "history", None) or [])
    for entry in reversed(history[-200:]):
        if entry.get("outputs") is outputs:
            return entry
    return None


def is_cache_hit(entry: dict) -> bool:
    """Whether DSPy's cache answered the call behind an LM history entry. A LiteLLM response says so itself
    (`cache_hit`); DSPy's native responses do not, but DSPy records a cached call's usage as {} while the response
    it replays keeps the usage of the call that filled the cache."""
    response = entry.get("response")
    if isinstance(response, (list, tuple)):
        response = response[0] if response else None
    if getattr(response, "cache_hit", False):
        return True
    return not entry.get("usage") and bool(getattr(response, "usage", None))


def _text(value) -> str:
    from tide_dspy.util.secrets import scrub_text

    return scrub_text(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))


def call_record(lm, inputs: dict, outputs, seconds: float, error: BaseException | None) -> dict:
    """What a trace keeps of one LM call: scope, model, prompt messages, answer, tokens, cache hit, seconds."""
    from tide_dspy.cost.usage import usage_tokens

    entry = _history_entry(lm, outputs) if outputs is not None else None
    usage = (entry or {}).get("usage") or {}
    tokens_in, tokens_out = usage_tokens([{"usage": usage}])
    kwargs = {**(getattr(lm, "kwargs", None) or {}), **(inputs.get("kwargs") or {})}
    return {
        **current_scope(),
        "model": getattr(lm, "model", type(lm).__name__),
        "settings": {k: kwargs[k] for k in RECORDED_KWARGS if kwargs.get(k) is not None},
        "messages": _text(inputs.get("messages") or inputs.get("prompt") or ""),
        "answer": _text(outputs) if outputs is not None else None,
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "cache_hit": is_cache_hit(entry) if entry is not None else False,
        "seconds": round(seconds, 3),
        "error": _text(f"{type(error).__name__}: {error}") if error is not None else None,
    }


class TraceRecorder(BaseCallback):
    """A DSPy callback that records every LM call (call_record): onto MLflow's LM span when MLflow's DSPy tracing
    is on (it must come before MLflow's callback, so that span is still open), else as JSON lines in `folder`."""

    def __init__(self, folder: Path | None = None, mlflow_spans: bool = False):
        self.folder = Path(folder) if folder is not None else None
        self.mlflow_spans = mlflow_spans
        self.calls = 0
        self._open: dict[str, tuple[Any, dict, float]] = {}
        self._lock = threading.Lock()

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self._open[call_id] = (instance, dict(inputs), time.perf_counter())

    def on_lm_end(self, call_id: str, outputs: Any | None, exception: Exception | None = None) -> None:
        lm, inputs, started = self._open.pop(call_id, (None, {}, time.perf_counter()))
        record = call_record(lm, inputs, outputs, time.perf_counter() - started, exception)
        with self._lock:
            self.calls += 1
        if self.mlflow_spans:
            self._annotate(record)
        if self.folder is not None:
            self._write(record)

    @staticmethod
    def _annotate(record: dict) -> None:
        import mlflow

        span = mlflow.get_current_active_span()
        if span is None:
            return
        span.set_attributes({f"tide.{k}": v for k, v in record.items()
                             if k not in ("messages", "answer", "settings") and v is not None})
        tags = {f"tide.{k}": str(record[k]) for k in ("instance_id", "method") if record.get(k) is not None}
        if tags:
            with contextlib.suppress(Exception):  # a tag the trace already has, or no trace: the span holds it
                mlflow.update_current_trace(tags=tags)

    def _write(self, record: dict) -> None:
        from tide_dspy.util.safe_write import append_text

        name = str(record.get("instance_id") or UNSCOPED)
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            append_text(self.folder / f"{safe}.jsonl", json.dumps(record, ensure_ascii=False) + "\n")


def estimate_bytes(programs, instances, runs: int = 1) -> tuple[int, int]:
    """(bytes, LM calls) the traces of running each of `programs` on `instances` `runs` times could take: every
    round call at most (the program's call_plan), each holding the first round's rendered inputs and an answer
    of the same order. Judge calls are small beside them and left out."""
    total = calls = 0
    for program in programs:
        per_instance = len(program.call_plan())
        if not per_instance:
            continue
        for instance in instances:
            view = program.view(instance)
            inputs = program.setting.round_inputs(instance, view, program.guidance_text(), [], program.per_round)
            size = sum(len(str(v)) for v in inputs.values())
            total += runs * per_instance * int(size * 1.1)
            calls += runs * per_instance
    return total, calls


def announce(size: int, calls: int, where: str) -> None:
    """Say, before a run, how large its traces may grow and where they go."""
    print(f"traces: about {size / 1e6:.1f} MB for up to {calls} LM call(s) (each holds its whole prompt), to {where}",
          file=sys.stderr, flush=True)


@contextlib.contextmanager
def traces(enabled: bool, *, tracking: bool, folder: Path | None = None) -> Iterator[TraceRecorder | None]:
    """Record the LM calls made inside: as MLflow traces (MLflow's DSPy tracing, annotated) when `tracking` is on,
    else as JSON lines under `folder`. Nothing when not `enabled`. Enter it outside any `dspy.context` (whose
    settings would hide the callbacks); DSPy's callbacks are restored on exit. A compile's own autologging
    (tracking.dspy_autolog) keeps the traces on."""
    if not enabled:
        yield None
        return
    import dspy

    before = list(dspy.settings.get("callbacks", []) or [])
    recorder = TraceRecorder(None if tracking else folder, mlflow_spans=tracking)
    if tracking:
        import mlflow

        mlflow.dspy.autolog(log_traces=True, log_compiles=False, log_evals=False, silent=True)
        _MLFLOW_TRACES.append(True)
    try:
        # The recorder goes first: on a call's end MLflow's span must still be open for it to annotate.
        dspy.settings.configure(callbacks=[recorder, *(dspy.settings.get("callbacks", []) or [])])
        if recorder not in (dspy.settings.get("callbacks", []) or []):  # a dspy.context keeps its own settings
            raise RuntimeError("tracing.traces must be entered outside dspy.context, or the calls inside go "
                               "untraced")
        yield recorder
    finally:
        if tracking:
            import mlflow

            _MLFLOW_TRACES.pop()
            mlflow.dspy.autolog(disable=True, silent=True)
            mlflow.flush_trace_async_logging()  # every trace is in the store when the run ends
        dspy.settings.configure(callbacks=before)
