"""`tide data check`: the shipped sets pass their invariants, each invariant catches what it names, and the chance
floors are printed per split (Random, First-listed, LexicalJoin, TF-IDF)."""

from __future__ import annotations

import copy
import json
import lzma

import pytest
from conftest import SHIPPED_DATA

from tide_dspy.cli.main import main
from tide_dspy.data.set_check import (
    check_data,
    check_repository,
    check_set,
    check_workspace,
    paper_scale_problems,
    shared_evidence_allowed,
)
from tide_dspy.domains import WORKSPACE
from tide_dspy.floors import FLOORS, floor_scores, split_rows
from tide_dspy.util.diffs import diff_problem


def _records(path: str) -> list[dict]:
    with lzma.open(SHIPPED_DATA / path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def workspaces() -> list[dict]:
    return _records("workspace/v1/workspaces.jsonl.xz")


@pytest.fixture(scope="module")
def repositories() -> list[dict]:
    return _records("repository/v1/swebench_multibug.jsonl.xz")


@pytest.fixture
def no_tide_data(monkeypatch):
    monkeypatch.delenv("TIDE_DATA", raising=False)


# ---- the shipped sets (the fast lane runs these) ----

def test_every_shipped_set_passes_its_invariants(no_tide_data, capsys):
    assert main(["data", "check", "--no-floors"]) == 0
    out = capsys.readouterr().out
    for line in ("workspace v1, workspace setting", "workspace v2, workspace setting",
                 "repository v1, repository setting"):
        assert line in out
    assert out.count("every invariant holds") == 3


def test_the_check_prints_each_floor_per_split_with_intervals(no_tide_data, capsys):
    assert main(["data", "check", str(SHIPPED_DATA / "workspace"), "--data-version", "v1"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "lexical/random" in line)
    assert header.split()[:2] == ["split", "n"] and header.split()[2:6] == list(FLOORS)
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip().startswith(("train", "test"))}
    assert set(rows) == {"train", "test"} and "±" in rows["test"]
    # v1's test split: LexicalJoin finds twice what Random does (the data card quotes these)
    assert rows["test"].split()[1:4] == ["4", "15.89", "±"] and rows["test"].endswith("2.02x")


# The paper's scale, and the bar on string matching, are v2's targets: the fast lane guards both.
def test_v2_meets_the_papers_scale():
    result = check_data(SHIPPED_DATA / "workspace", version="v2", paper_scale=True)
    assert result.passed, "\n".join(result.problems)


def test_on_v2s_test_split_lexical_join_finds_at_most_1_6_times_what_random_does():
    result = check_data(SHIPPED_DATA / "workspace", version="v2")
    [test] = [row for row in split_rows(result.instances, floor_scores(result.instances)) if row.split == "test"]
    assert test.ratio() <= 1.6


# ---- each invariant ----

def test_the_workspace_checks_name_the_workspace_and_the_item(workspaces):
    r = copy.deepcopy(workspaces[0])
    iid = r["instance_id"]
    p0, p1 = r["problems"][0], r["problems"][1]
    p0["evidence"] = p0["evidence"][:1]
    p1["evidence"] = [*p1["evidence"], "email_00000000"]
    r["problems"][2]["action"]["action_id"] = "act_ffffffff"
    library = {a["id"]: a for a in r["actions"]}
    required = library[r["problems"][3]["action"]["action_id"]]["required_parameters"][0]
    del r["problems"][3]["action"]["parameters"][required]
    r["actions"][0]["type"] = "send_fax"
    found = check_workspace(r)
    assert f"{iid}: {p0['problem_id']}: 1 evidence artifacts, outside (2, 5)" in found
    assert f"{iid}: {p1['problem_id']}: evidence id email_00000000 is not an artifact" in found
    assert any("action_id 'act_ffffffff' is not in the library" in line for line in found)
    assert any(f"lacks required parameters ['{required}']" in line for line in found)
    assert any("type 'send_fax' is not one of" in line for line in found)


def test_evidence_shared_by_two_problems_needs_the_data_cards_reason(workspaces):
    r = copy.deepcopy(workspaces[0])
    shared = r["problems"][0]["evidence"][0]
    r["problems"][1]["evidence"].append(shared)
    assert any(f"evidence {shared} is also evidence of" in line for line in check_workspace(r))
    card = (f"# Card\n\n## Shared evidence\n\n| instance | item | problems | why |\n|---|---|---|---|\n"
            f"| {r['instance_id']} | `{shared}` | p1, p2 | the same order |\n\n## Next\n")
    assert shared_evidence_allowed(card) == {(r["instance_id"], shared)}
    assert not any("also evidence of" in line for line in check_workspace(r, allowed=shared_evidence_allowed(card)))
    no_reason = card.replace(" the same order ", " ")
    assert shared_evidence_allowed(no_reason) == set()


def test_copied_text_and_repeated_ids_across_the_set_are_caught(workspaces):
    records = copy.deepcopy(workspaces[:2])
    email = next(a for a in records[0]["artifacts"] if a["kind"] == "email")
    target = next(a for a in records[1]["artifacts"] if a["kind"] == "email")
    target["payload"]["body"] = email["payload"]["body"].replace(".", "!", 1)
    records.append(copy.deepcopy(records[0]))
    found = check_set(records, WORKSPACE.name)
    assert any("are near copies" in line and email["id"] in line and target["id"] in line for line in found)
    assert f"instance_id {records[0]['instance_id']} repeats" in found
    assert any(line.startswith("problem_id ") and line.endswith(" repeats") for line in found)
    assert "split test: no instances" in found


def test_paper_scale_names_each_shortfall(workspaces):
    assert paper_scale_problems(workspaces) == [
        "paper scale: 6 workspaces, fewer than 30", "paper scale: 31 problems, fewer than 150",
        "paper scale: 2 train workspaces, fewer than 8", "paper scale: 10 train problems, fewer than 40",
        "paper scale: 4 test workspaces, fewer than 20"]
    assert any("55 artifacts, outside (88, 113)" in line for line in check_set(workspaces, WORKSPACE.name,
                                                                               paper_scale=True))


def test_paper_scale_is_refused_for_the_repository_set(no_tide_data, capsys):
    assert main(["data", "check", str(SHIPPED_DATA / "repository"), "--paper-scale", "--no-floors"]) == 2
    assert "--paper-scale is defined for the workspace set only" in capsys.readouterr().err


def test_the_repository_checks_name_the_instance_and_the_problem(repositories):
    r = copy.deepcopy(min(repositories, key=lambda x: len(x["candidates"])))
    iid, p0, p1 = r["instance_id"], r["problems"][0], r["problems"][1]
    cited = {e for p in r["problems"] for e in p["evidence"]}
    next(c for c in r["candidates"] if c["id"] not in cited)["id"] = "elsewhere.py::f"
    p0["patch"] = p0["patch"].rstrip("\n").rsplit("\n", 2)[0] + "\n"  # the last hunk two lines short
    p1["evidence"] = [*p1["evidence"], "nowhere.py::g"]
    r["num_problems"] += 1
    found = check_repository(r)
    assert f"{iid}: candidate id 'elsewhere.py::f' is not <path>::<qualname> of its path and qualname" in found
    assert any(line.startswith(f"{iid}: {p0['problem_id']}: the gold patch does not parse") for line in found)
    assert f"{iid}: {p1['problem_id']}: evidence ['nowhere.py::g'] are not candidates" in found
    assert f"{iid}: num_problems is {len(r['problems']) + 1}, but the record holds {len(r['problems'])}" in found


def test_a_gold_patch_must_touch_the_files_of_its_evidence(repositories):
    r = copy.deepcopy(next(x for x in repositories if len({c["path"] for c in x["candidates"]}) > 1))
    problem = r["problems"][0]
    own = {c["path"] for c in r["candidates"] if c["id"] in problem["evidence"]}
    other = next(c for c in r["candidates"] if c["path"] not in own)
    problem["evidence"] = [*problem["evidence"], other["id"]]
    assert any(f"the gold patch does not touch ['{other['path']}']" in line for line in check_repository(r))


def test_diff_problem_reads_hunk_counts():
    good = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
    assert diff_problem(good) is None
    assert diff_problem(good.replace("@@ -1,2 +1,2 @@", "@@ -1,3 +1,2 @@")).startswith("the last hunk ends 1 old")
    assert "runs past" in diff_problem(good + "+d\n")
    assert diff_problem("just words") == "no 'diff --git a/... b/...' or '+++ b/...' header with an @@ hunk"
