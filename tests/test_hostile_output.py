"""What `tide` writes and prints when its input is hostile: only files it created, nothing secret, nothing raw.

Each test checks one behaviour: the writer (no links followed, temp file and os.replace, a full disk), secrets in
errors, control characters, caps on model text, links in reports, and the hostile-input items that concern output
(deep MIME, evaluate's exit status, the lock on --out, MLflow errors, hints, corrupt rows, mbox progress). No
model: DummyLM answers and a stub OpenAI-compatible server on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import dspy
import pytest
from dspy.utils.dummies import DummyLM
from sample_checkout import GOOD_PATCH, answers, finding, run_git

from scripts import load_script
from tide_dspy.cli.main import build_parser, main
from tide_dspy.evaluation import evaluate
from tide_dspy.product import discover_repository, write_report
from tide_dspy.programs import build_program

StubServer = load_script("stub_server").StubServer
FIXTURE_DATA = Path(__file__).parent / "fixtures" / "instances"
KEY = "sk-ant-api03-SENTINELkeySENTINELkey0123456789"
DB_PASS = "hunter2-database-password"
ESC_TEXT = "title\x1b]0;pwned\x07 clear\x1b[2J clip\x1b]52;c;ZWNobyBwd25lZA==\x07 bell\x07 c1\x9b31m end"


def evaluate_args(out: Path, *more: str) -> list[str]:
    return ["evaluate", "--setting", "workspace", "--data", str(FIXTURE_DATA / "workspace"), "--split", "train",
            "--method", "iter", "--rounds", "1", "--limit", "1", "--backbone", "dummy", "--out", str(out),
            "--no-track", *more]


def unparseable_lm(n: int = 50) -> DummyLM:
    return DummyLM([{"nothing": "useful"}] * n)


# ---- the writer: never through a link, never inside the tree read, never half-written ----

@pytest.mark.parametrize("absolute", [True, False])
def test_a_report_file_that_is_a_link_is_not_written_through(repo, tmp_path, capsys, absolute):
    victim = tmp_path / "bashrc"
    victim.write_text("export SAFE=1\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").symlink_to(victim if absolute else Path("..") / "bashrc")
    lm = DummyLM(answers(finding("mean divides by n - 1", ["pkg/mathutil.py::mean"], GOOD_PATCH)))
    dspy.configure(lm=lm)
    rc = main(["discover", "repo", str(repo), "--out", str(out), "--backbone", "none-shipped"])
    assert victim.read_text() == "export SAFE=1\n"
    assert rc == 2 and "report.md: is a symbolic link" in capsys.readouterr().err
    assert not lm.history  # refused before any model call


def test_the_default_out_inside_the_tree_read_is_refused(repo, tmp_path, monkeypatch, capsys):
    victim = tmp_path / "bashrc"
    victim.write_text("export SAFE=1\n")
    (repo / "tide-report").mkdir()
    (repo / "tide-report" / "report.md").symlink_to(victim)  # shipped by the checkout
    run_git(repo, "add", ".")
    run_git(repo, "commit", "-qm", "ships a link")
    monkeypatch.chdir(repo)
    dspy.configure(lm=DummyLM(answers(finding("mean divides by n - 1", ["pkg/mathutil.py::mean"], GOOD_PATCH))))
    rc = main(["discover", "repo", ".", "--backbone", "none-shipped"])
    assert victim.read_text() == "export SAFE=1\n"
    err = capsys.readouterr().err
    assert rc == 2 and "lies inside" in err and "--out-inside" in err
    assert sorted(p.name for p in (repo / "tide-report").iterdir()) == ["report.md"]  # nothing written there


def test_an_out_folder_that_is_a_link_is_refused(repo, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").symlink_to(elsewhere)
    dspy.configure(lm=DummyLM(answers()))
    assert main(["discover", "repo", str(repo), "--out", str(tmp_path / "out"), "--backbone", "none-shipped"]) == 2
    assert "output folder is a symbolic link" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == []


def test_a_full_disk_says_one_line_and_keeps_the_earlier_report(repo, tmp_path, monkeypatch, capsys):
    from tide_dspy.util import safe_write

    out = tmp_path / "out"
    dspy.configure(lm=DummyLM(answers(finding("mean divides by n - 1", ["pkg/mathutil.py::mean"], GOOD_PATCH))))
    assert main(["discover", "repo", str(repo), "--out", str(out), "--backbone", "none-shipped"]) == 0
    before = (out / "report.md").read_text()

    def full(fd, data):
        os.write(fd, bytes(data[:10]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(safe_write, "_write_all", full)
    capsys.readouterr()
    dspy.configure(lm=DummyLM(answers(finding("another finding", ["pkg/text.py::shout"], ""))))
    assert main(["discover", "repo", str(repo), "--out", str(out), "--backbone", "none-shipped"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(err) == 1 and err[0].startswith("tide: error:") and "no space left" in err[0]
    assert (out / "report.md").read_text() == before
    assert sorted(p.name for p in out.iterdir()) == [".tide.lock", "findings.json", "report.html", "report.md",
                                                    "run.json"]  # no temporary file left behind


def test_config_and_summary_json_are_replaced_not_rewritten_in_place(tmp_path):
    out = tmp_path / "run"
    dspy.configure(lm=unparseable_lm())
    main(evaluate_args(out))
    inodes = {name: (out / name).stat().st_ino for name in ("config.json", "summary.json")}
    dspy.configure(lm=unparseable_lm())
    main(evaluate_args(out, "--resume"))
    assert all((out / name).stat().st_ino != ino for name, ino in inodes.items())  # a new file each time


def test_result_rows_are_never_appended_through_a_link(tmp_path, train_instances):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.jsonl").symlink_to(victim)
    program = build_program("iter", "workspace", max_rounds=1)
    with pytest.raises(ValueError, match="is a symbolic link"):
        evaluate(program, train_instances[:1], out_path=out / "results.jsonl", lm=unparseable_lm(), progress=False,
                 resume=True)
    assert victim.read_text() == "keep\n"


@pytest.fixture
def train_instances():
    from tide_dspy.data import load_instances

    return load_instances(FIXTURE_DATA / "workspace", setting="workspace", split="train")


# ---- secrets ----

@pytest.mark.parametrize("text", [
    f"Authorization: Bearer {KEY[7:]}", f"{{'x-api-key': '{KEY[7:]}'}}", f'"x-goog-api-key": "{KEY[7:]}"',
    f"echo {KEY}", f"key AIzaSyA{KEY[14:]}", f"password {DB_PASS}", f"pat ghp_{'x' * 36}",
])
def test_error_text_is_scrubbed_of_keys(text, monkeypatch):
    from tide_dspy.util.secrets import scrub_text

    monkeypatch.setenv("DB_PASS", DB_PASS)
    scrubbed = scrub_text(text)
    assert KEY[7:] not in scrubbed and DB_PASS not in scrubbed and "x" * 36 not in scrubbed and "REDACTED" in scrubbed


def test_a_gateway_that_echoes_the_key_leaks_it_nowhere(repo, tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.setenv("TIDE_API_KEY", KEY)
    monkeypatch.setenv("DB_PASS", DB_PASS)
    out = tmp_path / "out"
    echo = f"invalid key; you sent Authorization: Bearer {KEY} (and {DB_PASS})"
    with StubServer(status=401, error_body=echo) as stub, caplog.at_level(logging.DEBUG):
        rc = main(["discover", "repo", str(repo), "--out", str(out), "--backbone", "openai-compatible",
                   "--api-base", stub.api_base])
    assert rc == 3 and stub.requests  # the server was asked, and refused
    printed = capsys.readouterr()
    saved = "".join((out / name).read_text() for name in ("report.md", "report.html", "run.json", "findings.json"))
    for where in (printed.out, printed.err, caplog.text, saved):
        assert "SENTINEL" not in where and DB_PASS not in where
    assert "REDACTED" in saved  # the error itself is kept


def test_evaluate_rows_and_mlflow_hold_no_echoed_key(tmp_path, monkeypatch):
    import mlflow
    from mlflow import MlflowClient

    monkeypatch.setenv("TIDE_API_KEY", KEY)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = tmp_path / "run"
    with StubServer(status=401, error_body=f"bad credentials: Bearer {KEY}") as stub:
        args = evaluate_args(out)[:-1]  # tracked
        args[args.index("dummy")] = "openai-compatible"
        main([*args, "--api-base", stub.api_base, "--tracking-uri", uri])
    assert stub.requests
    rows = (out / "results.jsonl").read_text()
    assert "SENTINEL" not in rows and "REDACTED" in rows
    mlflow.set_tracking_uri(uri)
    client = MlflowClient()
    (run,) = client.search_runs([client.get_experiment_by_name("tide-dspy").experiment_id])
    local = Path(client.download_artifacts(run.info.run_id, "evaluation", str(tmp_path / "dl")))
    logged = "".join(p.read_text() for p in local.iterdir()) + json.dumps(run.data.params)
    assert "SENTINEL" not in logged and "REDACTED" in logged


def test_the_console_log_handler_scrubs_and_escapes():
    from tide_dspy.cli.main import SafeFormatter

    record = logging.LogRecord("dspy", logging.WARNING, __file__, 1, "parse failed: %s", (f"{KEY} {ESC_TEXT}",),
                               None)
    line = SafeFormatter("%(message)s").format(record)
    assert "SENTINEL" not in line and "\x1b" not in line and "\x07" not in line and "\x9b" not in line
    assert "\\x1b]52;" in line  # shown, not obeyed


# ---- control characters ----

def test_model_text_with_terminal_escapes_is_printed_and_written_escaped(repo, tmp_path, capsys):
    out = tmp_path / "out"
    dspy.configure(lm=DummyLM(answers(finding(ESC_TEXT, ["pkg/mathutil.py::mean"], GOOD_PATCH, why=ESC_TEXT))))
    assert main(["discover", "repo", str(repo), "--out", str(out), "--backbone", "none-shipped"]) == 0
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    for text in (md, page):
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", text)
    assert "\\x1b\\]0;pwned" in md  # shown, not obeyed


BIDI_TEXT = "rm \u202egnp.exe\u202c keeps \u2066isolates\u2069 and a C1 \x9b and DEL \x7f"


def test_findings_json_and_run_json_hold_no_raw_bidi_or_control_characters(repo, tmp_path):
    dspy.configure(lm=DummyLM(answers(finding(BIDI_TEXT, ["pkg/mathutil.py::mean"], GOOD_PATCH, why=BIDI_TEXT))))
    out = tmp_path / "out"
    assert main(["discover", "repo", str(repo), "--out", str(out), "--backbone", "none-shipped"]) == 0
    for name in ("findings.json", "run.json"):
        text = (out / name).read_text()
        assert not re.search("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]", text), name
    [row] = json.loads((out / "findings.json").read_text())["findings"]
    assert row["description"] == BIDI_TEXT  # the same data, escaped


def test_report_html_shows_code_spans_as_code(repo, tmp_path):
    dspy.configure(lm=DummyLM(answers(finding("`mean()` divides by `len(values) - 1`", ["pkg/mathutil.py::mean"],
                                              GOOD_PATCH, why="see `<b>x</b>`"))))
    out = tmp_path / "out"
    assert main(["discover", "repo", str(repo), "--out", str(out), "--backbone", "none-shipped"]) == 0
    page = (out / "report.html").read_text()
    assert "<code>mean()</code> divides by <code>len(values) - 1</code>" in page and "`mean()`" not in page
    assert "<code>&lt;b&gt;x&lt;/b&gt;</code>" in page  # still escaped inside the code span


def test_an_empty_report_on_the_embedded_backbone_says_what_it_means(repo, tmp_path, capsys):
    from tide_dspy.product.report import render_markdown

    lm = DummyLM([{"findings": "[]"}])
    lm.tide_backbone = "local"  # as get_lm("local") marks it; the embedded engine itself is not needed here
    result = discover_repository(repo, lm=lm, backbone="none-shipped", progress=lambda line: None)
    md = render_markdown(result)
    assert "No findings. The embedded model (Qwen2.5-Coder 1.5B) rarely finds anything" in md
    assert "--backbone gpt-5-mini" in md and "--backbone openai-compatible --api-base" in md
    lm2 = DummyLM([{"findings": "[]"}])
    other = discover_repository(repo, lm=lm2, backbone="none-shipped", progress=lambda line: None)
    assert "rarely finds" not in render_markdown(other)  # a served or hosted backbone's empty report is just empty


def test_an_evaluation_that_scores_no_instance_exits_non_zero_naming_the_flag(tmp_path, capsys):
    dspy.configure(lm=unparseable_lm())
    rc = main(evaluate_args(tmp_path / "out", "--context-window", "300"))  # every instance is over it
    err = capsys.readouterr().err
    assert rc == 3 and "no instance was scored" in err and "--max-context-tokens N" in err, err


def test_a_parse_error_echoing_escapes_is_printed_escaped(repo, tmp_path, capsys):
    dspy.configure(lm=DummyLM([{"findings": f"not json {ESC_TEXT}"}] * 10))
    rc = main(["discover", "repo", str(repo), "--out", str(tmp_path / "out"), "--backbone", "none-shipped"])
    printed = capsys.readouterr()
    assert rc == 3 and "FAILED" in printed.out
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", printed.out.replace("\n", "") + printed.err.replace("\n", ""))


def test_file_names_with_newlines_and_escapes_are_printed_escaped(tmp_path, capsys):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.md").write_text("# Notes\nThe venue deposit is due Friday.\n")
    (ws / "evil\n\x1b[2Jname.md").write_text("")  # empty: skipped, and named on the console and in the report
    dspy.configure(lm=DummyLM([{"findings": "[]"}]))
    assert main(["discover", "workspace", str(ws), "--out", str(tmp_path / "out"), "--backbone", "none-shipped"]) == 0
    printed = capsys.readouterr().out
    assert "skipped evil\\n\\x1b[2Jname.md: empty document" in printed and "\x1b" not in printed
    md = (tmp_path / "out" / "report.md").read_text()
    assert "\x1b" not in md and "evil \\x1b\\[2Jname.md: empty document" in md


# ---- caps ----

def test_a_huge_description_is_capped_in_the_findings_and_the_next_prompt(repo):
    huge = "overflow " * 200_000  # 1.8 MB
    lm = DummyLM(answers(finding(huge, ["pkg/mathutil.py::mean"], GOOD_PATCH)))
    result = discover_repository(repo, lm=lm, backbone="none-shipped", progress=lambda line: None)
    (f,) = result.findings
    assert len(f.description) < 10_000 and f.description.endswith("more characters]")
    assert "capped" in f.flags
    next_prompt = lm.history[1]["messages"][-1]["content"]
    assert len(next_prompt) < len(huge) / 10


def test_a_report_shows_at_most_its_share_of_model_text(repo, tmp_path, monkeypatch):
    from tide_dspy.product import report

    lm = DummyLM(answers(finding("first " * 300, ["pkg/mathutil.py::mean"], GOOD_PATCH),
                         finding("second " * 300, ["pkg/text.py::shout"], "")))
    result = discover_repository(repo, lm=lm, backbone="none-shipped", per_round=2, progress=lambda line: None)
    monkeypatch.setattr(report, "REPORT_MODEL_CHARS", 2500, raising=False)
    md = write_report(result, tmp_path / "out")["report.md"].read_text()
    assert "first first" in md and "second second" not in md and "cut: this report already shows its limit" in md


# ---- links ----

LINKS = ("see [the fix](javascript:alert(document.cookie)) and ![b](https://beacon.example/p.png?u=1) "
         "or <https://evil.example/login> or https://evil.example/a or www.evil.example [x][1]\n[1]: https://r.example")


def test_report_md_renders_model_links_as_plain_text(repo, tmp_path):
    lm = DummyLM(answers(finding(LINKS, ["pkg/mathutil.py::mean"], GOOD_PATCH, why=LINKS)))
    result = discover_repository(repo, lm=lm, backbone="none-shipped", progress=lambda line: None)
    md = write_report(result, tmp_path / "out")["report.md"].read_text()
    outside_code = re.sub(r"(`+).*?\1", "", md)
    assert not re.search(r"(?<!\\)\[[^\]\n]*(?<!\\)\]\s*[(\[]", outside_code)  # no link or reference syntax
    assert not re.search(r"(?<!\\)!\[", outside_code)  # no image
    assert not re.search(r"<https?:|https?://|www\.", outside_code)  # no autolink: each URL is shown as code
    assert "javascript:alert" in md  # the text is kept, inert


def test_report_html_escapes_model_links_and_loads_nothing(repo, tmp_path):
    lm = DummyLM(answers(finding(LINKS + " <img src=x onerror=alert(1)>", ["pkg/mathutil.py::mean"], GOOD_PATCH)))
    result = discover_repository(repo, lm=lm, backbone="none-shipped", progress=lambda line: None)
    page = write_report(result, tmp_path / "out")["report.html"].read_text()
    assert "<a " not in page and "<img" not in page and "&lt;img src=x" in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


# ---- hostile inputs whose failure showed in the output ----

def nested_mime(levels: int) -> bytes:
    inner = b"Content-Type: text/plain\r\n\r\nhello\r\n"
    for i in range(levels):
        b = f"b{i}".encode()
        inner = (b'Content-Type: multipart/mixed; boundary="' + b + b'"\r\n\r\n--' + b + b"\r\n" + inner
                 + b"\r\n--" + b + b"--\r\n")
    return b"From: a@example.org\r\nTo: c@example.org\r\nSubject: deep\r\nMIME-Version: 1.0\r\n" + inner


def test_a_message_with_a_thousand_nested_mime_levels_is_skipped_with_a_reason(tmp_path, capsys):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "deep.eml").write_bytes(nested_mime(1000))
    (ws / "notes.md").write_text("# Notes\nThe venue deposit is due Friday.\n")
    dspy.configure(lm=DummyLM([{"findings": "[]"}]))
    assert main(["discover", "workspace", str(ws), "--out", str(tmp_path / "out"), "--backbone", "none-shipped"]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Skipped inputs" in md and "- deep.eml: MIME parts nested too deeply" in md


def test_evaluate_exits_3_when_every_instance_failed(tmp_path, capsys):
    dspy.configure(lm=unparseable_lm())
    assert main(evaluate_args(tmp_path / "run")) == 3
    assert "every instance failed (1 of 1)" in capsys.readouterr().err


def test_a_second_run_into_a_locked_out_is_refused_naming_the_holder(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(out / '.tide.lock')!r}, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, f"{{os.getpid()}}\\n".encode())
        print("locked", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        dspy.configure(lm=unparseable_lm())
        assert main(evaluate_args(out, "--resume")) == 2
        assert f"in use by another tide run (pid {holder.pid})" in capsys.readouterr().err
        assert not (out / "results.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()


def test_discover_into_a_folder_another_run_holds_is_refused_before_any_call(repo, tmp_path, capsys):
    from tide_dspy.util.safe_write import OutLock

    lm = DummyLM(answers())
    dspy.configure(lm=lm)
    with OutLock(tmp_path / "out"):
        rc = main(["discover", "repo", str(repo), "--out", str(tmp_path / "out"), "--backbone", "none-shipped"])
    assert rc == 2 and f"in use by another tide run (pid {os.getpid()})" in capsys.readouterr().err
    assert not lm.history


def test_an_unusable_mlflow_store_gives_one_line_with_the_no_track_hint(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    dspy.configure(lm=unparseable_lm())
    args = evaluate_args(tmp_path / "run")[:-1]  # tracked
    rc = main([*args, "--tracking-uri", f"sqlite:///{tmp_path / 'a-file' / 'mlflow.db'}"])
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    assert rc == 2 and len(err) == 1 and "--no-track" in err[0] and "MLflow store" in err[0]


def test_a_store_that_fails_at_the_end_keeps_the_table_and_says_one_line(tmp_path, monkeypatch, capfd, caplog):
    import sqlite3

    from tide_dspy import tracking

    def locked(self):  # what MLflow's SQL store does on a locked database: log the traceback, then raise
        try:
            raise sqlite3.OperationalError("database is locked")
        except sqlite3.OperationalError:
            logging.getLogger("mlflow.store.db.utils").error("SQLAlchemy database error.", exc_info=True)
            raise

    monkeypatch.setattr(tracking.Record, "log", locked)
    dspy.configure(lm=DummyLM([{"findings": "[]"}] * 10))
    args = evaluate_args(tmp_path / "run")[:-1]  # tracked
    rc = main([*args, "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"])
    out, err = capfd.readouterr()
    assert rc == 0 and "| retrieval |" in out and "1 instances" in out  # the table is printed
    logged = err + caplog.text
    assert "Traceback" not in logged and "SQLAlchemy database error" not in logged
    [line] = [r.getMessage() for r in caplog.records if "database is locked" in r.getMessage()]
    assert "--no-track" in line and "its metrics are not in MLflow" in line


def _flags_of(parser: argparse.ArgumentParser, *path: str) -> set[str]:
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return {s for a in parser._actions for s in a.option_strings}


def _hinted_flags(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text))


def test_every_hint_names_a_flag_of_its_command(tmp_path, capsys):
    parser = build_parser()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.md").write_text("# Big\n" + "word " * 20_000)
    dspy.configure(lm=DummyLM([{"findings": "[]"}]))
    assert main(["discover", "workspace", str(ws), "--out", str(tmp_path / "o"), "--backbone", "none-shipped",
                 "--context-window", "8000"]) == 2
    window_hint = capsys.readouterr().err
    assert "--exclude" in window_hint
    assert _hinted_flags(window_hint) <= _flags_of(parser, "discover", "workspace")

    data = tmp_path / "data"
    data.mkdir()
    (data / "bad.jsonl").write_text((FIXTURE_DATA / "workspace" / "workspaces.jsonl").read_text() + '{"nope": 1}\n')
    args = evaluate_args(tmp_path / "run")
    args[args.index("--data") + 1] = str(data)
    assert main(args) == 2
    record_hint = capsys.readouterr().err
    assert "--skip-invalid" in record_hint
    assert _hinted_flags(record_hint) <= _flags_of(parser, "evaluate")
    dspy.configure(lm=unparseable_lm())
    assert main([*args, "--skip-invalid"]) == 3  # the flag the hint names works: the bad record is skipped


def test_a_row_without_score_is_a_corrupt_row_that_resume_reruns(tmp_path, caplog):
    out = tmp_path / "run"
    dspy.configure(lm=DummyLM([{"findings": "[]"}] * 5))
    assert main(evaluate_args(out)) == 0
    rows = out / "results.jsonl"
    row = json.loads(rows.read_text())
    del row["score"]
    rows.write_text(json.dumps(row) + "\n")
    dspy.configure(lm=DummyLM([{"findings": "[]"}] * 5))
    with caplog.at_level(logging.WARNING):
        assert main(evaluate_args(out, "--resume")) == 0
    assert f"{rows}: line 1 is a corrupt result row (no score)" in caplog.text
    last = json.loads(rows.read_text().splitlines()[-1])
    assert last["instance_id"] == row["instance_id"] and "score" in last  # run again


def write_mbox(path: Path, messages: int) -> None:
    with path.open("w") as f:
        for n in range(messages):
            f.write(f"From sender{n}@example.org Mon Mar  2 09:00:00 2026\nFrom: sender{n}@example.org\n"
                    f"To: me@example.org\nSubject: note {n}\nMessage-ID: <m{n}@example.org>\n"
                    f"Date: Mon, 2 Mar 2026 09:{n % 60:02d}:00 +0000\n\n{'Plain words of a message. ' * 8}\n\n")


def test_a_large_mbox_reports_progress_and_the_call_plan_before_any_call(tmp_path, monkeypatch, capsys):
    from tide_dspy.product import ingest

    ws = tmp_path / "ws"
    ws.mkdir()
    write_mbox(ws / "inbox.mbox", 60)  # about 22 KB; the progress step is made small to match
    monkeypatch.setattr(ingest, "MBOX_PROGRESS_BYTES", 8 * 1024, raising=False)
    lm = DummyLM([{"findings": "[]"}] * 5)
    dspy.configure(lm=lm)
    assert main(["discover", "workspace", str(ws), "--out", str(tmp_path / "out"), "--backbone", "none-shipped",
                 "--no-scan"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("reading inbox.mbox (0.0 MB)")
    assert any(re.match(r"reading inbox\.mbox: \d+ messages, [\d.]+ of [\d.]+ MB", line) for line in lines)
    assert any(line.startswith("read inbox.mbox: 60 messages") for line in lines)
    plan = next(i for i, line in enumerate(lines) if line.startswith("plan: "))
    assert re.search(r"at most \d+ LM call\(s\), reading about [\d,]+ prompt tokens", lines[plan])
    assert plan < next(i for i, line in enumerate(lines) if line.startswith("[round 1]"))
