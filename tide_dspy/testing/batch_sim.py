"""The providers' batch APIs, as the provider simulator (testing/provider_sim.py) serves them beside their online APIs.

- OpenAI and DashScope (OpenAI-compatible): `POST /files` (multipart, purpose "batch"), `POST /batches`, `GET
  /batches/{id}`, `POST /batches/{id}/cancel`, `GET /files/{id}/content`; JSONL lines `{custom_id, method, url,
  body}`, results in an output file and an error file; statuses validating, failed, in_progress, finalizing,
  completed, expired, cancelling, cancelled.
- Anthropic: `POST /v1/messages/batches` (`requests: [{custom_id, params}]`), `GET .../{id}`, `POST .../{id}/cancel`,
  `GET .../{id}/results` (JSONL, `result.type` succeeded, errored, canceled or expired); processing_status
  in_progress, canceling, ended; request_counts.
- Gemini: the Files API's resumable upload (`POST /upload/v1beta/files`, then the upload URL it returns), `POST
  /v1beta/models/{model}:batchGenerateContent` (a JSONL file of `{key, request}` lines, or inline requests), `GET
  /v1beta/batches/{id}` (an operation whose metadata.state is BATCH_STATE_PENDING, _RUNNING, _SUCCEEDED, _FAILED,
  _CANCELLED or _EXPIRED), `POST .../{id}:cancel`, `GET /download/v1beta/files/{id}:download`.

Each line is answered as the online simulator answers the same request (its rules, its canned answers, its prompt
cache), in the order of the batch, when the batch is created; the answers are revealed as simulated time passes.
Time is compressed by `BatchPlan.speed` (simulated seconds per real second), so a batch that takes minutes, or one
that runs past its 24-hour window and expires, takes a fraction of a second in a test. `BatchPlan.line_faults`
make chosen lines fail (a partly failed batch). Every batch received is kept in `BatchService.jobs`, and each of
its lines is logged with the online requests (`Logged.batch` names its batch).

The limits (requests and bytes per batch, the window, how long results are kept) are the ones in
tide_dspy/backbones/batch_rules.py, which names where each is documented.
"""

from __future__ import annotations

import email.parser
import json
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.policy import HTTP
from typing import Any

from tide_dspy.backbones.batch_rules import ANTHROPIC_BATCH, DASHSCOPE_BATCH, GEMINI_BATCH, OPENAI_BATCH, BatchRules

RULES: dict[str, BatchRules] = {"openai": OPENAI_BATCH, "anthropic": ANTHROPIC_BATCH, "gemini": GEMINI_BATCH,
                                "dashscope": DASHSCOPE_BATCH}
EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: where simulated time starts
# https://docs.claude.com/en/api/creating-message-batches: custom_id is 1-64 letters, digits, '_' or '-'.
ANTHROPIC_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
GEMINI_INLINE_BYTES = 20 * 1024 * 1024  # https://ai.google.dev/gemini-api/docs/batch-mode: inline requests < 20 MB
GEMINI_FILE_HOURS = 48  # https://ai.google.dev/gemini-api/docs/files: uploaded files are kept for 48 hours
ENDPOINT = "/v1/chat/completions"  # the only batch endpoint the online simulator answers (OpenAI, DashScope)


class BatchRefusal(Exception):
    """A batch request the provider refuses: its status, error type and message (the simulator writes the body)."""

    def __init__(self, status: int, kind: str, message: str, code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.kind, self.message, self.code, self.param = status, kind, message, code, param


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict = field(default_factory=dict)

    @classmethod
    def json(cls, payload: Any, status: int = 200, headers: dict | None = None) -> Reply:
        return cls(status, json.dumps(payload).encode(), headers=headers or {})


@dataclass
class BatchPlan:
    """How the simulated batch service behaves. A job takes `seconds` of simulated time from creation to its last
    answer (the first `validating` of them validating, then its lines are answered evenly); `speed` simulated seconds
    pass each real second. A job longer than its provider's window expires at the window, its later lines
    unanswered. `line_faults` (provider_sim.Fault) make the lines they match fail with their status."""

    speed: float = 1.0
    seconds: float = 300.0
    validating: float = 5.0
    line_faults: list = field(default_factory=list)


@dataclass
class Line:
    custom_id: str
    body: dict
    due: float = 0.0  # simulated time its answer is ready
    status: int = 0  # the answer's HTTP status (0: never answered: expired or cancelled)
    payload: dict = field(default_factory=dict)
    kind: str = ""


@dataclass
class SimBatch:
    """One batch job as the service received it."""

    provider: str
    id: str
    model: str
    lines: list[Line]
    created: float
    plan: BatchPlan
    endpoint: str = ENDPOINT
    input_file: str | None = None
    inline: bool = False
    display_name: str = ""
    metadata: dict = field(default_factory=dict)
    failed: list[dict] = field(default_factory=list)  # validation errors: the whole batch failed
    cancelled_at: float | None = None
    output_file: str | None = None
    error_file: str | None = None
    polls: int = 0

    @property
    def window_end(self) -> float:
        return self.created + RULES[self.provider].window_hours * 3600

    @property
    def validated(self) -> float:
        return self.created + self.plan.validating

    def last_due(self) -> float:
        return max((line.due for line in self.lines), default=self.validated)

    def ended_at(self) -> float:
        """When processing ends: the last answer, the window, or shortly after a cancel (a finishing grace of 1%
        of the job's length)."""
        end = min(self.last_due(), self.window_end)
        if self.cancelled_at is not None:
            end = min(end, self.cancelled_at + 0.01 * self.plan.seconds)
        return self.validated if self.failed else end

    def answered(self, line: Line, now: float) -> bool:
        stop = min(self.window_end, self.cancelled_at if self.cancelled_at is not None else self.window_end)
        return line.due <= min(now, stop)

    def outcome(self, line: Line, now: float) -> str:
        """succeeded | errored | expired | cancelled | processing, for `line` at simulated time `now`."""
        if self.answered(line, now):
            return "succeeded" if line.status == 200 else "errored"
        if now < self.ended_at():
            return "processing"
        return "cancelled" if self.cancelled_at is not None and line.due > self.cancelled_at else "expired"


def _stamp(seconds: float) -> str:
    """RFC 3339 in UTC, as Anthropic and Gemini write times."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _token(n: int, alphabet: str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def parse_multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """name -> (filename, bytes) of a multipart/form-data body."""
    message = email.parser.BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    if not message.is_multipart():
        raise BatchRefusal(400, "invalid_request_error", "expected a multipart/form-data body")
    parts = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name:
            parts[name] = (part.get_filename(), part.get_payload(decode=True) or b"")
    return parts


class BatchService:
    """The batch endpoints of the four providers. `answer(provider, model, body, headers, batch_id, faults)`
    answers one line as the online simulator would: (HTTP status, body)."""

    def __init__(self, answer: Callable[..., tuple[int, dict]], root: Callable[[], str]):
        self.answer, self.root = answer, root
        self.plan = BatchPlan()
        self.jobs: list[SimBatch] = []
        self.files: dict[str, dict] = {}  # id -> {provider, bytes, filename, purpose, created}
        self.uploads: dict[str, dict] = {}  # Gemini resumable uploads in progress
        self.lock = threading.Lock()
        self._t0 = time.monotonic()

    # ---- time ----
    def now(self) -> float:
        """Simulated seconds since the epoch: `plan.speed` of them pass each real second."""
        return EPOCH + (time.monotonic() - self._t0) * self.plan.speed

    def advance(self, seconds: float) -> None:
        """Move simulated time on by `seconds` at once (a test that waits out a window)."""
        self._t0 -= seconds / self.plan.speed

    # ---- what a test reads ----
    def received(self, provider: str | None = None) -> list[SimBatch]:
        return [j for j in self.jobs if provider in (None, j.provider)]

    def job(self, batch_id: str) -> SimBatch:
        for job in self.jobs:
            if job.id == batch_id or job.id == f"batches/{batch_id}":
                return job
        raise BatchRefusal(404, "not_found_error", f"batch {batch_id} not found")

    # ---- routing ----
    ROUTES = (
        ("openai", re.compile(r"^/openai/v1/(files|files/[^/]+|files/[^/]+/content|batches|batches/[^/]+|"
                              r"batches/[^/]+/cancel)$")),
        ("dashscope", re.compile(r"^/dashscope/compatible-mode/v1/(files|files/[^/]+|files/[^/]+/content|batches|"
                                 r"batches/[^/]+|batches/[^/]+/cancel)$")),
        ("anthropic", re.compile(r"^/anthropic/v1/(messages/batches|messages/batches/[^/]+|"
                                 r"messages/batches/[^/]+/cancel|messages/batches/[^/]+/results)$")),
        ("gemini", re.compile(r"^/gemini/(upload/v1beta/files|v1beta/models/[^/:]+:batchGenerateContent|"
                              r"v1beta/batches/[^/:]+|v1beta/batches/[^/:]+:cancel|v1beta/files/[^/:]+|"
                              r"download/v1beta/files/[^/:]+:download)$")),
    )

    def route(self, path: str) -> tuple[str, str] | None:
        """(provider, the path after the provider's prefix) of a batch endpoint, else None."""
        for provider, pattern in self.ROUTES:
            m = pattern.match(path)
            if m:
                return provider, m.group(1)
        return None

    def needs_key(self, provider: str, rest: str, query: dict) -> bool:
        """Every batch endpoint takes the provider's key, except the second step of a Gemini upload, whose upload
        URL is its own credential."""
        return not (provider == "gemini" and rest == "upload/v1beta/files" and "upload_id" in query)

    def handle(self, provider: str, rest: str, method: str, headers: dict, query: dict, raw: bytes) -> Reply:
        with self.lock:
            if provider in ("openai", "dashscope"):
                return self._openai(provider, rest, method, headers, raw)
            if provider == "anthropic":
                return self._anthropic(rest, method, headers, raw)
            return self._gemini(rest, method, headers, query, raw)

    # ---- answering the lines of a new job ----
    def _schedule(self, job: SimBatch, headers: dict) -> None:
        """Answer every line now, in order, and give each the time its answer is ready."""
        n = len(job.lines)
        work = max(job.plan.seconds - job.plan.validating, 0.0)
        for i, line in enumerate(job.lines):
            line.due = job.validated + work * (i + 1) / n
            line.status, line.payload, line.kind = self.answer(job.provider, job.model, line.body, headers, job.id,
                                                               job.plan.line_faults)

    def _new_job(self, provider: str, batch_id: str, model: str, lines: list[Line], **kw) -> SimBatch:
        job = SimBatch(provider, batch_id, model, lines, self.now(), BatchPlan(
            self.plan.speed, self.plan.seconds, self.plan.validating, self.plan.line_faults), **kw)
        self.jobs.append(job)
        return job

    def _file(self, provider: str, data: bytes, filename: str, purpose: str, file_id: str | None = None) -> str:
        file_id = file_id or (f"file-{_token(24)}" if provider == "openai" else
                              f"file-batch-{_token(32, '0123456789abcdef')}" if provider == "dashscope" else _token(12))
        self.files[file_id] = {"provider": provider, "bytes": data, "filename": filename, "purpose": purpose,
                               "created": self.now()}
        return file_id

    def _read_file(self, provider: str, file_id: str) -> dict:
        found = self.files.get(file_id)
        if found is None or found["provider"] != provider:
            raise BatchRefusal(404, "invalid_request_error" if provider != "gemini" else "NOT_FOUND",
                               f"No such File object: {file_id}")
        return found

    # ---- OpenAI and DashScope ----
    def _openai(self, provider: str, rest: str, method: str, headers: dict, raw: bytes) -> Reply:
        parts = rest.split("/")
        if rest == "files" and method == "POST":
            form = parse_multipart(headers.get("content-type", ""), raw)
            if "file" not in form:
                raise BatchRefusal(400, "invalid_request_error", "'file' is a required property", param="file")
            purpose = (form.get("purpose") or (None, b""))[1].decode()
            filename, data = form["file"]
            file_id = self._file(provider, data, filename or "upload.jsonl", purpose)
            return Reply.json(self._file_object(file_id))
        if parts[0] == "files" and len(parts) == 2 and method == "GET":
            self._read_file(provider, parts[1])
            return Reply.json(self._file_object(parts[1]))
        if parts[0] == "files" and len(parts) == 3 and method == "GET":
            return Reply(200, self._read_file(provider, parts[1])["bytes"], "application/octet-stream")
        if rest == "batches" and method == "POST":
            return Reply.json(self._openai_object(self._openai_create(provider, json.loads(raw or b"{}"))))
        if rest == "batches" and method == "GET":
            return Reply.json({"object": "list", "data": [self._openai_object(j) for j in self.received(provider)],
                               "has_more": False})
        job = self.job(parts[1])
        if job.provider != provider:
            raise BatchRefusal(404, "invalid_request_error", f"No batch found with id '{parts[1]}'.")
        if len(parts) == 3 and method == "POST":  # cancel
            if self._openai_status(job) in ("completed", "failed", "expired", "cancelled"):
                raise BatchRefusal(400, "invalid_request_error", f"Cannot cancel a batch with status "
                                   f"'{self._openai_status(job)}'.")
            job.cancelled_at = job.cancelled_at or self.now()
        job.polls += 1
        return Reply.json(self._openai_object(job))

    def _file_object(self, file_id: str) -> dict:
        f = self.files[file_id]
        return {"id": file_id, "object": "file", "bytes": len(f["bytes"]), "created_at": int(f["created"]),
                "filename": f["filename"], "purpose": f["purpose"], "status": "processed", "status_details": None}

    def _openai_create(self, provider: str, body: dict) -> SimBatch:
        rules = RULES[provider]
        if body.get("completion_window") != "24h":
            raise BatchRefusal(400, "invalid_request_error", "Invalid value for 'completion_window': only '24h' is "
                               "supported.", code="invalid_value", param="completion_window")
        if body.get("endpoint") != ENDPOINT:
            raise BatchRefusal(400, "invalid_request_error", f"Invalid value for 'endpoint': {body.get('endpoint')!r}"
                               " (this simulator batches /v1/chat/completions).", param="endpoint")
        file_id = body.get("input_file_id") or ""
        data = self._read_file(provider, file_id)["bytes"]
        job = self._new_job(provider, "batch_" + _token(32, "0123456789abcdef"), "", [], input_file=file_id,
                            endpoint=ENDPOINT, metadata=dict(body.get("metadata") or {}))
        # OpenAI validates the input file after accepting the batch: a bad file fails the batch, with the reasons.
        errors, models, seen = [], set(), set()
        if len(data) > rules.max_bytes:
            errors.append({"code": "file_too_large", "message": f"The input file is larger than the "
                           f"{rules.max_bytes // (1024 * 1024)} MB maximum.", "param": None, "line": None})
        rows = [r for r in data.decode("utf-8", "replace").splitlines() if r.strip()]
        if len(rows) > rules.max_requests:
            errors.append({"code": "too_many_requests", "message": f"The batch has {len(rows)} requests; at most "
                           f"{rules.max_requests} are allowed.", "param": None, "line": None})
        for n, row in enumerate(rows, 1):
            try:
                item = json.loads(row)
            except json.JSONDecodeError:
                errors.append({"code": "invalid_json_line", "message": "This line is not parseable as valid JSON.",
                               "param": None, "line": n})
                continue
            problem = self._openai_line_problem(item, seen)
            if problem:
                errors.append({"code": "invalid_request", "message": problem, "param": None, "line": n})
                continue
            seen.add(item["custom_id"])
            models.add(item["body"].get("model"))
            job.lines.append(Line(item["custom_id"], item["body"]))
        if len(models) > 1:  # https://platform.openai.com/docs/guides/batch: one model per input file
            errors.append({"code": "mismatched_model", "message": "Every request in a batch must use the same "
                           f"model; found {', '.join(sorted(map(str, models)))}.", "param": "body.model", "line": None})
        if errors:
            job.failed, job.lines = errors, []
            return job
        job.model = models.pop() if models else ""
        self._schedule(job, {})
        return job

    @staticmethod
    def _openai_line_problem(item: Any, seen: set) -> str | None:
        if not isinstance(item, dict):
            return "Each line must be a JSON object."
        if not isinstance(item.get("custom_id"), str) or not item["custom_id"]:
            return "Missing required parameter: 'custom_id'."
        if item["custom_id"] in seen:
            return f"The custom_id '{item['custom_id']}' is used more than once; each must be unique."
        if item.get("method") != "POST":
            return "The 'method' of each request must be 'POST'."
        if item.get("url") != ENDPOINT:
            return f"The 'url' of each request must match the batch's endpoint ({ENDPOINT})."
        if not isinstance(item.get("body"), dict):
            return "Missing required parameter: 'body'."
        return None

    def _openai_status(self, job: SimBatch) -> str:
        now = self.now()
        if now < job.validated:
            return "validating"
        if job.failed:
            return "failed"
        end = job.ended_at()
        if job.cancelled_at is not None:
            return "cancelling" if now < end else "cancelled"
        if now < end:
            return "in_progress"
        if job.last_due() > job.window_end:
            return "expired"
        return "finalizing" if now < end + 0.01 * job.plan.seconds else "completed"

    def _openai_object(self, job: SimBatch) -> dict:
        now, status = self.now(), self._openai_status(job)
        done = status in ("completed", "expired", "cancelled")
        if done and job.output_file is None:
            self._openai_files(job, now)
        outcomes = [job.outcome(line, now) for line in job.lines]
        ended = job.ended_at()
        return {
            "id": job.id, "object": "batch", "endpoint": job.endpoint, "model": job.model or None,
            "errors": {"object": "list", "data": job.failed} if job.failed else None,
            "input_file_id": job.input_file, "completion_window": "24h", "status": status,
            "output_file_id": job.output_file if done else None, "error_file_id": job.error_file if done else None,
            "created_at": int(job.created), "in_progress_at": int(job.validated) if now >= job.validated else None,
            "expires_at": int(job.window_end), "finalizing_at": int(ended) if status in ("finalizing", "completed")
            else None, "completed_at": int(ended) if status == "completed" else None,
            "failed_at": int(job.validated) if status == "failed" else None,
            "expired_at": int(job.window_end) if status == "expired" else None,
            "cancelling_at": int(job.cancelled_at) if job.cancelled_at is not None else None,
            "cancelled_at": int(ended) if status == "cancelled" else None,
            "request_counts": {"total": len(job.lines), "completed": outcomes.count("succeeded"),
                               "failed": sum(o in ("errored", "expired", "cancelled") for o in outcomes)},
            "metadata": job.metadata or None,
        }

    def _openai_files(self, job: SimBatch, now: float) -> None:
        """The output file (answered lines) and the error file (failed, expired and cancelled lines)."""
        out, err = [], []
        for line in job.lines:
            outcome, rid = job.outcome(line, now), f"batch_req_{_token(32, '0123456789abcdef')}"
            if outcome == "succeeded":
                out.append({"id": rid, "custom_id": line.custom_id, "response": {
                    "status_code": 200, "request_id": f"req_{_token(32, '0123456789abcdef')}", "body": line.payload},
                    "error": None})
            elif outcome == "errored":
                err.append({"id": rid, "custom_id": line.custom_id, "response": {
                    "status_code": line.status, "request_id": f"req_{_token(32, '0123456789abcdef')}",
                    "body": line.payload}, "error": None})
            else:
                code = "batch_expired" if outcome == "expired" else "batch_cancelled"
                message = ("This request could not be executed before the completion window expired."
                           if outcome == "expired" else "This request was not executed: the batch was cancelled.")
                err.append({"id": rid, "custom_id": line.custom_id, "response": None,
                            "error": {"code": code, "message": message}})
        to_bytes = lambda rows: "".join(json.dumps(r) + "\n" for r in rows).encode()  # noqa: E731
        job.output_file = self._file(job.provider, to_bytes(out), f"{job.id}_output.jsonl", "batch_output")
        job.error_file = self._file(job.provider, to_bytes(err), f"{job.id}_error.jsonl", "batch_output") if err \
            else None

    # ---- Anthropic ----
    def _anthropic(self, rest: str, method: str, headers: dict, raw: bytes) -> Reply:
        parts = rest.split("/")
        if rest == "messages/batches" and method == "POST":
            return Reply.json(self._anthropic_object(self._anthropic_create(headers, raw)))
        if rest == "messages/batches" and method == "GET":
            return Reply.json({"data": [self._anthropic_object(j) for j in self.received("anthropic")],
                               "has_more": False, "first_id": None, "last_id": None})
        job = self.job(parts[2])
        if job.provider != "anthropic":
            raise BatchRefusal(404, "not_found_error", f"message_batch_id: {parts[2]} not found")
        now = self.now()
        if len(parts) == 4 and parts[3] == "cancel" and method == "POST":
            if now >= job.ended_at():
                raise BatchRefusal(400, "invalid_request_error", "Batch has already ended and cannot be canceled.")
            job.cancelled_at = job.cancelled_at or now
        elif len(parts) == 4 and parts[3] == "results":
            if now < job.ended_at():
                raise BatchRefusal(400, "invalid_request_error", f"Message Batch {job.id} has not yet ended; "
                                   "results are available once processing_status is 'ended'.")
            if now > job.created + (RULES["anthropic"].results_days or 0) * 86400:
                raise BatchRefusal(404, "not_found_error", f"Results of Message Batch {job.id} have been archived "
                                   "and are no longer available.")
            rows = []
            for line in job.lines:
                outcome = job.outcome(line, now)
                if outcome == "succeeded":
                    result = {"type": "succeeded", "message": line.payload}
                elif outcome == "errored":
                    result = {"type": "errored", "error": line.payload}
                else:
                    result = {"type": "canceled" if outcome == "cancelled" else "expired"}
                rows.append({"custom_id": line.custom_id, "result": result})
            return Reply(200, "".join(json.dumps(r) + "\n" for r in rows).encode(), "application/binary")
        job.polls += 1
        return Reply.json(self._anthropic_object(job))

    def _anthropic_create(self, headers: dict, raw: bytes) -> SimBatch:
        rules = RULES["anthropic"]
        if len(raw) > rules.max_bytes:
            raise BatchRefusal(413, "request_too_large", f"Request exceeds the maximum size of "
                               f"{rules.max_bytes // (1024 * 1024)} MB for a Message Batch.")
        body = json.loads(raw or b"{}")
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            raise BatchRefusal(400, "invalid_request_error", "requests: List should have at least 1 item")
        if len(requests) > rules.max_requests:
            raise BatchRefusal(400, "invalid_request_error", f"requests: List should have at most "
                               f"{rules.max_requests} items after validation, not {len(requests)}")
        seen, lines = set(), []
        for i, item in enumerate(requests):
            custom_id = (item or {}).get("custom_id")
            if not isinstance(custom_id, str) or not ANTHROPIC_CUSTOM_ID.match(custom_id):
                raise BatchRefusal(400, "invalid_request_error", f"requests.{i}.custom_id: String should match "
                                   "pattern '^[a-zA-Z0-9_-]{1,64}$'")
            if custom_id in seen:
                raise BatchRefusal(400, "invalid_request_error", f"requests.{i}.custom_id: Duplicate custom_id "
                                   f"'{custom_id}'; each must be unique within a batch")
            if not isinstance(item.get("params"), dict):
                raise BatchRefusal(400, "invalid_request_error", f"requests.{i}.params: Field required")
            seen.add(custom_id)
            lines.append(Line(custom_id, item["params"]))
        job = self._new_job("anthropic", f"msgbatch_{_token(24)}", "", lines)
        self._schedule(job, headers)
        return job

    def _anthropic_object(self, job: SimBatch) -> dict:
        now = self.now()
        ended = now >= job.ended_at()
        outcomes = [job.outcome(line, now) for line in job.lines]
        status = "ended" if ended else "canceling" if job.cancelled_at is not None else "in_progress"
        return {
            "id": job.id, "type": "message_batch", "processing_status": status,
            "request_counts": {"processing": outcomes.count("processing"), "succeeded": outcomes.count("succeeded"),
                               "errored": outcomes.count("errored"), "canceled": outcomes.count("cancelled"),
                               "expired": outcomes.count("expired")},
            "ended_at": _stamp(job.ended_at()) if ended else None, "created_at": _stamp(job.created),
            "expires_at": _stamp(job.window_end),
            "archived_at": _stamp(job.created + (RULES["anthropic"].results_days or 0) * 86400)
            if now > job.created + (RULES["anthropic"].results_days or 0) * 86400 else None,
            "cancel_initiated_at": _stamp(job.cancelled_at) if job.cancelled_at is not None else None,
            "results_url": f"{self.root()}/anthropic/v1/messages/batches/{job.id}/results" if ended else None,
        }

    # ---- Gemini ----
    def _gemini(self, rest: str, method: str, headers: dict, query: dict, raw: bytes) -> Reply:
        if rest == "upload/v1beta/files" and method == "POST":
            return self._gemini_upload(headers, query, raw)
        m = re.fullmatch(r"v1beta/models/([^/:]+):batchGenerateContent", rest)
        if m and method == "POST":
            job = self._gemini_create(m.group(1), headers, json.loads(raw or b"{}"))
            return Reply.json(self._gemini_operation(job))
        m = re.fullmatch(r"download/v1beta/files/([^/:]+):download", rest)
        if m:
            return Reply(200, self._read_file("gemini", m.group(1))["bytes"], "application/octet-stream")
        m = re.fullmatch(r"v1beta/files/([^/:]+)", rest)
        if m:
            self._read_file("gemini", m.group(1))
            return Reply.json(self._gemini_file(m.group(1)))
        m = re.fullmatch(r"v1beta/batches/([^/:]+)(:cancel)?", rest)
        job = self.job(f"batches/{m.group(1)}")
        if m.group(2):
            if self.now() < job.ended_at():
                job.cancelled_at = job.cancelled_at or self.now()
            return Reply.json({})
        job.polls += 1
        return Reply.json(self._gemini_operation(job))

    def _gemini_upload(self, headers: dict, query: dict, raw: bytes) -> Reply:
        command = headers.get("x-goog-upload-command", "")
        if "upload_id" not in query:  # step 1: start a resumable upload
            if headers.get("x-goog-upload-protocol") != "resumable" or command != "start":
                raise BatchRefusal(400, "INVALID_ARGUMENT", "Expected X-Goog-Upload-Protocol: resumable and "
                                   "X-Goog-Upload-Command: start")
            meta = (json.loads(raw or b"{}").get("file") or {})
            upload_id = _token(40)
            self.uploads[upload_id] = {"display_name": meta.get("display_name") or meta.get("displayName") or "",
                                       "mime": headers.get("x-goog-upload-header-content-type", "")}
            url = f"{self.root()}/gemini/upload/v1beta/files?upload_id={upload_id}&upload_protocol=resumable"
            return Reply.json({}, headers={"X-Goog-Upload-URL": url, "X-Goog-Upload-Status": "active"})
        upload = self.uploads.pop(query["upload_id"][0], None)
        if upload is None or "finalize" not in command:
            raise BatchRefusal(400, "INVALID_ARGUMENT", "Unknown upload, or the upload was not finalized")
        file_id = self._file("gemini", raw, upload["display_name"], "batch")
        self.files[file_id]["mime"] = upload["mime"] or "application/jsonl"
        return Reply.json({"file": self._gemini_file(file_id)}, headers={"X-Goog-Upload-Status": "final"})

    def _gemini_file(self, file_id: str) -> dict:
        f = self.files[file_id]
        return {"name": f"files/{file_id}", "displayName": f["filename"],
                "mimeType": f.get("mime", "application/jsonl"),
                "sizeBytes": str(len(f["bytes"])), "createTime": _stamp(f["created"]),
                "updateTime": _stamp(f["created"]), "expirationTime": _stamp(f["created"] + GEMINI_FILE_HOURS * 3600),
                "uri": f"{self.root()}/gemini/v1beta/files/{file_id}", "state": "ACTIVE", "source": "UPLOADED"}

    def _gemini_create(self, model: str, headers: dict, body: dict) -> SimBatch:
        batch = body.get("batch") or {}
        config = batch.get("inputConfig") or batch.get("input_config") or {}
        file_name = config.get("fileName") or config.get("file_name")
        inline = config.get("requests")
        rules, lines = RULES["gemini"], []
        if file_name:
            data = self._read_file("gemini", file_name.removeprefix("files/"))["bytes"]
            if len(data) > rules.max_bytes:
                raise BatchRefusal(400, "INVALID_ARGUMENT", "The input file is larger than the Batch API accepts.")
            for n, row in enumerate(r for r in data.decode("utf-8", "replace").splitlines() if r.strip()):
                try:
                    item = json.loads(row)
                except json.JSONDecodeError:
                    raise BatchRefusal(400, "INVALID_ARGUMENT", f"Line {n + 1} of {file_name} is not valid "
                                       "JSON.") from None
                if not isinstance(item.get("request"), dict):
                    raise BatchRefusal(400, "INVALID_ARGUMENT", f"Line {n + 1} of {file_name} has no 'request'.")
                lines.append(Line(str(item.get("key", n)), item["request"]))
        elif isinstance(inline, dict):
            if len(json.dumps(inline)) > GEMINI_INLINE_BYTES:
                raise BatchRefusal(400, "INVALID_ARGUMENT", "Inline batch requests exceed 20 MB; use an input file.")
            for n, item in enumerate(inline.get("requests") or []):
                lines.append(Line(str(((item or {}).get("metadata") or {}).get("key", n)), item.get("request") or {}))
        else:
            raise BatchRefusal(400, "INVALID_ARGUMENT", "batch.input_config: give a file_name or inline requests.")
        if not lines or len(lines) > rules.max_requests:
            raise BatchRefusal(400, "INVALID_ARGUMENT", f"A batch holds 1 to {rules.max_requests} requests, not "
                               f"{len(lines)}.")
        job = self._new_job("gemini", f"batches/{_token(16, 'abcdefghijklmnopqrstuvwxyz0123456789')}", model, lines,
                            input_file=file_name, inline=not file_name,
                            display_name=batch.get("displayName") or batch.get("display_name") or "")
        self._schedule(job, headers)
        return job

    def _gemini_state(self, job: SimBatch) -> str:
        now = self.now()
        if now < job.validated:
            return "BATCH_STATE_PENDING"
        if now < job.ended_at():
            return "BATCH_STATE_RUNNING"
        if job.cancelled_at is not None:
            return "BATCH_STATE_CANCELLED"
        return "BATCH_STATE_EXPIRED" if job.last_due() > job.window_end else "BATCH_STATE_SUCCEEDED"

    def _gemini_operation(self, job: SimBatch) -> dict:
        now, state = self.now(), self._gemini_state(job)
        outcomes = [job.outcome(line, now) for line in job.lines]
        done = state in ("BATCH_STATE_SUCCEEDED", "BATCH_STATE_EXPIRED", "BATCH_STATE_CANCELLED")
        metadata = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
            "model": f"models/{job.model}", "displayName": job.display_name, "name": job.id,
            "createTime": _stamp(job.created), "updateTime": _stamp(min(now, job.ended_at())), "state": state,
            "batchStats": {"requestCount": str(len(job.lines)), "successfulRequestCount": str(outcomes.count(
                "succeeded")), "failedRequestCount": str(outcomes.count("errored")),
                "pendingRequestCount": str(outcomes.count("processing"))},
        }
        if job.input_file:
            metadata["inputConfig"] = {"fileName": job.input_file}
        op = {"name": job.id, "metadata": metadata, "done": done}
        if done:
            metadata["endTime"] = _stamp(job.ended_at())
            rows = []
            for line in job.lines:
                outcome = job.outcome(line, now)
                if outcome == "succeeded":
                    rows.append({"key": line.custom_id, "response": line.payload})
                else:
                    error = (line.payload.get("error") if outcome == "errored" else
                             {"code": 499 if outcome == "cancelled" else 504, "message": f"The request was {outcome} "
                              "before it was processed.", "status": "CANCELLED" if outcome == "cancelled" else
                              "DEADLINE_EXCEEDED"})
                    rows.append({"key": line.custom_id, "error": error})
            if job.inline:
                output = {"inlinedResponses": {"inlinedResponses": [
                    {"metadata": {"key": r["key"]}, **{k: v for k, v in r.items() if k != "key"}} for r in rows]}}
            else:
                if job.output_file is None:
                    job.output_file = self._file("gemini", "".join(json.dumps(r) + "\n" for r in rows).encode(),
                                                 f"{job.id}-responses.jsonl", "batch_output")
                output = {"responsesFile": f"files/{job.output_file}"}
            metadata["output"] = output
            op["response"] = {"@type": "type.googleapis.com/google.ai.generativelanguage.v1main."
                                       "GenerateContentBatchOutput", **output}
        return op
