"""LexicalJoin and TF-IDF, the floors that read the artifacts and call no model: LexicalJoin links the items that
share rare tokens, TF-IDF those whose word vectors are most alike."""

from __future__ import annotations

from tide_dspy.lexical import link_weights, linked_groups, tfidf_weights, tokens
from tide_dspy.programs import build_program
from tide_dspy.schemas import Artifact, Instance


def email(i: int, subject: str, body: str) -> Artifact:
    return Artifact(id=f"email-{i:02d}", kind="email", created_at=f"2026-03-{i:02d}",
                    payload={"sender": f"person{i}@example.org", "to": ["me@example.org"], "subject": subject,
                             "body": body})


FILLER = ["Weekly newsletter with the usual updates", "Lunch menu for the week", "Parking garage closed on Friday",
          "Reminder to submit your timesheet", "Team photo next month", "Coffee machine is fixed",
          "Library books are due", "Fire drill at noon"]


def workspace(order: list[int] | None = None) -> Instance:
    """Eight e-mails; only 3 and 6 share a rare id (PO-4471) and a figure ($68,400)."""
    items = {i: email(i, FILLER[i - 1], "Please read when you have a moment.") for i in range(1, 9)}
    items[3] = email(3, "Purchase order PO-4471", "PO-4471 for $68,400 still waits on a signature.")
    items[6] = email(6, "Install crew", "The crew releases the slot unless PO-4471 ($68,400) is issued.")
    return Instance(instance_id="ws-tiny", setting="workspace", split="test",
                    artifacts=[items[i] for i in (order or sorted(items))])


def test_tokens_keep_ids_figures_and_the_parts_of_dotted_names():
    found = tokens("PO-4471 for $68,400 on 3/13; self.linesep.join(lines)")
    assert {"po-4471", "$68,400", "3/13", "self.linesep.join", "linesep", "join", "lines"} <= found


def test_the_items_that_share_an_id_are_linked_most_strongly():
    instance = workspace()
    texts = {a.id: f"{a.payload['subject']}\n{a.payload['body']}" for a in instance.artifacts}
    weights = link_weights(texts)
    strongest = max(weights, key=weights.get)
    assert strongest == ("email-03", "email-06")
    assert linked_groups(texts, size=2, count=1) == [["email-03", "email-06"]]


def test_lexical_join_cites_the_linked_items_first_and_spreads_findings_over_rounds():
    program = build_program("lexical-join", "workspace", max_rounds=2, per_round=2)
    pred = program(workspace())
    assert len(pred.findings) == 4 == program.n_findings
    assert {"email-03", "email-06"} <= set(pred.findings[0].evidence)
    assert all(len(f.evidence) == program.evidence_size == 3 for f in pred.findings)
    assert [f.round for f in pred.findings] == [1, 1, 2, 2]


def test_lexical_join_is_deterministic_and_ignores_the_order_shown():
    program = build_program("lexical-join", "workspace", max_rounds=3, per_round=1)
    first = [f.evidence for f in program(workspace()).findings]
    assert first == [f.evidence for f in program(workspace()).findings]
    shuffled = [f.evidence for f in program(workspace(order=[8, 5, 2, 7, 6, 1, 4, 3])).findings]
    assert [sorted(e) for e in shuffled] == [sorted(e) for e in first]


def test_on_code_it_links_a_caller_to_its_callee(repository_instance):
    functions = [Artifact(id=f"m.py::{name}", kind="function",
                          payload={"path": "m.py", "qualname": name, "start_line": n, "end_line": n + 2, "code": code})
                 for n, (name, code) in enumerate([
                     ("parse_header", "def parse_header(raw):\n    return raw.split(':')"),
                     ("load", "def load(path):\n    with open(path) as f:\n        return parse_header(f.read())"),
                     ("area", "def area(w, h):\n    return w * h"),
                     ("greet", "def greet(name):\n    print('hello', name)")])]
    instance = Instance(instance_id="repo-tiny", setting="repository", split="test", artifacts=functions)
    pred = build_program("lexical-join", "repository", max_rounds=1, per_round=1)(instance)
    assert [sorted(f.evidence) for f in pred.findings] == [["m.py::load", "m.py::parse_header"]]


def distinct_workspace(order: list[int] | None = None) -> Instance:
    """workspace()'s items, each filler with its own body: TF-IDF weighs every shared word, and eight copies of one
    boilerplate line would be the most alike pair."""
    base = {a.id: a for a in workspace().artifacts}
    items = [a if a.id in ("email-03", "email-06") else a.model_copy(update={"payload": {
        **a.payload, "body": f"Note {n}: " + " ".join(a.payload["subject"].split()[::-1])}})
             for n, a in enumerate(base.values(), 1)]
    by_number = {int(a.id[-2:]): a for a in items}
    return Instance(instance_id="ws-tiny", setting="workspace", split="test",
                    artifacts=[by_number[i] for i in (order or sorted(by_number))])


def test_tfidf_links_the_items_whose_words_are_most_alike():
    texts = {a.id: f"{a.payload['subject']}\n{a.payload['body']}" for a in distinct_workspace().artifacts}
    weights = tfidf_weights(texts)
    assert max(weights, key=weights.get) == ("email-03", "email-06")
    assert all(a < b and 0 < w <= 1 + 1e-9 for (a, b), w in weights.items())
    assert linked_groups(texts, size=2, count=1, weigh=tfidf_weights) == [["email-03", "email-06"]]
    assert tfidf_weights({"a": "", "b": "?"}) == {}  # no word at all: nothing links


def test_tfidf_is_drawn_to_shared_boilerplate_where_lexical_join_ignores_it():
    texts = {a.id: f"{a.payload['subject']}\n{a.payload['body']}" for a in workspace().artifacts}
    tfidf = tfidf_weights(texts)
    assert max(tfidf, key=tfidf.get) != ("email-03", "email-06")
    assert linked_groups(texts, size=2, count=1) == [["email-03", "email-06"]]


def test_the_tfidf_floor_cites_the_most_alike_items_first_whatever_the_order_shown():
    program = build_program("tfidf", "workspace", max_rounds=2, per_round=1)
    first = program(distinct_workspace()).findings
    assert len(first) == 2 and {"email-03", "email-06"} <= set(first[0].evidence)
    assert all(len(f.evidence) == 3 and f.action is None for f in first)  # this instance has no action library
    shuffled = program(distinct_workspace(order=[8, 5, 2, 7, 6, 1, 4, 3])).findings
    assert [sorted(f.evidence) for f in shuffled] == [sorted(f.evidence) for f in first]
