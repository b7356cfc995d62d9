"""Reading the benchmark's JSONL records as `Instance`s: which setting a record belongs to, and its errors in the
record's own terms. Each Setting converts the records of its own format (`Setting.from_record`).

Everything is validated by pydantic in one `Instance.model_validate` call, so a bad record raises a
`pydantic.ValidationError` whose locations name the offending field (see `describe_record_error`).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from tide_dspy.domains import SETTINGS, get_setting
from tide_dspy.schemas import Instance


def detect_setting(record: dict[str, Any]) -> str:
    """The setting a record names, else the one whose artifact field (Setting.record_key) it has."""
    if "setting" in record:
        return record["setting"]
    marked = [s.name for s in SETTINGS.values() if s.record_key in record]
    if len(marked) == 1:
        return marked[0]
    keys = " nor ".join(f"{s.record_key!r} ({s.name})" for s in SETTINGS.values())
    if not marked:
        raise ValueError(f"cannot tell the setting: the record has neither {keys}")
    raise ValueError(f"cannot tell the setting: the record has {' and '.join(map(repr, marked))} fields of "
                     f"{len(marked)} settings")


def instance_from_record(record: dict[str, Any], setting: str | None = None) -> Instance:
    """Build a validated Instance from one record of either shared data set (or of our own dump format).

    `setting` forces the format when given; otherwise it is detected from the record's fields.
    """
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    detected = detect_setting(record) if setting is None else setting
    if setting is not None and ("setting" in record or any(s.record_key in record for s in SETTINGS.values())):
        if (found := detect_setting(record)) != setting:
            raise ValueError(f"this is a {found} record, but the {setting} setting was asked; "
                             f"pass the right setting or leave it out to detect it")
    domain = get_setting(detected)  # an unknown name is refused here
    if "setting" in record:  # already in our format (Instance.model_dump)
        return Instance.model_validate(record)
    return domain.from_record(record)


def describe_record_error(exc: Exception, record: Any = None) -> str:
    """One line per problem, each starting with the field path (e.g. 'problems[1].evidence: ...').

    A record stores its artifacts under its setting's record_key (a repository record's functions are its
    'candidates'), which become the Instance's 'artifacts' index for index, so the path is given in the record's
    own terms.
    """
    key = _record_key(record)
    if isinstance(exc, ValidationError):
        lines = []
        for err in exc.errors(include_url=False):
            where = _loc_path(err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "missing":
                message += " (add it)"
            lines.append(f"{where}: {message}" if where else message)
    else:
        lines = [str(exc)]
    if key != "artifacts":
        lines = [(key + ln[len("artifacts"):]) if ln.startswith("artifacts[") else ln for ln in lines]
    return "; ".join(lines)


def _record_key(record: Any) -> str:
    """Where the record keeps its artifacts ('artifacts' in our own format or when the setting is unknown)."""
    if not isinstance(record, dict) or "setting" in record:
        return "artifacts"
    try:
        return get_setting(detect_setting(record)).record_key
    except ValueError:
        return "artifacts"


def _loc_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path
