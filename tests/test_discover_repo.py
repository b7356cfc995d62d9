"""`tide discover repo`: file selection, patch checks against a real git repository, windows, report, CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import dspy
import pytest
from dspy.utils.dummies import DummyLM
from sample_checkout import BAD_PATCH, GOOD_PATCH, MATHUTIL, REPORT, TEXT, answers, finding, make_repo, write_tree

from tide_dspy.cli import discover_cmd
from tide_dspy.cli.main import main
from tide_dspy.cost.prices import Overrides
from tide_dspy.domains import NO_GUIDANCE
from tide_dspy.product import discover_repository, write_report
from tide_dspy.product.patches import APPLIES, DOES_NOT_APPLY, NO_PATCH, PatchChecker, git_toplevel
from tide_dspy.product.run import select_files
from tide_dspy.product.windows import PROMPT_OVERHEAD_TOKENS
from tide_dspy.util.tokens import count_tokens

# ---- patches ----

def test_patch_that_applies_and_one_that_does_not(repo):
    checker = PatchChecker(repo)
    assert checker.check(GOOD_PATCH).status == APPLIES
    bad = checker.check(BAD_PATCH)
    assert bad.status == DOES_NOT_APPLY and "pkg/text.py" in bad.reason and "does not apply" in bad.reason
    assert checker.check(None).status == NO_PATCH
    assert checker.check("Check the ISBN first.").reason.startswith("not a unified diff")
    assert (repo / "pkg" / "mathutil.py").read_text() == MATHUTIL  # nothing was applied
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout == ""


def test_patch_check_in_a_subfolder_of_a_repository(repo):
    # Patch paths are relative to the folder named; git apply run there would silently skip them.
    sub = repo / "nested"
    write_tree(sub)
    checker = PatchChecker(sub)
    assert checker.check(GOOD_PATCH).status == APPLIES
    assert checker.check(BAD_PATCH).status == DOES_NOT_APPLY


def test_patch_check_in_a_plain_folder(tmp_path):
    root = write_tree(tmp_path / "plain")
    if git_toplevel(root) is not None:
        pytest.skip("the temporary folder lies inside a git repository")
    checker = PatchChecker(root)
    assert checker.check(GOOD_PATCH).status == APPLIES
    assert checker.check(BAD_PATCH).status == DOES_NOT_APPLY


# ---- file selection ----

def test_include_exclude_and_since(repo):
    assert select_files(repo).files == ["pkg/__init__.py", "pkg/mathutil.py", "pkg/text.py", "tools/report.py"]
    assert select_files(repo, include=["pkg"]).files == ["pkg/__init__.py", "pkg/mathutil.py", "pkg/text.py"]
    assert select_files(repo, include=["*.py"], exclude=["pkg/__init__.py", "tools/*"]).files == [
        "pkg/mathutil.py", "pkg/text.py"]
    (repo / "pkg" / "text.py").write_text(TEXT + "\n\ndef whisper(s):\n    return s.lower()\n")
    (repo / "pkg" / "new.py").write_text("def fresh():\n    return 1\n")
    assert select_files(repo, since="HEAD").files == ["pkg/new.py", "pkg/text.py"]
    with pytest.raises(ValueError, match="--since no-such-ref"):
        select_files(repo, since="no-such-ref")


def test_since_outside_git_is_a_clear_error(tmp_path):
    root = write_tree(tmp_path / "plain")
    if git_toplevel(root) is not None:
        pytest.skip("the temporary folder lies inside a git repository")
    with pytest.raises(ValueError, match="--since needs a git repository"):
        select_files(root, since="HEAD")


# ---- the run ----

def test_discover_repository_checks_every_patch(repo):
    lm = DummyLM(answers(finding("mean divides by n - 1", ["pkg/mathutil.py::mean"], GOOD_PATCH),
                         finding("shout is wrong", ["pkg/text.py::shout", "pkg/gone.py::f"], BAD_PATCH)))
    lines = []
    result = discover_repository(repo, lm=lm, backbone="none-shipped", per_round=2, progress=lines.append)
    assert [f.evidence for f in result.findings] == [["pkg/mathutil.py::mean"], ["pkg/text.py::shout"]]
    assert [c.status for c in result.patch_checks] == [APPLIES, DOES_NOT_APPLY]
    assert "patch_does_not_apply" in result.findings[1].flags
    assert result.instance.anchor_commit and len(result.instance.artifacts) == 5
    assert any(line.startswith("[round 1] 2 new") for line in lines)
    assert any(line.startswith("[round 2] 0 new") for line in lines)
    assert "plain TIDE module without templates" in result.program_source
    summary = result.summary()
    assert summary["rounds"] == 2 and summary["lm_calls"] == 2 and summary["patches_apply"] == 1


def test_large_context_is_split_into_windows_and_findings_merged(repo):
    # Each window answers from its own context; the repeated answer in round 2 is a re-discovery.
    lm = DummyLM(
        {
            "tools/report.py::render": {
                "findings": json.dumps([finding("render drops rows", ["tools/report.py::render"], "")])
            },
            "pkg/mathutil.py::mean": {
                "findings": json.dumps([finding("mean divides by n - 1", ["pkg/mathutil.py::mean"], GOOD_PATCH)])
            },
        }
    )
    pkg_tokens = sum(count_tokens(p.read_text()) for p in (repo / "pkg").glob("*.py"))
    tools_tokens = count_tokens(REPORT)
    assert tools_tokens > pkg_tokens
    fixed = PROMPT_OVERHEAD_TOKENS + 1000 + count_tokens(NO_GUIDANCE)  # DummyLM's max_tokens is 1000
    lines = []
    result = discover_repository(repo, lm=lm, backbone="none-shipped",
                                 overrides=Overrides(window=fixed + tools_tokens + 60), progress=lines.append)
    assert result.windows == 2
    assert sorted(f.description for f in result.findings) == ["mean divides by n - 1", "render drops rows"]
    assert {r.window for r in result.rounds} == {1, 2}
    assert [r.record.rediscovered for r in result.rounds if r.record.round == 2] == [1, 1]
    assert any("split into 2 windows" in line for line in lines)
    assert any(line.startswith("[window 2/2, round 1]") for line in lines)


def test_scan_reads_a_context_too_large_for_one_window_in_one_pass(repo):
    # The same context that needs two windows without a scan: rated function by function, then one round that
    # reads the most suspect function in full and the other four as one line each.
    ratings = {"pkg/mathutil.py::mean": 8}
    scan = [{"suspicion": ratings.get(a, 1), "template_id": "", "reason": "r"}
            for a in ("pkg/mathutil.py::mean", "pkg/mathutil.py::Counter.__init__", "pkg/mathutil.py::Counter.bump",
                      "pkg/text.py::shout", "tools/report.py::render")]
    lm = DummyLM([*scan, *answers(finding("mean divides by n - 1", ["pkg/mathutil.py::mean"], GOOD_PATCH))])
    fixed = PROMPT_OVERHEAD_TOKENS + 1000 + count_tokens(NO_GUIDANCE)
    lines = []
    result = discover_repository(repo, lm=lm, backbone="none-shipped", scan=1, progress=lines.append,
                                 overrides=Overrides(window=fixed + count_tokens(REPORT) + 120))  # 2 windows unscanned
    assert result.windows == 1
    assert [f.evidence for f in result.findings] == [["pkg/mathutil.py::mean"]]
    round_prompt = lm.history[5]["messages"][-1]["content"]
    assert "def mean(values):" in round_prompt and "Render rows as a table" not in round_prompt
    assert "tools/report.py::render" in round_prompt.split("Other artifacts, not shown in full:")[1]
    assert any("scanning first (focus 1)" in line for line in lines)


def test_a_scanning_run_reports_its_scan_and_counts_its_calls(repo, tmp_path):
    scan = [{"suspicion": 8 if i == 3 else 1, "template_id": "", "reason": f"reason {i}"} for i in range(5)]
    lm = DummyLM([*scan, *answers(finding("shout drops the text", ["pkg/text.py::shout"], GOOD_PATCH))])
    lines = []
    result = discover_repository(repo, lm=lm, backbone="none-shipped", scan=2, rounds=1, progress=lines.append)
    assert result.summary()["lm_calls"] == 6 and result.summary()["scan_lm_calls"] == 5
    scan_line = next(i for i, line in enumerate(lines) if line.startswith("[scan] rated 5 artifacts, 5 LM call(s)"))
    assert "most suspect: pkg/text.py::shout (8.00)" in lines[scan_line]
    assert lines[scan_line + 1].startswith("[round 1]")  # the scan is reported before the rounds run
    paths = write_report(result, tmp_path / "out")
    assert "| 1 | pkg/text.py::shout | 8.00 | - | reason 3 |" in paths["report.md"].read_text()
    assert json.loads(paths["run.json"].read_text())["scans"][0]["ranked"][0] == "pkg/text.py::shout"


def test_one_file_larger_than_the_window_is_a_clear_error(repo):
    fixed = PROMPT_OVERHEAD_TOKENS + 1000 + count_tokens(NO_GUIDANCE)
    with pytest.raises(ValueError, match=r"tools/report.py alone needs about \d+ tokens, but a window holds 50 tokens"):
        discover_repository(repo, lm=DummyLM([]), backbone="none-shipped", overrides=Overrides(window=fixed + 50),
                            progress=lambda line: None)


@pytest.fixture(scope="module")
def reported(tmp_path_factory) -> dict[str, Path]:
    """write_report's files for a discovery of two findings on the repo tree: one whose patch applies, one whose
    patch does not, over two rounds (the second empty)."""
    root = tmp_path_factory.mktemp("reported")
    lm = DummyLM(answers(finding("mean divides by n - 1", ["pkg/mathutil.py::mean"], GOOD_PATCH),
                         finding("shout is wrong", ["pkg/text.py::shout"], BAD_PATCH)))
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    result = discover_repository(make_repo(root / "repo"), lm=lm, backbone="none-shipped", per_round=2,
                                 progress=lambda line: None)
    return write_report(result, root / "out")


def test_findings_json_holds_only_the_findings(reported):
    assert list(json.loads(reported["findings.json"].read_text())) == ["findings"]


def test_findings_json_keeps_each_findings_evidence_and_patch(reported):
    first, _ = json.loads(reported["findings.json"].read_text())["findings"]
    assert first["evidence"] == ["pkg/mathutil.py::mean"] and first["patch"] == GOOD_PATCH
    assert {"description", "evidence", "patch", "used_template_id", "why", "round", "flags"} <= set(first)


def test_findings_json_records_each_patch_check(reported):
    first, second = json.loads(reported["findings.json"].read_text())["findings"]
    assert first["patch_check"] == {"status": "applies", "reason": ""}
    assert second["patch_check"]["status"] == "does not apply"


def test_report_md_gives_each_finding_a_section(reported):
    md = reported["report.md"].read_text()
    assert "## Finding 1" in md and "mean divides by n - 1" in md


def test_report_md_cites_evidence_by_file_lines_and_id(reported):
    assert "`pkg/mathutil.py:1-2 (pkg/mathutil.py::mean)`" in reported["report.md"].read_text()


def test_report_md_shows_each_patch_check(reported):
    md = reported["report.md"].read_text()
    assert "Patch: **applies**" in md and "Patch: **does not apply: " in md


def test_report_md_marks_a_finding_without_a_template_as_template_novel(reported):
    assert "none cited (template-novel)" in reported["report.md"].read_text()


def test_report_md_shows_the_patch_and_the_rounds_table(reported):
    md = reported["report.md"].read_text()
    assert "```diff" in md and "| window | round |" in md


def test_report_md_ends_with_the_summary(reported):
    summary = "Summary: 2 findings, 1/2 patches apply | 2 rounds over 1 window(s) | 2 LM calls"
    assert summary in reported["report.md"].read_text()


def test_report_md_leaves_text_unescaped(reported):
    assert "&lt;" not in reported["report.md"].read_text()


def test_report_html_is_a_styled_page(reported):
    page = reported["report.html"].read_text()
    assert page.startswith("<!doctype html>") and "<style>" in page


def test_report_html_is_self_contained(reported):
    page = reported["report.html"].read_text()
    assert "<script" not in page and "<link" not in page and "src=" not in page


def test_report_html_shows_each_patch_check_and_the_evidence(reported):
    page = reported["report.html"].read_text()
    assert "class='applies'>applies<" in page and "does not apply" in page and "pkg/mathutil.py:1-2" in page


def test_run_json_counts_the_lm_calls_and_rounds(reported):
    run = json.loads(reported["run.json"].read_text())
    assert run["summary"]["lm_calls"] == 2 and len(run["rounds"]) == 2


# ---- the CLI ----

@pytest.fixture
def inject_lm(monkeypatch):
    def inject(lm):
        dspy.configure(lm=lm)
    return inject


def test_cli_end_to_end_with_templates(repo, tmp_path, inject_lm, capsys):
    library = tmp_path / "templates.json"
    library.write_text(
        json.dumps(
            {
                "templates": [
                    {
                        "id": "t1",
                        "name": "Wrong divisor",
                        "pattern": "an average divides by the wrong count",
                        "evidence_flow": ["find a division"],
                    }
                ]
            }
        )
    )
    inject_lm(DummyLM(answers(finding("mean divides by n - 1", ["pkg/mathutil.py::mean"], GOOD_PATCH, "t1",
                                      "the divisor is the count minus one"))))
    out = tmp_path / "report"
    rc = main(["discover", "repo", str(repo), "--templates", str(library), "--rounds", "2", "--out", str(out),
               "--backbone", "none-shipped", "--exclude", "tools/*"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert f"using plain TIDE module with 1 template(s) ({library})" in printed
    assert "[round 1] 1 new" in printed and "done: 1 finding, 1/1 patches apply" in printed
    assert f"report: {out / 'report.md'}" in printed
    md = (out / "report.md").read_text()
    assert "Template: t1 (Wrong divisor): the divisor is the count minus one" in md
    assert json.loads((out / "findings.json").read_text())["findings"][0]["used_template_id"] == "t1"
    assert (out / "report.html").is_file()


def test_cli_uses_a_saved_program(repo, tmp_path, inject_lm, capsys):
    from tide_dspy.programs import build_program, save_program

    saved = save_program(build_program("iter", "repository", max_rounds=1), tmp_path / "prog.json")
    inject_lm(DummyLM(answers()))
    rc = main(["discover", "repo", str(repo), "--program", str(saved), "--out", str(tmp_path / "o")])
    assert rc == 0
    assert f"using program {saved}" in capsys.readouterr().out
    wrong = save_program(build_program("iter", "workspace"), tmp_path / "ws.json")
    rc = main(["discover", "repo", str(repo), "--program", str(wrong), "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "compiled for the workspace setting" in capsys.readouterr().err


def test_cli_error_when_a_file_exceeds_the_window(repo, tmp_path, inject_lm, capsys):
    inject_lm(DummyLM([]))
    rc = main(["discover", "repo", str(repo), "--context-window", "2600", "--out", str(tmp_path / "o"),
               "--backbone", "none-shipped"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "tools/report.py alone needs about" in err and "a window holds" in err
    assert not (tmp_path / "o").exists()


def test_cli_error_for_a_missing_folder(tmp_path, inject_lm, capsys):
    inject_lm(DummyLM([]))
    assert main(["discover", "repo", str(tmp_path / "nope")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_unparseable_python_file_is_reported_and_skipped(repo, tmp_path):
    (repo / "pkg" / "broken.py").write_text("def oops(:\n    pass\n")
    lines = []
    result = discover_repository(repo, lm=DummyLM(answers()), backbone="none-shipped", progress=lines.append)
    assert [s["path"] for s in result.skipped] == ["pkg/broken.py"]
    assert "does not parse" in result.skipped[0]["reason"]
    assert any(line.startswith("skipped pkg/broken.py: line 1") for line in lines)
    assert len(result.instance.artifacts) == 5
    assert "- pkg/broken.py: line 1" in write_report(result, tmp_path / "o")["report.md"].read_text()


def test_scan_focus_comes_from_the_flags_else_the_backbone(monkeypatch):
    import argparse
    import dataclasses

    from tide_dspy.backbones import registry

    measured = dataclasses.replace(registry.BACKBONES["local-small"], discover_scan=6)
    monkeypatch.setitem(registry.BACKBONES, "local-small", measured)
    args = lambda scan: argparse.Namespace(scan=scan, backbone="local-small")  # noqa: E731
    assert discover_cmd.scan_focus(args(None)) == 6
    assert discover_cmd.scan_focus(args(3)) == 3
    assert discover_cmd.scan_focus(args(0)) is None  # --no-scan
    assert discover_cmd.scan_focus(argparse.Namespace(scan=None, backbone="local")) is None
