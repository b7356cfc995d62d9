"""The profile and action library of a user's workspace: read from YAML, or the defaults when none is given.

The default library offers one generic action per PROBE action type, with the required parameters that type
carries in the shared workspace data (the paper does not list the types; these are the 18 the data uses).
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tide_dspy.schemas import Action
from tide_dspy.util.hashing import short_sha256
from tide_dspy.util.jsonio import read_yaml_file

# type -> (description, required parameters)
PROBE_ACTION_TYPES: dict[str, tuple[str, list[str]]] = {
    "send_email": ("Send an email to the people who need to know or act.", ["recipients", "subject", "body"]),
    "send_slack_message": ("Post a chat message to a person or channel.", ["channel", "message"]),
    "make_phone_call": ("Call someone to resolve an urgent point.", ["contact", "purpose", "talking_points"]),
    "schedule_meeting": ("Schedule a new meeting.", ["attendees", "date", "time", "agenda", "location"]),
    "reschedule_meeting": ("Move an existing meeting.", ["meeting", "new_date", "new_time", "reason"]),
    "cancel_meeting": ("Cancel a meeting and tell its attendees.", ["meeting", "reason", "notify_attendees"]),
    "create_meeting_agenda": ("Write the agenda of an upcoming meeting.", ["meeting", "agenda_items", "pre_reads"]),
    "request_access": ("Request access to a system, folder or resource.", ["system", "access_level", "justification"]),
    "request_approval": (
        "Ask an approver to approve or sign something.",
        ["approver", "item", "needed_by", "justification"],
    ),
    "escalate_to_manager": (
        "Escalate a blocked issue to a manager.",
        ["original_recipient", "escalation_recipient", "urgency_level", "business_impact", "attempted_contacts"],
    ),
    "delegate_task": ("Hand a task to someone else.", ["assignee", "task_description", "deadline", "priority_level"]),
    "create_task": ("Create a task to track follow-up work.", ["title", "assignee", "due_date", "description"]),
    "update_task_status": ("Update the status of a ticket or task.", ["ticket_id", "new_status", "comment"]),
    "update_document": ("Correct or update a document.", ["document_id", "change_summary", "new_content"]),
    "share_document": ("Share a document with the people who need it.", ["document_id", "recipients", "message"]),
    "update_project_plan": (
        "Change a project plan and tell those affected.",
        ["plan_id", "changes", "rationale", "notify"],
    ),
    "conduct_review": (
        "Review a document or change and record the outcome.",
        ["document_id", "review_criteria", "feedback_type", "approval_status"],
    ),
    "provide_feedback": ("Give written feedback on a piece of work.", ["recipient", "feedback", "examples"]),
}

DEFAULT_PROFILE_NOTE = "No profile was given: infer the person's role and priorities from the workspace itself."


def default_actions() -> list[Action]:
    return [Action(id=f"act_{t}", type=t, description=d, required_parameters=list(p))
            for t, (d, p) in PROBE_ACTION_TYPES.items()]


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
