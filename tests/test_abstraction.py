"""The abstraction check: specific tokens of a source case carried into a template (or a finding)."""

from __future__ import annotations

import pytest

from tide_dspy.abstraction import check, check_finding, source_keys, tokens

CASE = """### email_0621032b (email, 2026-03-06T11:42:00)
Cc: the charge nurse and the RNs
From: Theresa Cole <tcole@mvrmc.org>
Subject: Re: LT-60 sterilizer replacement
Good news. Greg said at the huddle that he's fine funding the LT-90 replacement. Please let Linda know so she
can get the PO out to Clarion. Lawson still shows REQ-26-0412 (amount $68,400.00) waiting on the CFO e-signature.
The install crew is held only if Clarion has our PO by Friday 3/13. Report: 2,290 cases, 8.2% change failure rate.
Good news travels fast. The quote is in shared/quotes/q4471.pdf and the ticket is #4471.
"""
CODE_CASE = """### src/_pytest/mark/legacy.py::KeywordMapping.__getitem__ (src/_pytest/mark/legacy.py lines 65-77)
    def __getitem__(self, subname):
        for name in self._names:
            if subname in name:
                return True
        return not_expr(subname)
The issue: matching a keyword against a unittest.TestCase name fails when the name has brackets.
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
    ("ask tcole@mvrmc.org to sign", "email", "tcole@mvrmc.org"),
    ("the quote lives in q4471.pdf", "path", "q4471.pdf"),
    ("a purchase of $68,400 waits", "money", "$68,400"),
    ("a purchase of 68,400 dollars waits", "money", "68,400 dollars"),
    ("the crew is released after March 13", "date", "March 13"),  # written 3/13 in the case
    ("REQ-26-0412 waits on a signature", "id", "REQ-26-0412"),
    ("ticket #4471 is open", "id", "#4471"),
    ("a figure of 8.2% is stale", "number", "8.2%"),
    ("2,290 cases were counted", "number", "2,290"),
    ("Clarion cannot ship", "name", "Clarion"),
    ("ask Linda to issue the order", "name", "Linda"),
    ("the artifact email_0621032b says so", "identifier", "email_0621032b"),
])
def test_each_kind_of_specific_token_of_the_case_is_found(text, kind, token):
    report = check("Approval never recorded", text, FLOW, source=CASE)
    assert (kind, token) in leaked(report)
    assert report.score == pytest.approx(1 / (1 + len(report.leaks)), abs=1e-4) and not report.passed


def test_code_identifiers_paths_and_line_numbers_of_a_code_case_are_found():
    report = check("KeywordMapping lookup", "not_expr fails in legacy.py", [
        "KeywordMapping.__getitem__ (src/_pytest/mark/legacy.py lines 65-77)", "look at the mark matching loop"],
        source=CODE_CASE)
    found = leaked(report)
    assert {("identifier", "KeywordMapping"), ("identifier", "not_expr"), ("path", "legacy.py"),
            ("identifier", "KeywordMapping.__getitem__"), ("path", "src/_pytest/mark/legacy.py"),
            ("number", "65"), ("number", "77")} <= found


def test_generic_words_builtins_and_protocol_names_are_not_specific():
    # Words of the case that it also writes in lower case, sentence-initial words, builtins and dunder names,
    # single digits and acronyms are what an abstract template is made of.
    report = check("Good news that hides a pending signature",
                   "The CFO said yes; the PO waits on RNs. A __getitem__ that returns True for 1 name of a TestCase",
                   FLOW, source=CASE + CODE_CASE)
    assert leaked(report) == {("identifier", "TestCase")}


def test_tokens_the_case_does_not_contain_are_not_leaks():
    report = check("Approval pending", "REQ-99-0001 for $1,000 waits on Marta since 7/4", FLOW, source=CASE)
    assert report.passed


def test_a_field_description_copied_as_a_value_is_a_fault():
    report = check("Pending approval", "a short name for the class of problem", FLOW, source=CASE)
    assert ("field_description", "a short name for the class of problem") in leaked(report)
    assert "repeat the field description" in report.feedback()


def test_an_evidence_flow_of_ids_is_a_fault():
    report = check("Pending approval", "an approval given aloud is never recorded",
                   ["False", "not_expr", "True"], source=CODE_CASE)
    assert ("ids_as_flow", "False; not_expr; True") in leaked(report)
    assert ("identifier", "not_expr") in leaked(report)
    assert not check("Pending approval", "an approval given aloud is never recorded", []).passed


def test_a_passage_copied_word_for_word_is_a_fault():
    report = check("Pending approval", "the tracker says so: she can get the order out to the vendor", FLOW,
                   source=CASE)
    assert report.passed  # seven words in a row of the case ("she can get the ... out to") are not a passage
    report = check("Pending approval", "the tracker says so: she can get the PO out to Clarion", FLOW, source=CASE)
    assert ("passage", "so she can get the po out to clarion") in leaked(report)


def test_stored_keys_find_what_the_source_text_finds_except_passages():
    name, pattern = "Gregory Hale never e-signed", "REQ-26-0412 waits since 3/13 on Lawson"
    keys = source_keys(CASE)
    assert {"REQ-26-0412", "date:03-13", "num:68400", "Linda", "Clarion", "mvrmc.org"} <= keys
    assert not {"Good", "Report", "Lawson"} & keys  # only ever sentence-initial
    assert leaked(check(name, pattern, FLOW, keys=keys)) == leaked(check(name, pattern, FLOW, source=CASE))


def test_feedback_names_every_leaked_token():
    report = check("Clarion order stuck", "REQ-26-0412 waits since 3/13", ["False", "True"], source=CASE)
    text = report.feedback()
    assert all(t in text for t in ("'Clarion'", "'REQ-26-0412'", "'3/13'", "evidence flow steps"))
    assert report.to_dict()["score"] == report.score and len(report.to_dict()["leaks"]) == len(report.leaks)


def test_tokens_report_kinds_and_normalised_keys():
    kinds = {(k, key) for k, _, key, _ in tokens("on 2026-03-13 pay $1,200.00 to a@b.io for BILL-412 in mod_x.attr")}
    assert {("date", "date:03-13"), ("money", "num:1200"), ("email", "a@b.io"), ("id", "BILL-412"),
            ("identifier", "mod_x.attr")} <= kinds


def test_findings_are_checked_against_the_template_they_used():
    template = "Stale figure: v3 of the Q1 report shows 8.2% and Marcus carries it to the board"
    context = "### doc_1\nQ2 report: the change failure rate is 4.1% and Marcus presents it."
    report = check_finding("The Q2 deck quotes 8.2% from v3, but the current figure is 4.1%; tell Marcus.", "",
                           template, context)
    # 8.2% and v3 come from the template, not from this workspace; Marcus and 4.1% are the workspace's own.
    assert leaked(report) == {("number", "8.2%"), ("id", "v3")}
    assert check_finding("The deck quotes a stale figure", "", template, context).passed


def test_copying_another_text_such_as_the_instruction_example_is_a_fault():
    example = "a meeting is booked in one time zone while a traveller who must attend arrives after it starts"
    pattern = "a meeting is booked in one time zone while a traveller who must attend arrives late"
    assert check("Wrong time zone", pattern, FLOW, source=CASE).passed
    report = check("Wrong time zone", pattern, FLOW, source=CASE, not_copied_from=(example,))
    assert [lk.kind for lk in report.leaks] == ["passage"]


def test_a_title_copied_as_written_and_a_one_step_flow_are_faults():
    case = "### document_1 (document)\nTitle: Holmium laser go-live - readiness tracker\nItem # | Item | Owner | Due"
    report = check("Holmium laser go-live readiness tracker", "Holmium laser go-live - readiness tracker",
                   ["Item # | Item | Owner | Due | Status"], source=case)
    kinds = [lk.kind for lk in report.leaks]
    assert kinds.count("passage") == 2 and "ids_as_flow" in kinds
    assert not check("Readiness", "a go-live waits on sign-offs", ["find the tracker of open sign-offs"]).passed


def test_copying_the_retry_hint_is_a_fault():
    from tide_dspy.abstraction import ADVICE

    report = check("Pending approval", "an approval given aloud is never recorded",
                   [ADVICE["flow"], "write no names, ids, numbers, dates, paths or code identifiers"], source=CASE)
    assert [lk.kind for lk in report.leaks] == ["passage", "passage"]
