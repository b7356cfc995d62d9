"""The benchmark sets shipped in data/: found with no setup, versioned, checksummed, loaded through `datasets` with
explicit Features and a cache keyed by content, recorded by every result; and v2 is the build of its sources."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import lzma
import shutil

import datasets
import pytest
from conftest import FIXTURE_DATA, SHIPPED_DATA

from tide_dspy.cli.main import main
from tide_dspy.data import InvalidRecordError, load_instances
from tide_dspy.data.loaders import UnknownSplitError
from tide_dspy.data.selection import Selection
from tide_dspy.data.sets import SUMS, file_sha256, listed_sums, load_benchmark, locate, sums_text
from tide_dspy.domains import REPOSITORY, WORKSPACE
from tide_dspy.shipped import DATA_DIR

# The decompressed v1 files are the original hand-written and built sets (their data cards quote these).
ORIGINAL_SHA256 = {
    "workspace/v1/workspaces.jsonl.xz": "4bc5ac95ed60ad44bbf2425ff5c7c2fac835dd97f6ccc4063580249e8b76b141",
    "repository/v1/swebench_multibug.jsonl.xz": "5d478800cbbe94f208246d360d425f187a11a5a61c778b1edff43a428b3d948e",
}


@pytest.fixture
def no_tide_data(monkeypatch):
    monkeypatch.delenv("TIDE_DATA", raising=False)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("arrow")


def test_a_checkout_ships_the_sets_beside_the_package():
    assert DATA_DIR == SHIPPED_DATA


def test_without_tide_data_the_shipped_sets_are_read_at_their_highest_version(no_tide_data):
    workspace, repository = locate(WORKSPACE.name), locate(REPOSITORY.name)
    assert (workspace.name, workspace.version, workspace.path) == ("workspace", "v2", SHIPPED_DATA / "workspace" / "v2")
    assert (repository.name, repository.version) == ("repository", "v1")
    assert workspace.sha256 == listed_sums(SHIPPED_DATA / "workspace")["v2/workspaces.jsonl.xz"]


def test_tide_data_and_data_paths_override_the_shipped_sets(monkeypatch):
    monkeypatch.setenv("TIDE_DATA", str(FIXTURE_DATA))
    mine = locate(WORKSPACE.name)
    assert (mine.name, mine.version, mine.path) == ("workspace", None, FIXTURE_DATA / "workspace")
    assert mine.sha256 == file_sha256(FIXTURE_DATA / "workspace" / "workspaces.jsonl")
    given = locate(WORKSPACE.name, SHIPPED_DATA / "workspace", "v1")
    assert (given.name, given.version) == ("workspace", "v1")
    one_file = locate(None, SHIPPED_DATA / "workspace" / "v1" / "workspaces.jsonl.xz")
    assert (one_file.name, one_file.version, one_file.sha256) == ("workspace", "v1", given.sha256)


def test_an_unknown_version_names_the_versions_there(no_tide_data):
    with pytest.raises(ValueError, match=r"no version 'v9'; it has v1, v2"):
        locate(WORKSPACE.name, version="v9")
    with pytest.raises(ValueError, match="has no versions"):
        locate(WORKSPACE.name, FIXTURE_DATA / "workspace", version="v1")


@pytest.mark.parametrize("name", ["workspace", "repository"])
def test_sha256sums_list_exactly_the_committed_files(name):
    folder = SHIPPED_DATA / name
    assert (folder / SUMS).read_text(encoding="utf-8") == sums_text(folder)
    assert sorted(listed_sums(folder)) == sorted(f"{p.parent.name}/{p.name}" for p in folder.glob("v*/*"))


@pytest.mark.parametrize("path, original", ORIGINAL_SHA256.items())
def test_v1_decompresses_to_the_original_set(path, original):
    assert hashlib.sha256(lzma.decompress((SHIPPED_DATA / path).read_bytes())).hexdigest() == original


def _copy_of_workspace_set(tmp_path):
    copy = tmp_path / "workspace"
    shutil.copytree(SHIPPED_DATA / "workspace", copy, ignore=shutil.ignore_patterns("src", "*.py"))
    return copy


def test_a_file_changed_since_its_checksum_is_refused(tmp_path):
    copy = _copy_of_workspace_set(tmp_path)
    file = copy / "v2" / "workspaces.jsonl.xz"
    lines = lzma.decompress(file.read_bytes()).splitlines(keepends=True)
    file.write_bytes(lzma.compress(b"".join(lines[:-1])))
    with pytest.raises(ValueError, match="its SHA-256 is not the one .*SHA256SUMS lists"):
        locate(WORKSPACE.name, copy)


def test_load_benchmark_gives_a_dataset_with_the_settings_features_and_the_instances(cache, no_tide_data):
    bench = load_benchmark(WORKSPACE.name, split="test", cache_dir=cache)
    assert isinstance(bench.dataset, datasets.Dataset) and bench.dataset.features == WORKSPACE.record_features()
    assert isinstance(bench.dataset.features["artifacts"].feature["payload"], datasets.Json)
    assert bench.dataset.num_rows == len(bench.instances) == 22
    assert [i.split for i in bench.instances] == ["test"] * 22
    assert bench.info.record() == {"name": "workspace", "version": "v2", "sha256": locate(WORKSPACE.name).sha256}


@pytest.mark.parametrize("setting", [WORKSPACE, REPOSITORY], ids=lambda s: s.name)
def test_the_features_keep_every_field_and_its_order(cache, setting, no_tide_data):
    bench = load_benchmark(setting.name, cache_dir=cache)
    plain = load_instances(bench.info.path, setting=setting.name, cache_dir=cache)
    assert [i.model_dump_json() for i in bench.instances] == [i.model_dump_json() for i in plain]


def test_the_arrow_cache_is_keyed_by_the_content_not_the_path(tmp_path, cache):
    copy = _copy_of_workspace_set(tmp_path)
    first = load_benchmark(WORKSPACE.name, data=copy, cache_dir=cache)
    assert all(f"tide-workspace-{first.info.sha256[:16]}" in c["filename"] for c in first.dataset.cache_files)
    # The same path with other content (one workspace fewer, its checksum rewritten) is read afresh.
    file = copy / "v2" / "workspaces.jsonl.xz"
    file.write_bytes(lzma.compress(b"".join(lzma.decompress(file.read_bytes()).splitlines(keepends=True)[:-1])))
    (copy / SUMS).write_text(sums_text(copy), encoding="utf-8")
    second = load_benchmark(WORKSPACE.name, data=copy, cache_dir=cache)
    assert len(second.instances) == len(first.instances) - 1
    assert all(f"tide-workspace-{second.info.sha256[:16]}" in c["filename"] for c in second.dataset.cache_files)


def test_a_record_that_does_not_fit_the_features_names_its_line_and_field(tmp_path, cache):
    records = [json.loads(line) for line in lzma.open(SHIPPED_DATA / "workspace" / "v1" / "workspaces.jsonl.xz",
                                                      "rt", encoding="utf-8")]
    records[1]["problems"][0]["severity"] = "high"
    records[2]["profile"]["organization"]["team_size"] = "twelve"
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records[:2]))
    with pytest.raises(InvalidRecordError, match=r"mine.jsonl line 2: problems\[0\].severity: not a field"):
        load_benchmark(WORKSPACE.name, data=path, cache_dir=cache)
    path.write_text("".join(json.dumps(r) + "\n" for r in records[2:3]))
    with pytest.raises(InvalidRecordError, match=r"line 1: profile.organization.team_size: expected int64, got str"):
        load_benchmark(WORKSPACE.name, data=path, cache_dir=cache)


def test_an_unknown_split_is_an_error_naming_the_splits(cache, no_tide_data):
    with pytest.raises(UnknownSplitError, match=r"no split 'tset'; its splits are test, train"):
        load_benchmark(WORKSPACE.name, split="tset", cache_dir=cache)
    with pytest.raises(UnknownSplitError, match=r"no split 'dev'"):
        Selection(setting=WORKSPACE, split="dev").load()
    with pytest.raises(UnknownSplitError, match=r"no split 'dev'"):
        load_instances(FIXTURE_DATA / "workspace", split="dev", cache_dir=cache)


def test_a_selection_reads_the_version_asked_for(no_tide_data):
    selection = Selection(setting=WORKSPACE, split="train", data_version="v1")
    assert selection.source().version == "v1"
    assert [i.instance_id for i in selection.load()] == ["ws-mvrmc-periop-ops", "ws-lumora-release-mgmt"]


def test_stats_of_a_set_folder_count_its_version(capsys):
    assert main(["data", "stats", str(SHIPPED_DATA / "workspace"), "--data-version", "v1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{SHIPPED_DATA / 'workspace' / 'v1'} (workspace)"
    assert next(line for line in lines if line.startswith("total")).split()[1:4] == ["6", "31", "317"]


def test_evaluate_on_a_fresh_clone_reads_and_records_the_shipped_set(tmp_path, no_tide_data, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", "--setting", "workspace", "--method", "random", "--no-track", "--out", "v2"]) == 0
    assert main(["evaluate", "--setting", "workspace", "--method", "random", "--no-track", "--out", "v1",
                 "--data-version", "v1"]) == 0
    for version, n_test in (("v2", 22), ("v1", 4)):
        config, summary = (json.loads((tmp_path / version / name).read_text())
                           for name in ("config.json", "summary.json"))
        assert config["data"] == summary["data"] == locate(WORKSPACE.name, version=version).record()
        assert len(summary["instances"]) == n_test


def test_tracking_params_name_the_set_its_version_and_checksum(tmp_path, no_tide_data, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    assert main(["evaluate", "--setting", "workspace", "--method", "first-listed", "--out", "eval"]) == 0
    client = MlflowClient(tracking_uri=uri)
    [run] = client.search_runs([client.get_experiment_by_name("tide-dspy").experiment_id])
    info = locate(WORKSPACE.name)
    assert {k: run.data.params[k] for k in ("data_set", "data_version", "data_sha256")} == {
        "data_set": "workspace", "data_version": "v2", "data_sha256": info.sha256}


def _workspace_script(name: str):
    spec = importlib.util.spec_from_file_location(f"workspace_{name}", SHIPPED_DATA / "workspace" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build_script():
    return _workspace_script("build")


def test_the_committed_v2_is_the_build_of_v1_and_the_sources():
    build = _build_script()
    assert build.stale(build.build()) == []


def test_the_build_is_byte_stable():
    build = _build_script()
    records = build.build()
    assert build.jsonl_bytes(records) == build.jsonl_bytes(build.build())
    content = build.jsonl_bytes(records)
    packed = lzma.compress(content, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=build.XZ_PRESET)
    assert packed == lzma.compress(content, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=build.XZ_PRESET)
    assert lzma.decompress(build.V2.read_bytes()) == content


def test_the_data_card_shows_the_tables_of_the_built_files(cache):
    lines = _workspace_script("card").card_lines(floors=True, cache_dir=cache)
    card = " ".join((SHIPPED_DATA / "workspace" / "README.md").read_text(encoding="utf-8").split())
    rows = [line for line in lines if line.startswith(("|", "- "))]
    assert len(rows) > 60
    assert [row for row in rows if " ".join(row.split()) not in card] == []
