"""`tide` run in a stranger's folder, on hostile or broken input: each test names one way in and what stops it.

No model: DummyLM answers; small fixtures under tests/fixtures/hostile/ and temporary folders.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

import dspy
import pytest
from dspy.utils.dummies import DummyLM
from sample_checkout import GOOD_PATCH, answers, finding

from tide_dspy.backbones import describe_lm, get_lm
from tide_dspy.cli.common import command_line
from tide_dspy.cli.main import main
from tide_dspy.data import safe_files
from tide_dspy.data.git_tools import GitClone
from tide_dspy.data.loaders import InvalidRecordError, load_instances, load_with_report
from tide_dspy.domains import REPOSITORY
from tide_dspy.evaluation import evaluate, read_rows
from tide_dspy.product import discover_repository, discover_workspace, write_report
from tide_dspy.product import ingest as ingest_module
from tide_dspy.product.ingest import ingest_workspace
from tide_dspy.product.run import choose_program, select_files
from tide_dspy.programs import build_program, load_program, save_program
from tide_dspy.tracking import record_provenance
from tide_dspy.util.jsonio import read_json_file
from tide_dspy.util.secrets import scrub_secrets

HOSTILE = Path(__file__).parent / "fixtures" / "hostile"
INGEST = Path(__file__).parent / "fixtures" / "ingest"
SECRET = "s3cr3t-value"


def saved_state(tmp_path: Path, name: str = "p.json", **config) -> tuple[Path, dict]:
    path = save_program(build_program("iter", "repository", max_rounds=1), tmp_path / name)
    state = json.loads(path.read_text())
    state["tide_config"].update(config)
    return path, state


def write(path: Path, state: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state))
    return path


# ---- 2. programs: never from the working directory; the saved LM never wins; bounded config ----

def test_a_programs_folder_in_the_working_directory_is_not_loaded(tmp_path, monkeypatch):
    _, state = saved_state(tmp_path, max_rounds=7)
    stranger = tmp_path / "stranger"
    write(stranger / "programs" / "repository" / "local" / "tide.json", state)
    monkeypatch.chdir(stranger)
    program, source = choose_program(REPOSITORY, "local")
    assert str(stranger) not in source and program.max_rounds != 7


def test_a_saved_programs_lm_never_replaces_the_chosen_backbone(repo, tmp_path):
    path, state = saved_state(tmp_path)
    state["discover"]["lm"] = {"model": "openai/not-the-users-choice", "model_type": "chat", "cache": False,
                               "num_retries": 0, "temperature": None, "max_tokens": None}
    write(path, state)
    assert all(p.lm is None for _, p in load_program(path).named_predictors())
    lm = DummyLM(answers(finding("mean divides by n - 1", ["pkg/mathutil.py::mean"], GOOD_PATCH)))
    result = discover_repository(repo, lm=lm, program=path, progress=lambda line: None)
    assert len(lm.history) >= 1 and len(result.findings) == 1
    assert not result.failed_rounds()


@pytest.mark.parametrize("key,value", [("max_rounds", 1e9), ("max_attempts", 10**9), ("per_round", 0),
                                       ("max_attempts", 0), ("dedup_threshold", "80")])
def test_saved_config_values_are_bounded(tmp_path, key, value):
    path, state = saved_state(tmp_path, **{key: value})
    write(path, state)
    with pytest.raises(ValueError, match=rf"p.json: tide_config.{key} = .* is out of bounds"):
        load_program(path)


# ---- 3. git never reads user text as an option ----

def test_since_is_never_read_as_a_git_option(repo):
    before = (repo / "pkg" / "mathutil.py").read_text()
    with pytest.raises(ValueError, match="--since --output=pkg/mathutil.py: not a commit"):
        select_files(repo, since="--output=pkg/mathutil.py")
    assert (repo / "pkg" / "mathutil.py").read_text() == before


def test_clone_refs_are_never_read_as_git_options(repo, tmp_path):
    target = tmp_path / "written-by-git"
    with pytest.raises(RuntimeError):
        GitClone(repo).commit_time(f"--output={target}")
    assert not target.exists()


# ---- 4. symlinks out of the root and special files ----

@pytest.mark.timeout(60)
def test_repository_symlinks_out_of_root_fifos_and_large_files_are_skipped_and_listed(repo, tmp_path, monkeypatch):
    (tmp_path / "outside.py").write_text("def leaked():\n    return 'TOPSECRET'\n")
    (repo / "pkg" / "link.py").symlink_to(tmp_path / "outside.py")
    (repo / "pkg" / "alias.py").symlink_to(repo / "pkg" / "text.py")  # inside the root: read
    os.mkfifo(repo / "pkg" / "pipe.py")
    monkeypatch.setattr(safe_files, "MAX_FILE_BYTES", 1000)  # tools/report.py is about 1.5 kB
    lm = DummyLM(answers())
    lines = []
    result = discover_repository(repo, lm=lm, backbone="none-shipped", progress=lines.append)
    reasons = {s["path"]: s["reason"] for s in result.skipped}
    assert set(reasons) == {"pkg/link.py", "pkg/pipe.py", "tools/report.py"}
    assert "outside the folder: not followed" in reasons["pkg/link.py"]
    assert "FIFO" in reasons["pkg/pipe.py"] and "over the 1000-byte cap" in reasons["tools/report.py"]
    assert "pkg/alias.py::shout" in {a.id for a in result.instance.artifacts}
    assert "TOPSECRET" not in json.dumps(lm.history, default=str)
    assert any(line.startswith("skipped pkg/link.py: a symlink to") for line in lines)
    assert "- pkg/pipe.py: a FIFO (named pipe), not a regular file" in write_report(result, tmp_path / "o")[
        "report.md"].read_text()


@pytest.mark.timeout(60)
def test_workspace_symlinks_out_of_root_devices_fifos_and_large_files_are_skipped(tmp_path, monkeypatch):
    ws = Path(shutil.copytree(INGEST, tmp_path / "ws"))
    (ws / "passwd.txt").symlink_to("/etc/passwd")
    (ws / "zero.md").symlink_to("/dev/zero")
    (ws / "etc").symlink_to("/etc", target_is_directory=True)
    os.mkfifo(ws / "pipe.md")
    (ws / "alias.txt").symlink_to(ws / "pipe.md")  # inside the root, but a FIFO
    (ws / "big.txt").write_text("x" * 5000)
    monkeypatch.setattr(safe_files, "MAX_FILE_BYTES", 4000)
    result = ingest_workspace(ws)
    reasons = {s.path: s.reason for s in result.skipped}
    assert set(reasons) == {"passwd.txt", "zero.md", "etc", "pipe.md", "alias.txt", "big.txt"}
    assert all("outside the folder" in reasons[p] for p in ("passwd.txt", "zero.md", "etc"))
    assert "FIFO" in reasons["pipe.md"] and "FIFO" in reasons["alias.txt"] and "cap" in reasons["big.txt"]
    assert len(result.artifacts) == len(ingest_workspace(INGEST).artifacts)  # the fixture's own items are all read
    assert "root:" not in json.dumps([a.payload for a in result.artifacts])


@pytest.mark.parametrize("swapped", ["notes.md", "mail/inbox.eml", "mail"])
def test_a_file_or_folder_swapped_for_a_link_after_the_listing_is_not_read(tmp_path, monkeypatch, swapped):
    ws = tmp_path / "ws"
    (ws / "mail").mkdir(parents=True)
    (ws / "notes.md").write_text("# Notes\nThe venue deposit is due Friday.\n")
    (ws / "mail" / "inbox.eml").write_text("From: a@example.org\nSubject: hi\n\nhello\n")
    secret = tmp_path / "secret"
    (secret / "mail").mkdir(parents=True)
    for name in ("notes.md", "mail/inbox.eml"):
        (secret / name).write_text("From: x@example.org\nSubject: TOPSECRET\n\nTOPSECRET key\n")
    listed = ingest_module.workspace_files

    def list_then_swap(root):  # the listing sees regular files; then one is swapped for a link out of the folder
        listing = listed(root)
        target = ws / swapped
        shutil.rmtree(target) if target.is_dir() else target.unlink()
        target.symlink_to(secret / swapped)
        return listing

    monkeypatch.setattr(ingest_module, "workspace_files", list_then_swap)
    result = ingest_workspace(ws)
    assert "TOPSECRET" not in json.dumps([a.payload for a in result.artifacts])
    assert any("outside the folder: not followed" in s.reason for s in result.skipped), result.skipped


def test_a_link_that_stays_inside_the_folder_is_still_read(tmp_path):
    ws = tmp_path / "ws"
    (ws / "docs").mkdir(parents=True)
    (ws / "docs" / "plan.md").write_text("# Plan\nShip on Friday.\n")
    (ws / "latest.md").symlink_to("docs/../docs/plan.md")
    (ws / "shortcut").symlink_to(ws / "docs", target_is_directory=True)
    assert safe_files.read_capped(ws, "latest.md") == safe_files.read_capped(ws, "shortcut/plan.md")


# ---- 5. an email in an unknown charset is kept, with the fallback recorded ----

def test_an_unknown_charset_is_decoded_with_a_fallback_and_recorded(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in ("bad-charset.eml", "fine.eml"):
        shutil.copy(HOSTILE / name, ws / name)
    result = ingest_workspace(ws)
    assert not result.skipped
    bodies = {a.payload["subject"]: a.payload["body"] for a in result.artifacts}
    assert bodies["Venue deposit due Friday"].startswith("The venue deposit is due on Friday")
    assert [(f.path, f.reason) for f in result.fallbacks] == [
        ("bad-charset.eml", "message <deposit-0310@example.org>: unknown charset 'x-no-such-charset'; decoded as UTF-8")
    ]
    run = discover_workspace(ws, lm=DummyLM([{"findings": "[]"}] * 4), backbone="none-shipped",
                             progress=lambda line: None)
    assert any("bad-charset.eml: kept, message <deposit-0310@example.org>: unknown charset" in n for n in run.notes)


# ---- 6. a run in which every round failed is not a clean "no findings" ----

def test_a_run_where_every_round_failed_says_so_and_exits_3(repo, tmp_path, monkeypatch, capsys):
    garbage = DummyLM([{"not_findings": "oops"}] * 40)
    dspy.configure(lm=garbage)
    out = tmp_path / "report"
    rc = main(["discover", "repo", str(repo), "--rounds", "2", "--out", str(out), "--backbone", "none-shipped"])
    assert rc == 3
    captured = capsys.readouterr()
    assert "tide: error: every round failed (2 of 2)" in captured.err and "first error:" in captured.err
    assert "2 rounds (2 FAILED)" in captured.out
    md = (out / "report.md").read_text()
    assert "No findings, because every round failed (first error:" in md
    assert "## Failed rounds (2 of 2)" in md and "- round 1:" in md
    page = (out / "report.html").read_text()
    assert "every round failed" in page and "Failed rounds (2 of 2)" in page


# ---- 7. resume integrity ----

def two_records():
    return load_instances(HOSTILE / "two-records.jsonl")


def empty_lm():
    return DummyLM([{"findings": "[]"}] * 20)


def test_resume_refuses_a_program_with_other_instructions(tmp_path):
    out = tmp_path / "results.jsonl"
    first = build_program("iter", "workspace", max_rounds=1)
    evaluate(first, two_records()[:1], out_path=out, lm=empty_lm(), progress=False)
    other = build_program("iter", "workspace", max_rounds=1)
    other.discover.signature = other.discover.signature.with_instructions("Other instructions.")
    with pytest.raises(ValueError, match=r"config.json: the rows here came from another run configuration "
                                         r"\(differs in program_hash"):
        evaluate(other, two_records(), out_path=out, lm=empty_lm(), progress=False, resume=True)


def test_resume_refuses_a_truncated_config(tmp_path):
    out = tmp_path / "results.jsonl"
    evaluate(build_program("iter", "workspace", max_rounds=1), two_records()[:1], out_path=out, lm=empty_lm(),
             progress=False)
    config = tmp_path / "config.json"
    config.write_text(config.read_text()[:40])
    with pytest.raises(ValueError, match="config.json is cut off or not valid JSON, so nothing says which program"):
        evaluate(build_program("single", "workspace"), two_records(), out_path=out, lm=empty_lm(), progress=False,
                 resume=True)
    config.write_text(json.dumps({"method": "iter", "program": {}, "judge": "proxy"}))  # no program_hash
    with pytest.raises(ValueError, match="config.json lacks program_hash"):
        evaluate(build_program("iter", "workspace", max_rounds=1), two_records(), out_path=out, lm=empty_lm(),
                 progress=False, resume=True)


def test_a_row_cut_mid_write_is_dropped_before_the_next_row_is_appended(tmp_path):
    out = tmp_path / "results.jsonl"
    program = build_program("iter", "workspace", max_rounds=1)
    evaluate(program, two_records(), out_path=out, lm=empty_lm(), progress=False)
    complete, second = out.read_text().splitlines()
    out.write_text(complete + "\n" + second[: len(second) // 2])  # killed while writing the second row
    result = evaluate(program, two_records(), out_path=out, lm=empty_lm(), progress=False, resume=True)
    assert result.n_run == 1
    assert list(read_rows(out)) == ["w1", "w3"]
    assert [json.loads(line)["instance_id"] for line in out.read_text().splitlines()] == ["w1", "w3"]


# ---- 8. credentials outside the environment never reach disk ----

def test_query_string_credentials_and_headers_are_scrubbed_everywhere(tmp_path, monkeypatch):
    base = f"http://llm.example:8000/v1?api_key={SECRET}&x=1"
    lm = get_lm("openai-compatible", api_base=base)
    assert SECRET not in json.dumps(describe_lm(lm)) and "x=1" in describe_lm(lm)["api_base"]
    # evaluate's config.json, from the CLI (its command line names --api-base)
    dspy.configure(lm=empty_lm())
    out = tmp_path / "eval"
    rc = main(["evaluate", "--method", "iter", "--setting", "workspace", "--data", str(HOSTILE / "two-records.jsonl"),
               "--rounds", "1", "--out", str(out), "--no-track", "--api-base", base])
    assert rc == 0
    assert SECRET not in (out / "config.json").read_text() and "api_key=REDACTED" in (out / "config.json").read_text()
    # provenance.json
    args = argparse.Namespace(command="compile", api_base=base, backbone="openai-compatible")
    record_provenance(tmp_path / "prov", "tide.json", command_line(args), api_base=base)
    assert SECRET not in (tmp_path / "prov" / "provenance.json").read_text()
    # a saved program, after set_lm with headers
    program = build_program("iter", "workspace")
    program.set_lm(dspy.LM("openai/x", api_base=base, extra_headers={"Authorization": f"Bearer {SECRET}"}))
    saved = save_program(program, tmp_path / "p.json", extra={"api_base": base})
    assert SECRET not in saved.read_text()


def test_mlflow_params_hold_no_query_string_credentials(tmp_path):
    import mlflow

    from tide_dspy.tracking import tracked_run

    lm = dspy.LM("openai/x", api_base=f"http://h/v1?token={SECRET}", extra_headers={"Authorization": SECRET})
    with tracked_run(
        "evaluate",
        setting="workspace",
        backbone="b",
        uri=f"sqlite:///{tmp_path}/m.db",
        params={"lm": describe_lm(lm), "command": f"tide evaluate --api-base http://h/v1?key={SECRET}"},
    ) as run:
        run_id = run.info.run_id
    params = mlflow.get_run(run_id).data.params
    assert SECRET not in json.dumps(params) and "REDACTED" in params["command"]
    assert scrub_secrets({"url": f"https://u:{SECRET}@h/v1?sig={SECRET}"}) == {"url": "https://h/v1?sig=REDACTED"}


# ---- 9. clear errors instead of tracebacks ----

def test_an_empty_jsonl_names_the_file(capsys):
    assert main(["data", "stats", str(HOSTILE / "empty.jsonl")]) == 2
    assert "empty.jsonl: the file is empty" in capsys.readouterr().err


def test_a_non_utf8_byte_names_the_line_and_is_skipped_under_skip_invalid(capsys):
    with pytest.raises(InvalidRecordError, match=r"not-utf8.jsonl line 2: byte 0xe9 at column \d+ is not UTF-8"):
        load_instances(HOSTILE / "not-utf8.jsonl")
    report = load_with_report(HOSTILE / "not-utf8.jsonl", skip_invalid=True)
    assert [i.instance_id for i in report.instances] == ["w1", "w3"]
    assert [e.line for e in report.skipped] == [2]
    assert main(["data", "stats", str(HOSTILE / "not-utf8.jsonl"), "--skip-invalid"]) == 0
    assert "line 2: byte 0xe9" in capsys.readouterr().out


def test_deeply_nested_json_is_a_clear_error(tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(InvalidRecordError, match="deep.jsonl line 1: JSON nested too deeply"):
        load_instances(deep)
    with pytest.raises(ValueError, match="deep.json: JSON nested too deeply"):
        load_program(deep.rename(tmp_path / "deep.json"))
    with pytest.raises(ValueError, match="deep.json: JSON nested too deeply"):
        read_json_file(tmp_path / "deep.json", "make one")


@pytest.mark.parametrize("corrupt,message", [
    (lambda s: s["tide_config"].update(colour="red"), r"tide_config has unknown key\(s\) \['colour'\]"),
    (lambda s: s["tide_config"].pop("setting"), r"tide_config has missing key\(s\) \['setting'\]"),
    (lambda s: s.pop("discover"), r"no predictor state for \['discover'\]"),
    (lambda s: s.update(surprise=1), r"unknown key\(s\) \['surprise'\]"),
    (lambda s: s["discover"].pop("signature"), r"predictor state does not load"),
    (lambda s: s["tide_config"].update(templates=[{"id": 1}]), r"tide_config does not build a program"),
])
def test_a_corrupt_saved_program_names_the_file(tmp_path, corrupt, message):
    path, state = saved_state(tmp_path)
    corrupt(state)
    write(path, state)
    with pytest.raises(ValueError, match=rf"p.json: .*{message}.*save the program again"):
        load_program(path)


def test_bad_yaml_files_name_the_file(tmp_path):
    from tide_dspy.optimize import load_optimizer_config
    from tide_dspy.product.library import load_profile

    profile = tmp_path / "profile.yaml"
    profile.write_bytes(b"full_name: Jos\xe9\n")
    with pytest.raises(ValueError, match="profile.yaml: byte 14 is not UTF-8"):
        load_profile(profile)
    config = tmp_path / "mine.yaml"
    config.write_text("optimizer: [unclosed\n")
    with pytest.raises(ValueError, match="mine.yaml: not valid YAML"):
        load_optimizer_config(str(config))


def test_an_unknown_model_uri_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/m.db")
    with pytest.raises(ValueError, match="models:/no-such-model/1: not found in the MLflow store sqlite:///"):
        load_program("models:/no-such-model/1")


@pytest.fixture
def taken(tmp_path, monkeypatch) -> Path:
    """A file where a command's --out folder should be. No LM is configured and the hosted backbone's key is unset,
    so a command that built its LM before checking --out would stop on the missing key instead."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = tmp_path / "taken"
    path.write_text("a file\n")
    return path


def test_discover_repo_refuses_an_out_that_is_a_file_before_building_the_lm(repo, taken, capsys):
    assert main(["discover", "repo", str(repo), "--backbone", "gpt-5-mini", "--out", str(taken)]) == 2
    assert f"--out {taken}: not a folder" in capsys.readouterr().err
    assert taken.read_text() == "a file\n"


def test_discover_workspace_refuses_an_out_under_a_file_before_building_the_lm(taken, capsys):
    assert main(["discover", "workspace", str(INGEST), "--backbone", "gpt-5-mini", "--out", str(taken / "sub")]) == 2
    assert f"its parent {taken} is a file" in capsys.readouterr().err


def test_evaluate_refuses_an_out_that_is_a_file_before_building_the_lm(taken, capsys):
    assert main(["evaluate", "--method", "iter", "--setting", "workspace", "--data", str(HOSTILE / "two-records.jsonl"),
                 "--backbone", "gpt-5-mini", "--out", str(taken), "--no-track"]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert taken.read_text() == "a file\n"


@pytest.mark.parametrize(
    "argv,message",
    [
        (
            ["evaluate", "--method", "iter", "--setting", "workspace", "--limit", "-1"],
            "argument --limit: must be at least 1, got -1",
        ),
        (["discover", "repo", ".", "--max-tokens", "-5"], "argument --max-tokens: must be at least 1, got -5"),
        (["discover", "repo", ".", "--rounds", "0"], "argument --rounds: must be at least 1, got 0"),
    ],
)
def test_negative_counts_are_refused_by_name(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_negative_max_tokens_and_limit_are_refused_in_the_library_too(monkeypatch):
    from tide_dspy.data.selection import select_instances

    with pytest.raises(ValueError, match="max_tokens must be at least 1, got -5"):
        get_lm("openai/x", max_tokens=-5)
    monkeypatch.setenv("TIDE_MAX_TOKENS", "-5")
    with pytest.raises(ValueError, match="TIDE_MAX_TOKENS"):
        get_lm("openai/x")
    with pytest.raises(ValueError, match="limit must be at least 1, got -1"):
        select_instances(two_records(), limit=-1)


def test_the_jsonl_cache_follows_an_in_place_edit_that_keeps_the_mtime(tmp_path):
    data = tmp_path / "d.jsonl"
    shutil.copy(HOSTILE / "two-records.jsonl", data)
    stamp = data.stat()
    assert [i.instance_id for i in load_instances(data, cache_dir=tmp_path / "cache")] == ["w1", "w3"]
    data.write_text(data.read_text().replace('"w3"', '"w9"'))  # same size
    os.utime(data, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert [i.instance_id for i in load_instances(data, cache_dir=tmp_path / "cache")] == ["w1", "w9"]


# ---- 10. report.md: no raw HTML from the LM or from file names; patches fenced safely ----

def test_report_md_escapes_html_and_fences_patches_longer_than_their_backticks(repo, tmp_path):
    (repo / "pkg" / "<b onclick=x>bold.py").write_text("def oops(:\n")  # does not parse: listed in skipped inputs
    patch = GOOD_PATCH + "+x = '''\n+````\n+'''\n"
    lm = DummyLM(answers(finding("<img src=x onerror=alert(1)> mean divides by n - 1", ["pkg/mathutil.py::mean"],
                                 patch, why="<script>alert(2)</script>")))
    result = discover_repository(repo, lm=lm, backbone="none-shipped", progress=lambda line: None)
    md = write_report(result, tmp_path / "o")["report.md"].read_text()
    assert "<img" not in md and "<script>" not in md and "<b>" not in md
    assert "&lt;img src=x onerror=alert(1)&gt; mean divides by n - 1" in md
    assert "- pkg/&lt;b onclick=x&gt;bold.py: line 1" in md
    fence = "`" * 5
    assert f"\n{fence}diff\n" in md and f"\n+````\n+'''\n{fence}\n" in md


def test_a_saved_max_retries_is_an_unknown_key(tmp_path):
    path, state = saved_state(tmp_path, max_retries=2)
    with pytest.raises(ValueError, match=r"p.json: tide_config has unknown key\(s\) \['max_retries'\]"):
        load_program(write(path, state))
