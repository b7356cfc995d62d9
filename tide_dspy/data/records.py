"""Conversion between the benchmark's JSONL record formats and `Instance`.

Everything is validated by pydantic in one `Instance.model_validate` call, so a bad record raises a
`pydantic.ValidationError` whose locations name the offending field (see `describe_record_error`).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from tide_dspy.domains import REPOSITORY, WORKSPACE
from tide_dspy.schemas import Instance

REPOSITORY_PROBLEM_KEYS = ("problem_id", "description", "evidence", "patch")
CANDIDATE_KEYS = ("path", "qualname", "start_line", "end_line", "code")
WORKSPACE_KEYS = ("instance_id", "split", "profile", "actions", "artifacts", "problems")
REPOSITORY_KEYS = ("instance_id", "split", "repo", "anchor_commit", "problems")
REPOSITORY_META_KEYS = ("anchor_date", "num_problems", "num_candidates", "num_buggy_functions")


def detect_setting(record: dict[str, Any]) -> str:
    if "setting" in record:
        return record["setting"]
    if "candidates" in record:
        return REPOSITORY.name
    if "artifacts" in record:
        return WORKSPACE.name
    raise ValueError(
        "cannot tell the setting: the record has neither 'candidates' (repository) nor 'artifacts' (workspace)"
    )


def instance_from_record(record: dict[str, Any], setting: str | None = None) -> Instance:
    """Build a validated Instance from one record of either shared data set (or of our own dump format).

    `setting` forces the format when given; otherwise it is detected from the record's fields.
    """
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    detected = detect_setting(record) if setting is None else setting
    if setting is not None and ("setting" in record or "candidates" in record or "artifacts" in record):
        if (found := detect_setting(record)) != setting:
            raise ValueError(f"this is a {found} record, but the {setting} setting was asked; "
                             f"pass the right setting or leave it out to detect it")
    setting = detected
    if "setting" in record:  # already in our format (Instance.model_dump)
        return Instance.model_validate(record)
    if setting == WORKSPACE.name:
        return Instance.model_validate({"setting": WORKSPACE.name, **_present(record, WORKSPACE_KEYS)})
    return Instance.model_validate({
        "setting": REPOSITORY.name,
        **_present(record, REPOSITORY_KEYS),
        "artifacts": [_candidate_artifact(i, c) for i, c in enumerate(_list(record, "candidates"))],
        "meta": _present(record, REPOSITORY_META_KEYS),
    })


def _present(record: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The keys the record has; missing required ones are then reported by pydantic as 'Field required'."""
    return {k: record[k] for k in keys if k in record}


def _list(record: dict[str, Any], key: str) -> list[Any]:
    if key not in record:
        raise ValueError(f"{key}: Field required (add it)")
    value = record[key]
    if not isinstance(value, list):
        raise ValueError(f"{key}: expected a list, got {type(value).__name__}")
    return value


def _candidate_artifact(index: int, candidate: Any) -> dict[str, Any]:
    if not isinstance(candidate, dict):
        raise ValueError(f"candidates[{index}]: expected an object, got {type(candidate).__name__}")
    missing = [k for k in ("id", *CANDIDATE_KEYS) if k not in candidate]
    if missing:
        raise ValueError(f"candidates[{index}]: missing field(s) {', '.join(missing)}")
    return {"id": candidate["id"], "kind": "function", "payload": {k: candidate[k] for k in CANDIDATE_KEYS}}


def describe_record_error(exc: Exception, record: Any = None) -> str:
    """One line per problem, each starting with the field path (e.g. 'problems[1].evidence: ...').

    Repository records store their functions under 'candidates', which become the Instance's 'artifacts'
    index for index, so the path is given in the record's own terms.
    """
    rename = isinstance(record, dict) and "candidates" in record and "setting" not in record
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
    if rename:
        lines = [("candidates" + ln[len("artifacts"):]) if ln.startswith("artifacts[") else ln for ln in lines]
    return "; ".join(lines)


def _loc_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path
