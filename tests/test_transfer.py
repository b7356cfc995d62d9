"""experiments/transfer.py: two libraries on the same instances, and findings that copy template tokens."""

from __future__ import annotations

import json

import dspy
from routed_lm import FIXTURE_DATA, RoutedLM, fixture_instances

from scripts import load_script
from tide_dspy.domains import get_setting
from tide_dspy.schemas import Template
from tide_dspy.templates import TemplateLibrary


def test_copied_tokens_counts_findings_that_repeat_a_templates_specific_tokens(workspace_instance):
    transfer = load_script("transfer")
    leaky = Template(id="ws-t01", name="Quote Q-9917 expires", pattern="the CFO Marta Quill approved REQ-77-0001 aloud",
                     evidence_flow=["find the request in the tracker"])
    clean = Template(id="ws-t02", name="Verbal approval never recorded", pattern="an approver said yes aloud",
                     evidence_flow=["find the request in the tracker"])
    library = TemplateLibrary([leaky, clean], "workspace")
    own_name = workspace_instance.profile["full_name"]
    rows = [{"instance_id": workspace_instance.instance_id, "findings": [
        {"description": "REQ-77-0001 waits on Marta Quill", "why": "", "used_template_id": "ws-t01"},
        {"description": f"{own_name} waits on a signature", "why": "", "used_template_id": "ws-t01"},
        {"description": "a request waits on a signature", "why": "", "used_template_id": "ws-t02"},
        {"description": "REQ-77-0001 again", "why": "", "used_template_id": ""},
    ]}]
    counts = transfer.copied_tokens(rows, library, {workspace_instance.instance_id: workspace_instance},
                                    get_setting("workspace"))
    # The last finding names no template, so it is checked against the whole library: it copies the leaky one.
    assert (counts["findings"], counts["citing_a_template"], counts["copying_template_tokens"]) == (4, 3, 2)
    assert counts["copy_rate"] == 0.5
    assert counts["copied_tokens"] == {"REQ-77-0001": 2, "Marta": 1, "Quill": 1}


def test_transfer_runs_each_library_on_the_same_instances(tmp_path, monkeypatch):

    transfer = load_script("transfer")
    workspace = fixture_instances("workspace")
    dspy.configure(lm=RoutedLM(workspace))
    monkeypatch.setenv("TIDE_DATA", str(FIXTURE_DATA))
    paths = {}
    for label, name in (("old", "Quote Q-4471 expires"), ("new", "Approval never recorded")):
        library = TemplateLibrary([Template(id="ws-t01", name=name, pattern="a pattern",
                                            evidence_flow=["find the first signal"])], "workspace")
        paths[label] = library.save(tmp_path / f"{label}.json")
    out = tmp_path / "transfer"
    assert transfer.main(["--setting", "workspace", "--backbone", "dummy", "--limit", "1", "--rounds", "1",
                          "--library", f"old={paths['old']}", "--library", f"new={paths['new']}",
                          "--out", str(out)]) == 0
    report = json.loads((out / "transfer.json").read_text())
    assert set(report) == {"old", "new"}
    assert report["old"]["instances"] == report["new"]["instances"] and len(report["old"]["instances"]) == 1
    assert report["old"]["findings"] > 0 and report["old"]["f1"]["retrieval"] is not None
