"""The profile and action library of a user's workspace: read from YAML, or the defaults when none is given.

The default library offers one generic action per action type of the workspace setting
(`WorkspaceSetting.action_types`), with the required parameters that type carries in the shared data.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tide_dspy.domains import WORKSPACE
from tide_dspy.schemas import Action
from tide_dspy.util.hashing import short_sha256
from tide_dspy.util.jsonio import read_yaml_file

DEFAULT_PROFILE_NOTE = "No profile was given: infer the person's role and priorities from the workspace itself."


def default_actions() -> list[Action]:
    return [Action(id=f"act_{t}", type=t, description=d, required_parameters=list(p))
            for t, (d, p) in WORKSPACE.action_types.items()]


def load_actions(path: str | Path) -> list[Action]:
    """An action library from YAML: a list of actions, or a mapping with an `actions` list.

    Each action needs `type` and `description`; `id` defaults to "act_" plus 8 hex of a hash of those two.
    """
    path = Path(path)
    data = read_yaml_file(path)
    if isinstance(data, dict):
        data = data.get("actions")
    if not isinstance(data, list) or not data:
        raise ValueError(f"{path}: expected a non-empty list of actions (or a mapping with an 'actions' list)")
    actions = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: actions[{i}] is not a mapping; write 'type:' and 'description:' keys")
        entry = dict(entry)
        if "id" not in entry and {"type", "description"} <= entry.keys():
            entry["id"] = f"act_{short_sha256(entry['type'], entry['description'], length=8)}"
        try:
            actions.append(Action.model_validate(entry))
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"])
            raise ValueError(f"{path}: actions[{i}].{where}: {problem['msg']}") from None
    ids = [a.id for a in actions]
    duplicate = next((x for x in ids if ids.count(x) > 1), None)
    if duplicate:
        raise ValueError(f"{path}: action id {duplicate!r} is used twice; give each action its own id")
    return actions


def load_profile(path: str | Path) -> dict[str, Any]:
    """A profile mapping from YAML (full_name, occupation, about, relationships, today, ...)."""
    path = Path(path)
    data = read_yaml_file(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping such as 'full_name: ...', 'occupation: ...', 'today: YYYY-MM-DD'")
    return {k: (v.isoformat() if isinstance(v, date) else v) for k, v in data.items()}


def default_profile(today: str) -> dict[str, Any]:
    return {"about": DEFAULT_PROFILE_NOTE, "today": today}
