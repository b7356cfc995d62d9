"""Conversion between the benchmark's JSONL record formats and `Instance`."""

from __future__ import annotations

from typing import Any

from tide_dspy.schemas import Artifact, ChosenAction, GoldProblem, Instance

REPOSITORY_PROBLEM_KEYS = ("problem_id", "description", "evidence", "patch")


def detect_setting(record: dict[str, Any]) -> str:
    if "setting" in record:
        return record["setting"]
    if "candidates" in record:
        return "repository"
    if "artifacts" in record:
        return "workspace"
    raise ValueError("cannot tell the setting: the record has neither 'candidates' (repository) nor 'artifacts' (workspace)")


def instance_from_record(record: dict[str, Any]) -> Instance:
    """Build a validated Instance from one record of either shared data set (or of our own dump format)."""
    setting = detect_setting(record)
    if "setting" in record:  # already in our format (Instance.model_dump)
        return Instance.model_validate(record)
    if setting == "workspace":
        problems = [
            GoldProblem(
                problem_id=p["problem_id"],
                description=p["description"],
                evidence=p["evidence"],
                action=ChosenAction(**p["action"]) if p.get("action") else None,
                category=p.get("category"),
            )
            for p in record.get("problems", [])
        ]
        return Instance(
            instance_id=record["instance_id"],
            setting="workspace",
            split=record.get("split"),
            profile=record.get("profile"),
            actions=record.get("actions", []),
            artifacts=record["artifacts"],
            problems=problems,
        )
    artifacts = [
        Artifact(
            id=c["id"],
            kind="function",
            payload={k: c[k] for k in ("path", "qualname", "start_line", "end_line", "code") if k in c},
        )
        for c in record["candidates"]
    ]
    problems = [
        GoldProblem(**{k: p[k] for k in REPOSITORY_PROBLEM_KEYS if k in p},
                    **{k: v for k, v in p.items() if k not in REPOSITORY_PROBLEM_KEYS})
        for p in record.get("problems", [])
    ]
    meta = {k: record[k] for k in ("anchor_date", "num_problems", "num_candidates", "num_buggy_functions") if k in record}
    return Instance(
        instance_id=record["instance_id"],
        setting="repository",
        split=record.get("split"),
        repo=record.get("repo"),
        anchor_commit=record.get("anchor_commit"),
        artifacts=artifacts,
        problems=problems,
        meta=meta,
    )
