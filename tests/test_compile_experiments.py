"""What compile buys, as experiments/ measures it: run.py table1 puts a compiled program beside the uncompiled TIDE
and the three floors, and compare.py reads plain and shuffled held-out runs into one table and figure."""

from __future__ import annotations

import csv
import json

import dspy
import pytest
from routed_lm import FIXTURE_DATA, RoutedLM, fixture_instances

from scripts import load_script
from tide_dspy.programs import build_program, save_program
from tide_dspy.schemas import Template
from tide_dspy.templates import TemplateLibrary

COMPILED_INSTRUCTION = "Read every candidate twice before you cite it."
TEMPLATES = [Template(id="repo-t001", name="off by one", pattern="a bound one step off", evidence_flow=["a", "b"])]


@pytest.fixture
def setup(tmp_path, monkeypatch):
    library = TemplateLibrary(TEMPLATES, "repository").save(tmp_path / "templates.json")
    program = build_program("tide", "repository", templates=TEMPLATES, max_rounds=5, per_round=5)
    program.discover.signature = program.discover.signature.with_instructions(COMPILED_INSTRUCTION)
    compiled = save_program(program, tmp_path / "tide.json")
    # Gated: findings cite gold evidence only under the compiled instruction.
    dspy.configure(lm=RoutedLM(fixture_instances("repository"), instruction=COMPILED_INSTRUCTION, gated=True))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("TIDE_DATA", str(FIXTURE_DATA))
    return library, compiled


def table1(run, tmp_path, library, compiled, *extra):
    out = tmp_path / ("out" + "".join(extra).replace("-", ""))
    assert run.main(["table1", "--setting", "repository", "--split", "test", "--judge", "proxy", "--templates",
                     str(library), "--rounds", "2", "--per-round", "1", "--methods", "tide", "tide-compiled",
                     "--compiled", str(compiled), "--out", str(out), *extra]) == 0
    return out, {r["method"]: r for r in csv.DictReader((out / "table1.csv").open())}


def test_table1_runs_the_compiled_program_beside_tide_and_the_three_floors(tmp_path, setup):
    run = load_script("run")
    out, rows = table1(run, tmp_path, *setup)
    assert list(rows) == ["random", "first-listed", "lexical-join", "tfidf", "tide", "tide-compiled"]
    assert float(rows["tide-compiled"]["retrieval_f1"]) > float(rows["tide"]["retrieval_f1"]) == 0
    config = json.loads((out / "raw" / "tide-compiled" / "config.json").read_text())["program"]
    assert (config["max_rounds"], config["per_round"]) == (2, 1)  # shaped as this run's tide, not as saved
    assert "Highest chance floor:" in (out / "table1.md").read_text()
    assert json.loads((out / "meta-table1.json").read_text())["split"] == "test"
    heldout = json.loads((tmp_path / "provenance.json").read_text())["tide.json"]["heldout"][out.name]
    assert heldout["split"] == "test" and heldout["instances"] == ["tiny__repo__multi-01"]
    assert heldout["methods"]["tide-compiled"]["retrieval_f1"] == float(rows["tide-compiled"]["retrieval_f1"])
    assert set(heldout["methods"]) == set(rows) and heldout["highest_floor"] in ("random", "first-listed",
                                                                                 "lexical-join")


def test_compiled_needs_its_method_and_its_library(tmp_path, setup):
    run = load_script("run")
    library, compiled = setup
    with pytest.raises(SystemExit):
        run.main(["table1", "--setting", "repository", "--compiled", str(compiled), "--methods", "tide"])
    other = TemplateLibrary([Template(id="repo-t009", name="n", pattern="p", evidence_flow=["a", "b"])],
                            "repository").save(tmp_path / "other.json")
    with pytest.raises(SystemExit, match="pass the library it was compiled with"):
        table1(run, tmp_path, other, compiled)


def test_compare_reads_plain_and_shuffled_held_out_runs_into_one_picture(tmp_path, setup):
    run, compare = load_script("run"), load_script("compare")
    plain, _ = table1(run, tmp_path, *setup)
    shuffled, _ = table1(run, tmp_path, *setup, "--shuffle-context", "1")
    summary = tmp_path / "summary"
    compare.main(["--out", str(summary), "--goal", "0", f"plain={plain}", f"shuffled={shuffled}"])
    table = (summary / "compare.md").read_text()
    for label in ("plain", "shuffled"):
        for method in ("random", "first-listed", "lexical-join", "tide", "tide-compiled"):
            assert f"| {label} | {method} |" in table
    assert (summary / "compare.png").stat().st_size > 0

    meta = json.loads((plain / "meta-table1.json").read_text())
    (plain / "meta-table1.json").write_text(json.dumps({**meta, "split": "train"}))
    with pytest.raises(SystemExit, match="held-out"):
        compare.main(["--out", str(summary), f"plain={plain}"])
