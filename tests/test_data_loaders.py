"""Loading JSONL through `datasets`, and the errors a malformed line gives (on the hand-written fixtures); the
counts of both benchmark sets shipped in data/ (read as files of your own, the way `--data` reads them)."""

from __future__ import annotations

import copy
import json
import logging

import dspy
import pytest
from conftest import SHIPPED_DATA, WORKSPACE_JSONL  # fixtures/instances (hand-written); the shipped sets

from tide_dspy.cli.main import main
from tide_dspy.data import InvalidRecordError, load_instances, load_with_report, to_examples
from tide_dspy.data.stats import dataset_stats


@pytest.fixture(scope="session")
def hf_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("hf_cache")


@pytest.fixture(scope="session")
def repository_instances(hf_cache):
    return load_instances(SHIPPED_DATA / "repository" / "v1" / "swebench_multibug.jsonl.xz", cache_dir=hf_cache)


@pytest.fixture(scope="session")
def workspace_records():
    """The fixture workspaces in the benchmark's record format (no "setting" key): the train ones."""
    records = [json.loads(line) for line in WORKSPACE_JSONL.read_text().splitlines()]
    return [r for r in records if "setting" not in r]


def _by_split(instances):
    return {s: (sum(i.split == s for i in instances), sum(len(i.problems) for i in instances if i.split == s))
            for s in ("train", "test")}


# The counts of each version of the workspace set, as its data card gives them: {split: (workspaces, problems)} and
# the items. v2 holds v1's workspaces until the hand-written sources in data/workspace/src are built into it; then
# its counts here are the card's new ones.
WORKSPACE_COUNTS = {
    "v1": ({"train": (2, 10), "test": (4, 21)}, 317),
    "v2": ({"train": (10, 52), "test": (22, 119)}, 3093),
}


@pytest.mark.parametrize("version", sorted(WORKSPACE_COUNTS))
def test_workspace_counts(hf_cache, version):
    splits, items = WORKSPACE_COUNTS[version]
    instances = load_instances(SHIPPED_DATA / "workspace" / version, cache_dir=hf_cache)
    assert _by_split(instances) == splits
    assert sum(len(i.artifacts) for i in instances) == items
    assert all(i.setting == "workspace" for i in instances)
    # Not reshaped by Arrow: timestamps stay strings, email payloads keep only their own keys.
    email = next(a for a in instances[0].artifacts if a.kind == "email")
    assert isinstance(email.created_at, str) and set(email.payload) == {"subject", "sender", "to", "cc",
                                                                       "timestamp", "body"}


def test_repository_counts(repository_instances):
    instances = repository_instances
    assert (len(instances), sum(len(i.problems) for i in instances)) == (67, 368)
    assert _by_split(instances) == {"train": (24, 117), "test": (43, 251)}
    sizes = [len(i.artifacts) for i in instances]
    assert (min(sizes), max(sizes)) == (28, 650)
    assert all(i.setting == "repository" and i.artifacts[0].kind == "function" for i in instances)


def test_split_filter_and_examples(hf_cache):
    test = load_instances(WORKSPACE_JSONL, split="test", cache_dir=hf_cache)
    assert [i.instance_id for i in test] == ["ws-tiny", "ws-larkspur-school"]  # of 4, in file order
    assert [i.split for i in test] == ["test"] * 2
    examples = to_examples(test)
    assert isinstance(examples[0], dspy.Example) and set(examples[0].inputs().keys()) == {"case"}
    assert examples[0].case is test[0]


def test_an_unknown_split_is_an_error_naming_the_splits(hf_cache):
    with pytest.raises(ValueError, match=r"no split 'tst'; its splits are test, train"):
        load_instances(WORKSPACE_JSONL, split="tst", cache_dir=hf_cache)


def _write(tmp_path, records_or_lines, name="workspaces.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records_or_lines) + "\n")
    return path


def _copies(record, n):
    out = []
    for k in range(n):
        r = copy.deepcopy(record)
        r["instance_id"] = f"{record['instance_id']}-{k}"
        out.append(r)
    return out


def _error(path, **kw) -> str:
    with pytest.raises(InvalidRecordError) as info:
        load_instances(path, cache_dir=path.parent / "cache", **kw)
    return str(info.value)


def test_bad_json_names_file_and_line(tmp_path, workspace_records):
    good = _copies(workspace_records[0], 2)
    path = _write(tmp_path, [good[0], '{"instance_id": "x", ', good[1]])
    message = _error(path)
    assert message.startswith(f"{path} line 2: not valid JSON")
    assert "--skip-invalid" in message


def test_unknown_evidence_id(tmp_path, workspace_records):
    records = _copies(workspace_records[0], 3)
    records[2]["problems"][1]["evidence"] = [records[2]["problems"][1]["evidence"][0], "email_x"]
    message = _error(_write(tmp_path, records))
    assert "workspaces.jsonl line 3: problems[1].evidence: ['email_x'] not among the instance's artifacts" in message


def test_duplicate_artifact_id(tmp_path, workspace_records):
    record = copy.deepcopy(workspace_records[0])
    record["artifacts"][4]["id"] = record["artifacts"][1]["id"]
    message = _error(_write(tmp_path, [record]))
    assert f"line 1: artifacts[4].id: duplicate artifact id {record['artifacts'][1]['id']!r}" in message


def test_missing_field(tmp_path, workspace_records):
    records = _copies(workspace_records[0], 2)
    del records[1]["problems"][0]["description"]
    message = _error(_write(tmp_path, records))
    assert "line 2: problems[0].description: Field required (add it)" in message


def test_repository_candidate_errors(tmp_path, repository_instance):
    record = {"instance_id": "r", "repo": "o/r", "split": "test",
              "candidates": [{"id": a.id, **a.payload} for a in repository_instance.artifacts[:3]],
              "problems": [{"problem_id": "p", "description": "d", "evidence": [repository_instance.artifacts[0].id]}]}
    assert len(load_instances(_write(tmp_path, [record], "ok.jsonl"), cache_dir=tmp_path / "c")[0].artifacts) == 3
    no_code = copy.deepcopy(record)
    del no_code["candidates"][1]["code"]
    assert "line 1: candidates[1]: missing field(s) code" in _error(_write(tmp_path, [no_code], "a.jsonl"))
    dup = copy.deepcopy(record)
    dup["candidates"][2]["id"] = dup["candidates"][0]["id"]
    assert "line 1: candidates[2].id: duplicate artifact id" in _error(_write(tmp_path, [dup], "b.jsonl"))


def test_duplicate_instance_and_wrong_setting(tmp_path, workspace_records):
    record = workspace_records[0]
    path = _write(tmp_path, [record, record])
    assert f"line 2: instance_id: {record['instance_id']!r} repeats {path} line 1" in _error(path)
    assert "this is a workspace record, but the repository setting was asked" in _error(
        _write(tmp_path, [record], "one.jsonl"), setting="repository")


def test_skip_invalid_reports_count_and_reasons(tmp_path, workspace_records, caplog):
    records = _copies(workspace_records[0], 3)
    del records[1]["artifacts"]
    records[2]["problems"][0]["evidence"] = ["calendar_00000000"]
    path = _write(tmp_path, [records[0], "not json", records[1], records[2]])
    with caplog.at_level(logging.WARNING):
        result = load_with_report(path, skip_invalid=True, cache_dir=tmp_path / "cache")
    assert [i.instance_id for i in result.instances] == [records[0]["instance_id"]]
    assert [e.line for e in result.skipped] == [2, 3, 4]
    assert "not valid JSON" in result.skipped[0].reason
    assert "artifacts: Field required" in result.skipped[1].reason
    assert "problems[0].evidence: ['calendar_00000000']" in result.skipped[2].reason
    assert "skipped 3 invalid record(s)" in caplog.text


def test_stats_rows_match_readme(repository_instances):
    rows = {r["split"]: r for r in dataset_stats(repository_instances)}
    assert (rows["total"]["instances"], rows["total"]["problems"], rows["total"]["artifacts"]) == (67, 368, 22622)
    assert rows["total"]["artifacts/instance"] == "337.6 (28-650)"
    assert rows["train"]["problems"] == 117 and rows["test"]["problems"] == 251


def test_stats_cli(capsys, tmp_path, workspace_records):
    assert main(["data", "stats", str(WORKSPACE_JSONL)]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in out.splitlines()[3:]}
    # instances, problems, artifacts, evidence ids of the hand-written fixtures, per split
    assert lines["train"][1:5] == ["2", "10", "24", "21"]
    assert lines["test"][1:5] == ["2", "5", "14", "10"]
    assert lines["total"][1:5] == ["4", "15", "38", "31"]

    bad = _write(tmp_path, [workspace_records[0], "{oops"])
    assert main(["data", "stats", str(bad)]) == 2
    assert f"{bad} line 2: not valid JSON" in capsys.readouterr().err
    assert main(["data", "stats", str(bad), "--skip-invalid"]) == 0
    assert "skipped 1 invalid record(s)" in capsys.readouterr().out
