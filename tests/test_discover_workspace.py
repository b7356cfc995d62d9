"""`tide discover workspace`: ingest of mail, calendars and documents, the action library, the CLI end to end."""

from __future__ import annotations

import json
import mailbox
import re
import shutil
from pathlib import Path

import dspy
import pytest
from dspy.utils.dummies import DummyLM

from tide_dspy.cli.main import main
from tide_dspy.domains import WORKSPACE
from tide_dspy.product import discover_workspace
from tide_dspy.product.ingest import ingest_workspace
from tide_dspy.product.library import default_actions, load_actions, load_profile

FIXTURE = Path(__file__).parent / "fixtures" / "ingest"
EMAIL_KEYS = ["subject", "sender", "to", "cc", "timestamp", "body"]
CALENDAR_KEYS = ["title", "start_time", "end_time", "location", "attendees", "description"]
DOCUMENT_KEYS = ["title", "mime", "content"]


def by_title(result):
    return {a.title: a for a in result.artifacts}


@pytest.fixture
def workspace(tmp_path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "ws"))


@pytest.fixture(scope="module")
def ingested():
    """The fixture folder (two emails, two events, a run sheet) read once."""
    return ingest_workspace(FIXTURE)


def test_every_fixture_file_is_read_by_kind(ingested):
    assert ingested.counts() == {"email": 2, "calendar": 2, "document": 1}
    assert not ingested.skipped and not ingested.ignored


def test_artifact_ids_are_the_kind_and_eight_hex_digits(ingested):
    assert all(re.fullmatch(rf"{a.kind}_[0-9a-f]{{8}}", a.id) for a in ingested.artifacts)


def test_each_kind_has_the_shared_payload_keys_in_order(ingested):
    keys = {"email": EMAIL_KEYS, "calendar": CALENDAR_KEYS, "document": DOCUMENT_KEYS}
    assert all(list(a.payload) == keys[a.kind] for a in ingested.artifacts)


def test_an_email_keeps_its_addresses_with_names(ingested):
    approval = by_title(ingested)["Badge printer quote: approved"].payload
    assert approval["sender"] == "Dana Kittredge <dana.kittredge@northwind.example>"
    assert approval["to"] == ["Sam Ortiz <sam.ortiz@northwind.example>"]
    assert approval["cc"] == ["Priya Raman <priya.raman@northwind.example>"]


def test_an_emails_date_is_its_timestamp_and_creation_time(ingested):
    approval = by_title(ingested)["Badge printer quote: approved"]
    assert approval.payload["timestamp"] == "2026-03-09T08:42:00" == approval.created_at


def test_an_emails_body_is_its_text(ingested):
    body = by_title(ingested)["Badge printer quote: approved"].payload["body"]
    assert "holds the price until Friday 13 March" in body


def test_a_multipart_emails_body_is_its_plain_part(ingested):
    requisition = by_title(ingested)["Re: Badge printer requisition"].payload
    assert requisition["body"].startswith("Procurement still shows requisition REQ-2207")


def test_an_event_keeps_its_start_and_location(ingested):
    summit = by_title(ingested)["Spring partner summit"].payload
    assert summit["start_time"] == "2026-03-19T09:00:00" and summit["location"] == "Hall B"


def test_an_events_organizer_is_its_first_attendee(ingested):
    summit = by_title(ingested)["Spring partner summit"].payload
    assert summit["attendees"][0] == "Sam Ortiz <sam.ortiz@northwind.example>" and len(summit["attendees"]) == 3


def test_an_event_is_created_when_it_was_stamped(ingested):
    assert by_title(ingested)["Spring partner summit"].created_at == "2026-03-02T09:00:00"


def test_a_recurring_events_rule_is_in_its_description(ingested):
    assert "Recurs: FREQ=WEEKLY;BYDAY=TH" in by_title(ingested)["Events ops weekly"].payload["description"]


def test_a_markdown_document_keeps_its_mime_and_content(ingested):
    sheet = by_title(ingested)["Summit run sheet"].payload
    assert sheet["mime"] == "text/markdown" and "| Badge printer delivered | Sam |" in sheet["content"]


def test_each_artifact_names_the_file_it_came_from(ingested):
    assert ingested.sources[by_title(ingested)["Summit run sheet"].id] == "run-sheet.md"


def test_artifacts_are_in_creation_order(ingested):
    assert [a.created_at for a in ingested.artifacts] == sorted(a.created_at for a in ingested.artifacts)


def test_ids_are_stable_across_runs_and_locations(workspace):
    first = [a.id for a in ingest_workspace(FIXTURE).artifacts]
    assert [a.id for a in ingest_workspace(workspace).artifacts] == first
    assert len(set(first)) == len(first)


def test_mbox_and_csv(workspace):
    box = mailbox.mbox(workspace / "archive.mbox")
    for name in ("verbal-approval.eml", "requisition-status.eml"):
        box.add((workspace / name).read_bytes())
    box.flush()
    box.close()
    (workspace / "budget.csv").write_text("line,amount\nbadge printer,1840\n")
    result = ingest_workspace(workspace)
    assert result.counts() == {"email": 4, "calendar": 2, "document": 2}
    from_mbox = [a for a in result.artifacts if result.sources[a.id] == "archive.mbox"]
    assert sorted(a.title for a in from_mbox) == ["Badge printer quote: approved", "Re: Badge printer requisition"]
    csv = by_title(result)["budget"].payload
    assert csv["mime"] == "text/csv" and csv["content"].startswith("line,amount")


def test_bad_files_are_reported_by_name_and_skipped(workspace):
    (workspace / "broken.ics").write_text("this is not a calendar\n")
    (workspace / "latin1.txt").write_bytes("caf\xe9 menu".encode("latin-1"))
    (workspace / "empty.mbox").write_text("no From_ line here\n")
    (workspace / "scan.pdf").write_bytes(b"%PDF-1.4")
    result = ingest_workspace(workspace)
    skipped = {s.path: s.reason for s in result.skipped}
    assert set(skipped) == {"broken.ics", "latin1.txt", "empty.mbox"}
    assert "not an iCalendar file" in skipped["broken.ics"]
    assert "not UTF-8 text" in skipped["latin1.txt"]
    assert "no messages found" in skipped["empty.mbox"]
    assert result.ignored == ["scan.pdf"]
    assert len(result.artifacts) == 5  # the good files are still read


def test_default_action_library_has_one_action_per_probe_type():
    actions = default_actions()
    assert [a.type for a in actions] == list(WORKSPACE.action_types)
    assert len({a.id for a in actions}) == len(actions) == 18
    assert next(a for a in actions if a.type == "send_email").required_parameters == ["recipients", "subject", "body"]


def test_actions_and_profile_from_yaml(tmp_path):
    path = tmp_path / "actions.yaml"
    path.write_text(
        "actions:\n  - id: act_sign\n    type: request_approval\n    description: Ask Dana to e-sign REQ-2207\n"
        "    required_parameters: [approver, requisition_id]\n"
        "  - type: send_email\n    description: Email the vendor\n"
    )
    actions = load_actions(path)
    assert actions[0].id == "act_sign" and actions[0].required_parameters == ["approver", "requisition_id"]
    assert re.fullmatch(r"act_[0-9a-f]{8}", actions[1].id)
    path.write_text("- id: a1\n  type: send_email\n")
    with pytest.raises(ValueError, match=r"actions\.yaml: actions\[0\]\.description: Field required"):
        load_actions(path)
    path.write_text("- id: a1\n  type: x\n  description: y\n- id: a1\n  type: x\n  description: z\n")
    with pytest.raises(ValueError, match="'a1' is used twice"):
        load_actions(path)
    profile = tmp_path / "profile.yaml"
    profile.write_text("full_name: Sam Ortiz\noccupation: Events lead\ntoday: 2026-03-11\n")
    assert load_profile(profile) == {"full_name": "Sam Ortiz", "occupation": "Events lead", "today": "2026-03-11"}
    profile.write_text("- just a list\n")
    with pytest.raises(ValueError, match="expected a mapping"):
        load_profile(profile)


APPROVAL = {
    "description": "Dana's verbal approval is not recorded: REQ-2207 still waits for her e-signature and the price "
                   "hold ends on 13 March",
    "action_id": "act_request_approval",
    "parameters": {"approver": "Dana Kittredge", "item": "REQ-2207", "needed_by": "2026-03-13",
                   "justification": "vendor price hold"},
    "used_template_id": "",
    "why": "",
}


def approval_lm(workspace: Path) -> tuple[DummyLM, list[str]]:
    items = by_title(ingest_workspace(workspace))
    evidence = [items["Badge printer quote: approved"].id, items["Re: Badge printer requisition"].id]
    return DummyLM([{"findings": json.dumps([{**APPROVAL, "evidence_ids": evidence}])}, {"findings": "[]"}]), evidence


def test_discover_workspace_with_default_library(workspace):
    lm, evidence = approval_lm(workspace)
    lines = []
    result = discover_workspace(workspace, lm=lm, backbone="none-shipped", progress=lines.append)
    (f,) = result.findings
    assert f.evidence == evidence and f.action.type == "request_approval" and not f.flags
    assert result.instance.actions == default_actions()
    assert result.instance.profile["today"]
    assert any("default action library" in n for n in result.notes)
    assert lines[0].endswith("read 5 items (2 emails, 2 calendar entries, 1 documents); 0 file(s) skipped, "
                             "0 of other types ignored")
    assert any(line.startswith("[round 1] 1 new") for line in lines)


def test_cli_workspace_end_to_end(workspace, tmp_path, monkeypatch, capsys):
    (workspace / "broken.ics").write_text("garbage\n")
    lm, evidence = approval_lm(workspace)
    dspy.configure(lm=lm)
    profile = tmp_path / "profile.yaml"
    profile.write_text("full_name: Sam Ortiz\noccupation: Events lead\ntoday: 2026-03-11\n")
    out = tmp_path / "report"
    rc = main(["discover", "workspace", str(workspace), "--profile", str(profile), "--out", str(out),
               "--backbone", "none-shipped"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "1 file(s) skipped" in printed and "skipped broken.ics: not an iCalendar file" in printed
    assert "No --actions given: offered the default action library (18 generic actions" in printed
    assert "done: 1 finding | 2 rounds over 1 window(s) | 2 LM calls" in printed
    data = json.loads((out / "findings.json").read_text())
    assert data["findings"][0]["evidence"] == evidence
    assert data["findings"][0]["action"]["action_id"] == "act_request_approval"
    md = (out / "report.md").read_text()
    assert f'`{evidence[0]} email "Badge printer quote: approved" (verbal-approval.eml)`' in md
    assert "Action: `act_request_approval (request_approval)`" in md and "- approver: Dana Kittredge" in md
    assert "## Skipped inputs" in md and "- broken.ics: not an iCalendar file" in md
    page = (out / "report.html").read_text()
    assert "Badge printer quote: approved" in page and "default action library" in page


def test_cli_workspace_with_own_actions(workspace, tmp_path, monkeypatch, capsys):
    actions = tmp_path / "actions.yaml"
    actions.write_text("- id: act_request_approval\n  type: request_approval\n  description: Ask Dana to e-sign\n"
                       "  required_parameters: [approver]\n")
    lm, _ = approval_lm(workspace)
    dspy.configure(lm=lm)
    rc = main(["discover", "workspace", str(workspace), "--actions", str(actions), "--out", str(tmp_path / "o"),
               "--backbone", "none-shipped"])
    assert rc == 0
    assert "default action library" not in capsys.readouterr().out


def test_cli_workspace_without_readable_files(tmp_path, monkeypatch, capsys):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "bad.eml").write_bytes(b"\x00\x01")
    dspy.configure(lm=DummyLM([]))
    assert main(["discover", "workspace", str(tmp_path / "ws"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no readable .eml" in err and "1 skipped" in err


def test_library_call_scopes_the_adapter_of_its_lm_and_leaves_settings_alone(workspace, monkeypatch):
    import dspy

    from tide_dspy.backbones import registry

    items = by_title(ingest_workspace(workspace))
    evidence = [items["Badge printer quote: approved"].id, items["Re: Badge printer requisition"].id]
    answers = [{"findings": json.dumps([{**APPROVAL, "evidence_ids": evidence}])}, {"findings": "[]"}]
    seen = []

    class Recording(dspy.JSONAdapter):
        def __call__(self, *args, **kwargs):
            seen.append(self)
            return super().__call__(*args, **kwargs)

    json_adapter = Recording()
    lm = DummyLM(answers, adapter=json_adapter)
    monkeypatch.setattr(registry, "adapter_for", lambda m: json_adapter if m is lm else None)
    result = discover_workspace(workspace, lm=lm, backbone="none-shipped", progress=lambda _: None)
    assert len(result.findings) == 1 and len(seen) == 2  # both rounds went through the scoped adapter
    assert dspy.settings.adapter is None
