"""The collector: requests that callers wait on, gathered into provider batches and answered when those end.

Modelled on DSPy's `dspy.utils.unbatchify.Unbatchify` (each caller blocks on a future; one worker thread gathers
the queue into a batch), with what a provider batch needs besides: a queue is submitted when every worker that
holds the collector (`holding()`, one per instance in flight) is waiting on a request, or when its oldest request
has waited `BatchSettings.window` seconds; polling backs off; requests that failed in a way worth retrying are sent
again in a later batch, alone; and the ledger (batch.ledger) lets a stopped run resume without sending a request
twice. A request waiting here is not timed out: it waits as long as its batch runs (up to the provider's window).

Requests are grouped by role (backbone, judge: their batches are counted apart), provider, address and model; a
group larger than the provider's limits (backbones.batch_rules) goes as several batches.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field

from tide_dspy.backbones.batch_rules import BatchRules
from tide_dspy.batch.clients import CLIENTS, Endpoint, LineResult, Status
from tide_dspy.batch.ledger import Ledger

log = logging.getLogger(__name__)

_HOLDER: contextvars.ContextVar[int | None] = contextvars.ContextVar("tide_batch_holder", default=None)


@dataclass(frozen=True)
class BatchSettings:
    """How requests are gathered and waited for.

    `window`: seconds a queued request waits for the other workers before its batch is sent anyway (--batch-window).
    `poll_initial`, `poll_max`: the first wait between two status checks of a batch, doubled after each check up to
    the most. `line_attempts`: batches one request may go through (a line that expired, was rate-limited or hit a
    server error is sent again, alone, until then). `submit_attempts`: tries at creating one batch when the
    provider's answer is transient. `progress_every`: seconds between two progress lines while nothing changes."""

    window: float = 600.0
    poll_initial: float = 10.0
    poll_max: float = 300.0
    line_attempts: int = 3
    submit_attempts: int = 5
    progress_every: float = 60.0

    def __post_init__(self):
        for name in ("window", "poll_initial", "poll_max", "progress_every"):
            if not getattr(self, name) > 0:
                raise ValueError(f"batch {name} must be a positive number of seconds, got {getattr(self, name)}")
        if self.line_attempts < 1 or self.submit_attempts < 1:
            raise ValueError("line_attempts and submit_attempts must be at least 1")


class BatchLineFailed(RuntimeError):
    """A request that its batches did not answer: expired, rate-limited or failed each time it was sent, or part of
    a batch the provider refused. Raised to the caller (DSPy reports it as an unexpected LM error: not retried)."""


@dataclass
class Pending:
    key: str
    role: str
    endpoint: Endpoint
    body: dict
    holder: int | None
    rules: BatchRules
    future: Future = field(default_factory=Future)
    attempts: int = 0
    queued_at: float = field(default_factory=time.monotonic)
    not_before: float = 0.0


@dataclass
class Flight:
    """A batch the provider has: its lines (custom_id -> the request waiting on it, None while no caller of a
    resumed run has asked for it yet) and what polling has seen."""

    batch: str
    role: str
    endpoint: Endpoint | None
    lines: dict[str, Pending | None]
    keys: dict[str, str]  # custom_id -> key
    submitted: float = field(default_factory=time.monotonic)
    state: str = "submitted"
    finished: int = 0
    interval: float = 0.0
    next_poll: float = 0.0
    resumed: bool = False


Group = tuple[str, str, str, str, tuple]  # role, provider, base, model, batch-level headers


class Collector:
    """Gathers requests into batches and answers them (see the module docstring). `progress(line)` receives the
    progress lines (batches in flight, their state and age); by default they are logged."""

    def __init__(self, settings: BatchSettings | None = None, ledger: Ledger | None = None,
                 progress: Callable[[str], None] | None = None):
        self.settings = settings or BatchSettings()
        self.ledger = ledger or Ledger()
        self.progress = progress or log.info
        self.cond = threading.Condition()
        self.queued: dict[Group, list[Pending]] = {}
        self.flights: dict[str, Flight] = {}
        self.holders: dict[int, int] = {}  # holder -> requests it waits on (queued, submitting or in flight)
        self.expected = 0  # workers announced (expect) that have not started holding yet
        self.counts: dict[str, dict[str, int]] = {}  # role -> batches, lines, retried, replayed, resumed
        self.batch_ids: dict[str, list[str]] = {}
        self._ids = itertools.count(1)
        self._closed = False
        self._last_progress = ("", 0.0)
        # Batches an earlier session left in flight: polled once a caller of this session asks for one of their
        # requests (the caller's request says where and as whom to ask).
        self.resumable: dict[str, tuple[str, str]] = {}  # key -> (batch, custom_id)
        for submitted in self.ledger.in_flight():
            self.flights[submitted.batch] = Flight(submitted.batch, submitted.role, None,
                                                   dict.fromkeys(submitted.lines), dict(submitted.lines),
                                                   state="resumed", resumed=True)
            self.resumable.update({key: (submitted.batch, custom_id) for custom_id, key in submitted.lines.items()})
        self._thread = threading.Thread(target=self._run, name="tide-batch", daemon=True)
        self._thread.start()

    # ---- workers ----
    def expect(self, workers: int) -> None:
        """Announce `workers` workers about to start holding (a pool starting its first instances): no queue is sent
        for being the only one waiting before they have all started. One that never starts delays the batches by
        at most the window."""
        with self.cond:
            self.expected = max(0, workers)

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Count the calling thread (and the threads it starts with its context) as one worker in flight: a queue
        is sent once every worker in flight waits on a request."""
        with self.cond:
            holder = next(self._ids)
            self.holders[holder] = 0
            self.expected = max(0, self.expected - 1)
        token = _HOLDER.set(holder)
        try:
            yield
        finally:
            _HOLDER.reset(token)
            with self.cond:
                self.holders.pop(holder, None)
                self.cond.notify_all()

    def _count(self, role: str, what: str, n: int = 1) -> None:
        self.counts.setdefault(role, {"batches": 0, "lines": 0, "retried": 0, "replayed": 0, "resumed": 0})
        self.counts[role][what] += n

    # ---- one request ----
    def call(self, role: str, endpoint: Endpoint, rules: BatchRules, key: str, body: dict) -> LineResult:
        """The answer to one request, sent in a batch (or found in the ledger): blocks until its batch ends."""
        pending = Pending(key, role, endpoint, body, _HOLDER.get(), rules)
        with self.cond:
            if self._closed:
                raise BatchLineFailed("the batch collector is closed")
            answer = self.ledger.answers.get(key)
            if answer is not None:
                self._count(role, "replayed")
                return LineResult(*answer)
            self._wait_on(pending)
            batch, custom_id = self.resumable.pop(key, (None, None))
            flight = self.flights.get(batch)
            if flight is not None and flight.state != "ended":  # already in a batch the provider has
                flight.lines[custom_id] = pending
                flight.endpoint = flight.endpoint or endpoint
                self._count(role, "resumed")
            else:
                self.queued.setdefault(self._group(pending), []).append(pending)
            self.cond.notify_all()
        return pending.future.result()

    @staticmethod
    def _group(p: Pending) -> Group:
        return p.role, p.endpoint.provider, p.endpoint.base, p.endpoint.model, p.endpoint.headers

    def _wait_on(self, p: Pending) -> None:
        if p.holder in self.holders:
            self.holders[p.holder] += 1

    def _settle(self, p: Pending, result: LineResult | None = None, error: BaseException | None = None) -> None:
        """Answer a waiting request (under the lock): its worker is no longer waiting."""
        if p.holder in self.holders:
            self.holders[p.holder] -= 1
        if error is not None:
            p.future.set_exception(error)
        else:
            p.future.set_result(result)

    # ---- the worker thread ----
    def _ready(self, queue: list[Pending], now: float) -> bool:
        if not queue or any(p.not_before > now for p in queue):
            return False
        if now - min(p.queued_at for p in queue) >= self.settings.window:
            return True
        return (bool(self.holders) and not self.expected
                and all(waiting > 0 for waiting in self.holders.values()))

    def _run(self) -> None:
        while True:
            with self.cond:
                if self._closed:
                    return
                now = time.monotonic()
                groups = [g for g, q in self.queued.items() if self._ready(q, now)]
                batches = {g: self.queued.pop(g) for g in groups}
                due = [f for f in self.flights.values() if f.endpoint is not None and f.state != "ended"
                       and f.next_poll <= now]
                if not batches and not due:
                    self.cond.wait(timeout=self._sleep(now))
                    continue
            for group, queue in batches.items():
                self._submit(group, queue)
            for flight in due:
                self._poll(flight)
            self._report()

    def _sleep(self, now: float) -> float:
        """Seconds until something may be due: a queue's window, a poll, a progress line."""
        waits = [self.settings.progress_every]
        for queue in self.queued.values():
            waits.append(min(p.queued_at for p in queue) + self.settings.window - now)
            waits += [p.not_before - now for p in queue if p.not_before > now]
        waits += [f.next_poll - now for f in self.flights.values() if f.endpoint is not None and f.state != "ended"]
        return max(0.01, min(waits))

    # ---- submitting ----
    def _chunks(self, queue: list[Pending]) -> Iterator[list[Pending]]:
        rules = queue[0].rules
        chunk, size = [], 0
        for p in queue:
            line_size = len(json.dumps(p.body, ensure_ascii=False).encode()) + 200  # the line's frame
            if chunk and (len(chunk) >= rules.max_requests or size + line_size > rules.max_bytes):
                yield chunk
                chunk, size = [], 0
            chunk.append(p)
            size += line_size
        if chunk:
            yield chunk

    def _submit(self, group: Group, queue: list[Pending]) -> None:
        role, provider = group[0], group[1]
        client = CLIENTS[provider]
        for chunk in self._chunks(queue):
            endpoint = chunk[0].endpoint
            lines = {p.key: p for p in chunk}
            label = f"tide-{role}-{int(time.time())}"
            try:
                batch = client.submit(endpoint, [client.line(cid, p.body) for cid, p in lines.items()], label)
            except Exception as exc:  # noqa: BLE001 - any failure is either retried here or given to the callers
                self._submit_failed(group, chunk, exc)
                continue
            self.ledger.submitted(batch, provider, role, endpoint.model, {cid: p.key for cid, p in lines.items()},
                                  time.time())
            with self.cond:
                self._count(role, "batches")
                self._count(role, "lines", len(chunk))
                self.batch_ids.setdefault(role, []).append(batch)
                if self._closed:  # closed meanwhile: the batch is the provider's now, the ledger the next run's
                    for p in chunk:
                        self._settle(p, error=BatchLineFailed("the batch collector was closed while this request "
                                                              "waited"))
                    continue
                self.flights[batch] = Flight(batch, role, endpoint, dict(lines), {cid: p.key for cid, p in
                                                                                  lines.items()},
                                             interval=self.settings.poll_initial,
                                             next_poll=time.monotonic() + self.settings.poll_initial)
            log.info("%s batch %s submitted: %d request(s) to %s", role, batch, len(chunk), endpoint.label)

    def _submit_failed(self, group: Group, chunk: list[Pending], exc: BaseException) -> None:
        status = getattr(exc, "status_code", None) or getattr(exc, "status", None)
        transient = status is None or status == 429 or (isinstance(status, int) and status >= 500)
        attempts = max(p.attempts for p in chunk) + 1
        with self.cond:
            if transient and attempts < self.settings.submit_attempts and not self._closed:
                wait = min(self.settings.poll_max, self.settings.poll_initial * 2 ** attempts)
                log.warning("%s: creating a batch failed (%s); trying again in %.0f s", chunk[0].endpoint.label,
                            _brief(exc), wait)
                for p in chunk:
                    p.attempts, p.not_before = attempts, time.monotonic() + wait
                self.queued.setdefault(group, []).extend(chunk)
            else:
                error = BatchLineFailed(f"{chunk[0].endpoint.label}: the provider did not accept the batch "
                                        f"({_brief(exc)})")
                for p in chunk:
                    self._settle(p, error=error)
            self.cond.notify_all()

    # ---- polling ----
    def _poll(self, flight: Flight) -> None:
        client = CLIENTS[flight.endpoint.provider]
        try:
            status: Status = client.status(flight.endpoint, flight.batch)
            results = client.results(flight.endpoint, flight.batch) if status.done and not status.failed else {}
        except Exception as exc:  # noqa: BLE001 - a failed check is tried again later; the batch stays paid for
            with self.cond:
                flight.interval = min(self.settings.poll_max, max(flight.interval, self.settings.poll_initial) * 2)
                flight.next_poll = time.monotonic() + flight.interval
            log.warning("%s batch %s: checking it failed (%s); next check in %.0f s", flight.role, flight.batch,
                        _brief(exc), flight.interval)
            return
        with self.cond:
            flight.state, flight.finished = status.state, status.finished
            if self._closed:
                return
            if not status.done:
                flight.interval = min(self.settings.poll_max, max(flight.interval, self.settings.poll_initial) * 2)
                flight.next_poll = time.monotonic() + flight.interval
                return
            self._land(flight, status, results)
            self.cond.notify_all()

    def _land(self, flight: Flight, status: Status, results: dict[str, LineResult]) -> None:
        """A batch ended: answer its requests, send again the ones worth it, record everything (under the lock)."""
        flight.state = "ended"
        for custom_id, pending in flight.lines.items():
            key = flight.keys[custom_id]
            if status.failed:
                result = LineResult(0, reason=f"the batch failed: {status.failed}")
            else:
                result = results.get(custom_id) or LineResult(0, reason="missing from the results")
            final = not result.retryable or status.failed
            if final:
                self.ledger.answer(key, flight.batch, result.status, result.body)
            if pending is None:
                continue
            if not final and pending.attempts + 1 < self.settings.line_attempts:
                pending.attempts += 1
                pending.queued_at = time.monotonic()
                self._count(flight.role, "retried")
                self.queued.setdefault(self._group(pending), []).append(pending)
                log.info("%s request %s: %s in batch %s; sent again (attempt %d of %d)", flight.role, custom_id,
                         result.reason or f"HTTP {result.status}", flight.batch, pending.attempts + 1,
                         self.settings.line_attempts)
            elif result.retryable or status.failed:
                # Not answered after its attempts: not an HTTP error the caller's own retries would send again.
                self._settle(pending, error=BatchLineFailed(
                    f"{flight.endpoint.label} request in batch {flight.batch}: "
                    f"{result.reason or f'HTTP {result.status}'} (after {pending.attempts + 1} batch(es))"))
            else:
                self._settle(pending, result)
        self.ledger.ended(flight.batch, status.state, time.time())

    # ---- reporting ----
    def in_flight(self) -> list[Flight]:
        with self.cond:
            return [f for f in self.flights.values() if f.state != "ended" and f.endpoint is not None]

    def status_line(self) -> str:
        """Batches in flight (role, model, id, state, age, lines done) and requests queued, one line."""
        now = time.monotonic()
        with self.cond:
            flights = [f for f in self.flights.values() if f.state != "ended" and f.endpoint is not None]
            queued = {}
            for (role, *_), queue in self.queued.items():
                queued[role] = queued.get(role, 0) + len(queue)
        parts = [f"{f.role} {f.endpoint.label} {f.batch} {f.state} {_age(now - f.submitted)} "
                 f"{f.finished}/{len(f.lines)}" for f in flights]
        waiting = ", ".join(f"{role} {n}" for role, n in sorted(queued.items()))
        return (f"batches in flight: {len(flights)}" + (f" ({'; '.join(parts)})" if parts else "")
                + (f"; queued: {waiting}" if waiting else ""))

    def _report(self) -> None:
        line, now = self.status_line(), time.monotonic()
        if line != self._last_progress[0] or now - self._last_progress[1] >= self.settings.progress_every:
            self._last_progress = (line, now)
            self.progress(line)

    def summary(self) -> dict:
        """Per role: batches submitted and their ids, requests sent in them, sent again, answered from the ledger,
        and found in a batch of an earlier session (for lm_usage.json)."""
        with self.cond:
            return {role: {**counts, "batch_ids": list(self.batch_ids.get(role, []))}
                    for role, counts in self.counts.items()}

    def close(self) -> None:
        """Stop the worker thread. Requests still waiting get BatchLineFailed; batches in flight stay with the
        provider, and the ledger lets the next run pick them up."""
        with self.cond:
            self._closed = True
            error = BatchLineFailed("the batch collector was closed while this request waited")
            for queue in self.queued.values():
                for p in queue:
                    self._settle(p, error=error)
            self.queued.clear()
            for flight in self.flights.values():
                for custom_id, p in flight.lines.items():
                    if p is not None and not p.future.done():
                        self._settle(p, error=error)
                        flight.lines[custom_id] = None
            self.cond.notify_all()
        self._thread.join(timeout=5)

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _age(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _brief(exc: BaseException) -> str:
    from tide_dspy.util.secrets import scrub_text

    return scrub_text(f"{type(exc).__name__}: {exc}")[:300]
