"""The abstraction check: specific tokens of a source case carried into a template (or a finding)."""

from __future__ import annotations

import pytest

from tide_dspy.abstraction import check, check_finding, source_keys, tokens

CASE = """### email_7d30c95e (email, 2027-10-15T10:15:00)
Cc: the shift lead and the QA techs
From: Odette Brannigan <obrannigan@fernhollow-labs.org>
Subject: Re: KX-40 centrifuge replacement
Good news. Hollis told the stand-up he will cover the KX-45 swap from his own budget. Please ask Imogen to email
the signed PO to Brightwick today. Ledgerline still lists PRQ-26-0739 (amount $57,300.00) pending the CFO e-signature.
The movers stay booked only if Brightwick receives that PO before Friday 10/22. Report: 3,145 runs, 7.3% rework rate.
Good news travels fast. The quote is in shared/quotes/q5823.pdf and the ticket is #5823.
"""
CODE_CASE = """### src/quillmark/tags/tag_index.py::TagIndex.__getitem__ (src/quillmark/tags/tag_index.py lines 112-126)
    def __getitem__(self, label):
        for tag in self._tags:
            if label in tag:
                return True
        return fold_missing(label)
The issue: looking up a tag against a HeadingSpan heading fails when the heading has brackets.
"""
FLOW = ["find a request still pending in the system of record", "join it with a message saying it was approved"]


def leaked(report) -> set[tuple[str, str]]:
    return {(lk.kind, lk.token) for lk in report.leaks}


def test_an_abstract_template_passes_with_score_one():
    report = check("Verbal approval never recorded",
                   "an approver said yes aloud, but the system of record still waits on their signature", FLOW,
                   source=CASE)
    assert report.passed and report.score == 1.0 and report.leaks == []


@pytest.mark.parametrize(("text", "kind", "token"), [
    ("ask obrannigan@fernhollow-labs.org to sign", "email", "obrannigan@fernhollow-labs.org"),
    ("the quote lives in q5823.pdf", "path", "q5823.pdf"),
    ("a purchase of $57,300 waits", "money", "$57,300"),
    ("a purchase of 57,300 dollars waits", "money", "57,300 dollars"),
    ("the crew is released after October 22", "date", "October 22"),  # written 10/22 in the case
    ("PRQ-26-0739 waits on a signature", "id", "PRQ-26-0739"),
    ("ticket #5823 is open", "id", "#5823"),
    ("a figure of 7.3% is stale", "number", "7.3%"),
    ("3,145 runs were counted", "number", "3,145"),
    ("Brightwick cannot ship", "name", "Brightwick"),
    ("ask Imogen to issue the order", "name", "Imogen"),
    ("the artifact email_7d30c95e says so", "identifier", "email_7d30c95e"),
])
def test_each_kind_of_specific_token_of_the_case_is_found(text, kind, token):
    report = check("Approval never recorded", text, FLOW, source=CASE)
    assert (kind, token) in leaked(report)
    assert report.score == pytest.approx(1 / (1 + len(report.leaks)), abs=1e-4) and not report.passed


def test_code_identifiers_paths_and_line_numbers_of_a_code_case_are_found():
    report = check("TagIndex lookup", "fold_missing fails in tag_index.py", [
        "TagIndex.__getitem__ (src/quillmark/tags/tag_index.py lines 112-126)", "look at the tag matching loop"],
        source=CODE_CASE)
    found = leaked(report)
    assert {("identifier", "TagIndex"), ("identifier", "fold_missing"), ("path", "tag_index.py"),
            ("identifier", "TagIndex.__getitem__"), ("path", "src/quillmark/tags/tag_index.py"),
            ("number", "112"), ("number", "126")} <= found


def test_generic_words_builtins_and_protocol_names_are_not_specific():
    # Words of the case that it also writes in lower case, sentence-initial words, builtins and dunder names,
    # single digits and acronyms are what an abstract template is made of.
    report = check("Good news that hides a pending signature",
                   "The CFO said yes; the PO waits on QA. A __getitem__ that returns True for 1 tag of a HeadingSpan",
                   FLOW, source=CASE + CODE_CASE)
    assert leaked(report) == {("identifier", "HeadingSpan")}


def test_tokens_the_case_does_not_contain_are_not_leaks():
    report = check("Approval pending", "REQ-99-0001 for $1,000 waits on Marta since 7/4", FLOW, source=CASE)
    assert report.passed


def test_a_field_description_copied_as_a_value_is_a_fault():
    report = check("Pending approval", "a short name for the class of problem", FLOW, source=CASE)
    assert ("field_description", "a short name for the class of problem") in leaked(report)
    assert "repeat the field description" in report.feedback()


def test_an_evidence_flow_of_ids_is_a_fault():
    report = check("Pending approval", "an approval given aloud is never recorded",
                   ["False", "fold_missing", "True"], source=CODE_CASE)
    assert ("ids_as_flow", "False; fold_missing; True") in leaked(report)
    assert ("identifier", "fold_missing") in leaked(report)
    assert not check("Pending approval", "an approval given aloud is never recorded", []).passed


def test_a_passage_copied_word_for_word_is_a_fault():
    report = check("Pending approval", "the tracker says so: ask the buyer to email the signed PO to the vendor", FLOW,
                   source=CASE)
    assert report.passed  # seven words of the case ("ask ... to email the signed PO to") are not a passage
    report = check("Pending approval", "the tracker says so: ask Imogen to email the signed PO to Brightwick", FLOW,
                   source=CASE)
    assert ("passage", "ask imogen to email the signed po to brightwick") in leaked(report)


def test_stored_keys_find_what_the_source_text_finds_except_passages():
    name, pattern = "Hollis Varga never e-signed", "PRQ-26-0739 waits since 10/22 on Ledgerline"
    keys = source_keys(CASE)
    assert {"PRQ-26-0739", "date:10-22", "num:57300", "Imogen", "Brightwick", "fernhollow-labs.org"} <= keys
    assert not {"Good", "Report", "Ledgerline"} & keys  # only ever sentence-initial
    assert leaked(check(name, pattern, FLOW, keys=keys)) == leaked(check(name, pattern, FLOW, source=CASE))


def test_feedback_names_every_leaked_token():
    report = check("Brightwick order stuck", "PRQ-26-0739 waits since 10/22", ["False", "True"], source=CASE)
    text = report.feedback()
    assert all(t in text for t in ("'Brightwick'", "'PRQ-26-0739'", "'10/22'", "evidence flow steps"))
    assert report.to_dict()["score"] == report.score and len(report.to_dict()["leaks"]) == len(report.leaks)


def test_tokens_report_kinds_and_normalised_keys():
    kinds = {(k, key) for k, _, key, _ in tokens("on 2027-05-19 pay $2,450.00 to a@b.io for INV-5071 in mod_q.attr")}
    assert {("date", "date:05-19"), ("money", "num:2450"), ("email", "a@b.io"), ("id", "INV-5071"),
            ("identifier", "mod_q.attr")} <= kinds


def test_findings_are_checked_against_the_template_they_used():
    template = "Stale figure: the Q1 summary (draft v3) gives 12.5% and Anselm carries it to the board"
    context = "### doc_1\nQ2 report: the on-time shipment rate is 9.4% and Anselm presents it."
    report = check_finding("The Q2 deck quotes 12.5% from v3, but the current figure is 9.4%; tell Anselm.", "",
                           template, context)
    # 12.5% and v3 come from the template, not from this workspace; Anselm and 9.4% are the workspace's own.
    assert leaked(report) == {("number", "12.5%"), ("id", "v3")}
    assert check_finding("The deck quotes a stale figure", "", template, context).passed


def test_copying_another_text_such_as_the_instruction_example_is_a_fault():
    example = "a meeting is booked in one time zone while a traveller who must attend arrives after it starts"
    pattern = "a meeting is booked in one time zone while a traveller who must attend arrives late"
    assert check("Wrong time zone", pattern, FLOW, source=CASE).passed
    report = check("Wrong time zone", pattern, FLOW, source=CASE, not_copied_from=(example,))
    assert [lk.kind for lk in report.leaks] == ["passage"]


def test_a_title_copied_as_written_and_a_one_step_flow_are_faults():
    case = "### document_1 (document)\nTitle: Kestrel kiln restart - readiness tracker\nStep # | Step | Lead | Deadline"
    report = check("Kestrel kiln restart readiness tracker", "Kestrel kiln restart - readiness tracker",
                   ["Step # | Step | Lead | Deadline | State"], source=case)
    kinds = [lk.kind for lk in report.leaks]
    assert kinds.count("passage") == 2 and "ids_as_flow" in kinds
    assert not check("Readiness", "a restart waits on sign-offs", ["find the tracker of open sign-offs"]).passed


def test_copying_the_retry_hint_is_a_fault():
    from tide_dspy.abstraction import ADVICE

    report = check("Pending approval", "an approval given aloud is never recorded",
                   [ADVICE["flow"], "write no names, ids, numbers, dates, paths or code identifiers"], source=CASE)
    assert [lk.kind for lk in report.leaks] == ["passage", "passage"]
