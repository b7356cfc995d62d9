"""The action types of the workspace setting: the 18 PROBE action types the shared workspace data uses (the paper
does not list them), each with a generic description and the required parameters it carries in that data.

`WorkspaceSetting.action_types` is this table; the data generator offers its types to the LM and the default action
library of `tide discover workspace` has one action per type.
"""

from __future__ import annotations

# type -> (description, required parameters)
ACTION_TYPES: dict[str, tuple[str, list[str]]] = {
    "send_email": ("Send an email to the people who need to know or act.", ["recipients", "subject", "body"]),
    "send_slack_message": ("Post a chat message to a person or channel.", ["channel", "message"]),
    "make_phone_call": ("Call someone to resolve an urgent point.", ["contact", "purpose", "talking_points"]),
    "schedule_meeting": ("Schedule a new meeting.", ["attendees", "date", "time", "agenda", "location"]),
    "reschedule_meeting": ("Move an existing meeting.", ["meeting", "new_date", "new_time", "reason"]),
    "cancel_meeting": ("Cancel a meeting and tell its attendees.", ["meeting", "reason", "notify_attendees"]),
    "create_meeting_agenda": ("Write the agenda of an upcoming meeting.", ["meeting", "agenda_items", "pre_reads"]),
    "request_access": ("Request access to a system, folder or resource.", ["system", "access_level", "justification"]),
    "request_approval": ("Ask an approver to approve or sign something.",
                         ["approver", "item", "needed_by", "justification"]),
    "escalate_to_manager": ("Escalate a blocked issue to a manager.",
                            ["original_recipient", "escalation_recipient", "urgency_level", "business_impact",
                             "attempted_contacts"]),
    "delegate_task": ("Hand a task to someone else.", ["assignee", "task_description", "deadline", "priority_level"]),
    "create_task": ("Create a task to track follow-up work.", ["title", "assignee", "due_date", "description"]),
    "update_task_status": ("Update the status of a ticket or task.", ["ticket_id", "new_status", "comment"]),
    "update_document": ("Correct or update a document.", ["document_id", "change_summary", "new_content"]),
    "share_document": ("Share a document with the people who need it.", ["document_id", "recipients", "message"]),
    "update_project_plan": ("Change a project plan and tell those affected.",
                            ["plan_id", "changes", "rationale", "notify"]),
    "conduct_review": ("Review a document or change and record the outcome.",
                       ["document_id", "review_criteria", "feedback_type", "approval_status"]),
    "provide_feedback": ("Give written feedback on a piece of work.", ["recipient", "feedback", "examples"]),
}

