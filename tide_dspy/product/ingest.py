"""Ingest a workspace folder (mail, calendars, documents) into Artifacts shaped like the shared workspace data.

Every item gets a stable id: its kind, "_", and 8 hex characters of a hash of the file's relative path and the
item's key inside the file (Message-ID or UID when there is one, else its index). Renaming the folder does not change
ids; moving a file does. A file that cannot be read is reported with its name and the reason, and skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from html.parser import HTMLParser
from pathlib import Path

import icalendar

from tide_dspy.data.safe_files import FileListing, list_files, matches_any, read_capped, read_file
from tide_dspy.schemas import Artifact
from tide_dspy.util.hashing import short_sha256

EMAIL_SUFFIXES = (".eml",)
MBOX_SUFFIXES = (".mbox",)
CALENDAR_SUFFIXES = (".ics",)
DOCUMENT_MIME = {".md": "text/markdown", ".markdown": "text/markdown", ".txt": "text/plain", ".csv": "text/csv"}


class IngestError(ValueError):
    """One file cannot be turned into artifacts; the message says why."""


@dataclass
class Skipped:
    path: str
    reason: str


@dataclass
class IngestResult:
    artifacts: list[Artifact] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # artifact id -> relative file it came from
    skipped: list[Skipped] = field(default_factory=list)  # unreadable or unsafe files
    fallbacks: list[Skipped] = field(default_factory=list)  # items kept, but read with a fallback (reason: which)
    ignored: list[str] = field(default_factory=list)  # files of a type we do not read

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.artifacts:
            out[a.kind] = out.get(a.kind, 0) + 1
        return out


@dataclass
class Reading:
    """What a reader reports besides its items: fallbacks it used (`notes`), items of the file it had to leave
    out (`skipped`: label, reason) and progress lines for a long read."""

    notes: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    progress: Callable[[str], None] = lambda line: None


MBOX_PROGRESS_BYTES = 4 * 2**20  # an mbox larger than this reports its progress, once per this many bytes read


def stable_id(kind: str, rel_path: str, key: str) -> str:
    return f"{kind}_{short_sha256(rel_path, key, length=8)}"


def iso(value) -> str:
    """ISO 8601 wall time as written (no UTC offset), like the shared data; dates stay dates."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=None).isoformat(timespec="seconds")
    if isinstance(value, date):
        return value.isoformat()
    return ""


# ---- email ----

class _TextOfHtml(HTMLParser):
    def __init__(self):
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data):
        self.parts.append(data)


def _html_to_text(html: str) -> str:
    parser = _TextOfHtml()
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split())


def _addresses(msg: EmailMessage, name: str) -> list[str]:
    header = msg[name]
    if header is None:
        return []
    addresses = getattr(header, "addresses", None)
    if addresses is None:
        return [str(header)]
    return [str(a) for a in addresses]


def _decoded(part: EmailMessage, notes: list[str], label: str) -> str:
    """The part's text; a charset Python does not know (or bytes that do not fit it) falls back to UTF-8, else
    Latin-1, and the fallback is noted."""
    try:
        return part.get_content()
    except (LookupError, UnicodeError) as exc:
        data = part.get_payload(decode=True) or b""
        try:
            text, used = data.decode("utf-8"), "UTF-8"
        except UnicodeDecodeError:
            text, used = data.decode("latin-1"), "Latin-1"
        problem = (f"unknown charset {part.get_content_charset()!r}" if isinstance(exc, LookupError)
                   else f"bytes that are not {part.get_content_charset()!r}")
        notes.append(f"{label}: {problem}; decoded as {used}")
        return text


def _body(msg: EmailMessage, notes: list[str]) -> str:
    part = msg.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    message_id = str(msg["Message-ID"] or "").strip()
    text = _decoded(part, notes, f"message {message_id}" if message_id else "a message")
    if part.get_content_subtype() == "html":
        text = _html_to_text(text)
    return text.strip()


def email_payload(msg: EmailMessage, notes: list[str]) -> tuple[dict, str | None]:
    """(payload, created_at) of one parsed message. Raises IngestError when it has no mail headers at all."""
    if not any(msg[h] for h in ("From", "To", "Subject", "Date")):
        raise IngestError("no From/To/Subject/Date header: this is not an RFC 822 message")
    date_header = msg["Date"]
    when = getattr(date_header, "datetime", None) if date_header is not None else None
    timestamp = iso(when) if when else ""
    payload = {
        "subject": str(msg["Subject"] or ""),
        "sender": (_addresses(msg, "From") or [""])[0],
        "to": _addresses(msg, "To"),
        "cc": _addresses(msg, "Cc"),
        "timestamp": timestamp,
        "body": _body(msg, notes),
    }
    return payload, timestamp or None


TOO_DEEP = ("MIME parts nested too deeply to read (deeper than Python's recursion limit allows); a real "
            "message nests a few levels")


def _parsed_payload(data: bytes, notes: list[str]) -> tuple[EmailMessage, dict, str | None]:
    """(message, payload, created_at) of one message's bytes; a message nested too deeply is an IngestError."""
    try:
        msg = BytesParser(policy=policy.default).parsebytes(data)
        return (msg, *email_payload(msg, notes))
    except RecursionError:
        raise IngestError(TOO_DEEP) from None


def read_eml(root: Path, rel: str, reading: Reading) -> list[tuple[str, dict, str | None]]:
    msg, payload, created = _parsed_payload(read_capped(root, rel), reading.notes)
    return [(str(msg["Message-ID"] or "").strip() or "#0", payload, created)]


def mbox_messages(data: bytes) -> Iterator[bytes]:
    """The messages of an mbox file's bytes, each without its `From ` separator line, split where Python's
    mailbox.mbox splits them (a line that starts with `From `; the blank line before it belongs to neither). The
    bytes come from read_capped, so the file is read once, safely, and never reopened by name."""
    lines = data.splitlines(keepends=True)
    message: list[bytes] | None = None
    for line in lines:
        if line.startswith(b"From "):
            if message is not None:
                yield _without_separator(message)
            message = []
        elif message is not None:
            message.append(line)
    if message is not None:
        yield _without_separator(message)


def _without_separator(lines: list[bytes]) -> bytes:
    if lines and not lines[-1].strip():
        lines = lines[:-1]
    return b"".join(lines)


def read_mbox(root: Path, rel: str, reading: Reading) -> list[tuple[str, dict, str | None]]:
    """Every message; one nested too deeply is left out (listed in `reading.skipped`) and the rest are read. A
    large mbox reports messages and megabytes read as it goes."""
    name = Path(rel).name
    data = read_capped(root, rel)
    size = len(data)
    report = size > MBOX_PROGRESS_BYTES
    if report:
        reading.progress(f"reading {name} ({size / 2**20:.1f} MB)")
    items, done, next_report = [], 0, MBOX_PROGRESS_BYTES
    for index, message in enumerate(mbox_messages(data)):
        done += len(message)
        try:
            msg, payload, created = _parsed_payload(message, reading.notes)
        except IngestError as exc:
            if str(exc) != TOO_DEEP:
                raise IngestError(f"message {index + 1}: {exc}") from None
            reading.skipped.append((f"message {index + 1}", str(exc)))
            continue
        items.append((str(msg["Message-ID"] or "").strip() or f"#{index}", payload, created))
        if report and done >= next_report:
            reading.progress(f"reading {name}: {index + 1} messages, {done / 2**20:.1f} of {size / 2**20:.1f} MB")
            next_report += MBOX_PROGRESS_BYTES
    if report:
        reading.progress(f"read {name}: {len(items)} messages ({done / 2**20:.1f} MB)")
    if not items:
        raise IngestError("no messages found (an mbox file starts each message with a 'From ' line)"
                          if not reading.skipped else "no message could be read")
    return items


# ---- calendar ----

def _person(value) -> str:
    address = str(value)
    if address.lower().startswith("mailto:"):
        address = address[len("mailto:"):]
    name = getattr(value, "params", {}).get("CN")
    return f"{name} <{address}>" if name else address


def _people(value) -> list[str]:
    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    return [_person(v) for v in values]


def event_payload(event) -> tuple[dict, str | None]:
    start = event.get("DTSTART")
    if start is None:
        raise IngestError(f"event {str(event.get('SUMMARY', ''))!r} has no DTSTART")
    start_dt = start.dt
    end = event.get("DTEND")
    if end is not None:
        end_dt = end.dt
    elif event.get("DURATION") is not None:
        end_dt = start_dt + event.get("DURATION").dt
    else:
        end_dt = start_dt + (timedelta(days=1) if not isinstance(start_dt, datetime) else timedelta(0))
    attendees = _people(event.get("ORGANIZER")) + _people(event.get("ATTENDEE"))
    description = str(event.get("DESCRIPTION", "") or "").strip()
    if event.get("RRULE") is not None:
        rule = event.get("RRULE").to_ical().decode()
        description = f"{description}\nRecurs: {rule}".strip()
    created = next((event.get(k).dt for k in ("CREATED", "DTSTAMP", "LAST-MODIFIED") if event.get(k) is not None), None)
    payload = {
        "title": str(event.get("SUMMARY", "") or ""),
        "start_time": iso(start_dt),
        "end_time": iso(end_dt),
        "location": str(event.get("LOCATION", "") or ""),
        "attendees": list(dict.fromkeys(attendees)),
        "description": description,
    }
    return payload, iso(created) or None


def read_ics(root: Path, rel: str, reading: Reading) -> list[tuple[str, dict, str | None]]:
    try:
        calendar = icalendar.Calendar.from_ical(read_capped(root, rel))
    except ValueError as exc:
        raise IngestError(f"not an iCalendar file ({exc})") from None
    items = []
    for index, event in enumerate(calendar.walk("VEVENT")):
        payload, created = event_payload(event)
        uid = str(event.get("UID", "") or "")
        recurrence = event.get("RECURRENCE-ID")
        key = f"{uid}@{iso(recurrence.dt)}" if uid and recurrence is not None else (uid or f"#{index}")
        items.append((key, payload, created))
    if not items:
        raise IngestError("no VEVENT entries")
    return items


# ---- documents ----

def read_document(root: Path, rel: str, reading: Reading) -> list[tuple[str, dict, str | None]]:
    path = Path(rel)
    data, info = read_file(root, rel)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise IngestError(f"not UTF-8 text (byte {exc.start}); convert it to UTF-8") from None
    if not text.strip():
        raise IngestError("empty document")
    mime = DOCUMENT_MIME[path.suffix.lower()]
    title = path.stem
    if mime == "text/markdown":
        title = next((line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")), title)
    modified = datetime.fromtimestamp(info.st_mtime)
    return [("#0", {"title": title, "mime": mime, "content": text.strip()}, iso(modified))]


READERS = {
    **{s: ("email", read_eml) for s in EMAIL_SUFFIXES},
    **{s: ("email", read_mbox) for s in MBOX_SUFFIXES},
    **{s: ("calendar", read_ics) for s in CALENDAR_SUFFIXES},
    **{s: ("document", read_document) for s in DOCUMENT_MIME},
}


def workspace_files(root: Path) -> FileListing:
    """Relative posix paths of every non-hidden file under root, sorted; unsafe ones are listed in `skipped`."""
    return list_files(root, lambda name: not name.startswith("."), lambda folder: folder.name.startswith("."))


def ingest_workspace(root: str | Path, *, exclude: Iterable[str] = (),
                     progress: Callable[[str], None] = lambda line: None) -> IngestResult:
    """Read every supported file under root but those matching `exclude` (globs on relative paths, or folders);
    list unreadable or unsafe files in `skipped`, other types in `ignored`, and items read with a decoding
    fallback in `fallbacks`. A long read reports its progress through `progress`."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a directory; pass a folder of .eml/.mbox/.ics/.md/.txt/.csv files")
    result = IngestResult()
    exclude = list(exclude)
    listing = workspace_files(root)
    result.skipped.extend(Skipped(s["path"], s["reason"]) for s in listing.skipped
                          if not matches_any(s["path"], exclude))
    for rel in listing.files:
        if matches_any(rel, exclude):
            continue
        reader = READERS.get(Path(rel).suffix.lower())
        if reader is None:
            result.ignored.append(rel)
            continue
        kind, read = reader
        reading = Reading(progress=progress)
        notes = reading.notes
        try:
            items = read(root, rel, reading)
        except (IngestError, ValueError, UnicodeError, LookupError, OSError) as exc:
            result.skipped.append(Skipped(rel, str(exc) or type(exc).__name__))
            continue
        except RecursionError:
            result.skipped.append(Skipped(rel, TOO_DEEP))
            continue
        result.skipped.extend(Skipped(f"{rel} ({label})", reason) for label, reason in reading.skipped)
        result.fallbacks.extend(Skipped(rel, note) for note in notes)
        for index, (key, payload, created) in enumerate(items):
            artifact_id = stable_id(kind, rel, key)
            if artifact_id in result.sources:  # the same Message-ID/UID twice in one file
                artifact_id = stable_id(kind, rel, f"{key}#{index}")
            result.artifacts.append(Artifact(id=artifact_id, kind=kind, created_at=created, payload=payload))
            result.sources[artifact_id] = rel
    result.skipped.sort(key=lambda s: s.path)
    result.artifacts.sort(key=lambda a: (a.created_at or "9999", a.id))
    return result
