"""The batch ledger of a run folder (`batches.jsonl`): every batch submitted, which requests it carried, and the
answer of each request once its batch ended. A stopped run that is started again reads it first: a request whose
batch is still running waits for that batch instead of being sent again, and a request whose answer is here is
answered from here. Nothing is paid twice.

One JSON event a line, appended as it happens (util.safe_write: never through a link, never half-written):

- `{"event": "submitted", "batch", "provider", "role", "model", "lines": {custom_id: key}, "at"}`
- `{"event": "answer", "key", "batch", "status", "body"}`: a request's final answer (a line that failed in a way
  worth retrying is not final: it is sent again, and its later answer is recorded then);
- `{"event": "ended", "batch", "state", "at"}`.

Keys identify a request by what it sends (its bytes, its rollout and how many times the same request came before);
no key, header or address is written. The window between a provider accepting a batch and the `submitted` line
being written is the one place a kill can lose track of a batch (its requests are then sent again on resume).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

LEDGER = "batches.jsonl"


@dataclass
class Submitted:
    batch: str
    provider: str
    role: str
    model: str
    lines: dict[str, str]  # custom_id -> key
    ended: str | None = None


@dataclass
class Ledger:
    """The ledger of one run folder; `path` None keeps it in memory only (a run without an output folder)."""

    path: Path | None = None
    batches: dict[str, Submitted] = field(default_factory=dict)
    answers: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # key -> (status, body)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def open(cls, folder: str | Path | None) -> Ledger:
        """The ledger of `folder` (created when missing), with what earlier sessions recorded there."""
        if folder is not None:
            from tide_dspy.util.safe_write import ensure_folder

            ensure_folder(folder)
        ledger = cls(Path(folder) / LEDGER if folder is not None else None)
        if ledger.path is not None and ledger.path.exists():
            ledger._read()
        return ledger

    def _read(self) -> None:
        with self.path.open("rb") as f:
            for n, raw in enumerate(f, 1):
                try:
                    self._apply(json.loads(raw))
                except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError):
                    # A line cut off by a kill, or edited by hand: what it recorded is sent again if asked for.
                    log.warning("%s: line %d is not a ledger event (an interrupted write?); ignoring it", self.path,
                                n)

    def _apply(self, event: dict) -> None:
        kind = event.get("event")
        if kind == "submitted":
            self.batches[event["batch"]] = Submitted(event["batch"], event["provider"], event["role"],
                                                     event["model"], dict(event["lines"]))
        elif kind == "answer":
            self.answers[event["key"]] = (int(event["status"]), event["body"].encode("utf-8"))
        elif kind == "ended" and event.get("batch") in self.batches:
            self.batches[event["batch"]].ended = event.get("state") or "ended"

    def _write(self, event: dict) -> None:
        with self.lock:
            self._apply(event)
            if self.path is None:
                return
            from tide_dspy.util.safe_write import append_text

            append_text(self.path, json.dumps(event, ensure_ascii=False) + "\n")

    # ---- what the collector records ----
    def submitted(self, batch: str, provider: str, role: str, model: str, lines: dict[str, str], at: float) -> None:
        self._write({"event": "submitted", "batch": batch, "provider": provider, "role": role, "model": model,
                     "lines": lines, "at": round(at, 3)})

    def answer(self, key: str, batch: str, status: int, body: bytes) -> None:
        self._write({"event": "answer", "key": key, "batch": batch, "status": status,
                     "body": body.decode("utf-8", "replace")})

    def ended(self, batch: str, state: str, at: float) -> None:
        self._write({"event": "ended", "batch": batch, "state": state, "at": round(at, 3)})

    # ---- what a resumed run asks ----
    def in_flight(self) -> list[Submitted]:
        """Batches submitted and not seen to end: their requests are waited for, not sent again."""
        return [b for b in self.batches.values() if b.ended is None]
