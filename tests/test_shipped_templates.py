"""Every shipped template library is abstract: no template carries a specific token of its source case.

Each library stores, per template, the specific tokens of its source case (meta.abstraction.templates[id].
source_keys); the tokens are also recomputed from the case itself, in the shipped set the library was distilled
from, and copied passages are checked as well. A library that regresses fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SHIPPED_DATA

from tide_dspy.abstraction import case_text, check, source_keys
from tide_dspy.templates import TemplateLibrary

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = sorted((ROOT / "programs").glob("*/*/templates.json"))


def _label(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_there_are_shipped_libraries():
    assert {p.parent.parent.name for p in LIBRARIES} == {"workspace", "repository"}


@pytest.mark.parametrize("path", LIBRARIES, ids=_label)
def test_shipped_library_carries_no_specific_token_of_its_source_cases(path):
    library = TemplateLibrary.load(path)
    assert len(library) > 0, f"{_label(path)} is empty"
    checks = library.meta.get("abstraction", {}).get("templates", {})
    for t in library:
        assert t.id in checks and checks[t.id]["source_keys"], \
            f"{_label(path)}: {t.id} has no stored source tokens; re-distill with `tide distill`"
        report = check(t.name, t.pattern, t.evidence_flow, keys=set(checks[t.id]["source_keys"]))
        assert report.passed, f"{_label(path)}: {t.id} carries {[str(lk) for lk in report.leaks]}"
        assert checks[t.id]["score"] == 1.0 and checks[t.id]["leaks"] == []
    assert library.meta["abstraction"]["mean_score"] == 1.0


@pytest.mark.parametrize("path", LIBRARIES, ids=_label)
def test_shipped_library_against_its_source_cases_in_the_data(path):
    from tide_dspy.data.sets import load_benchmark
    from tide_dspy.domains import get_setting
    from tide_dspy.templates import solved_cases
    from tide_dspy.util.jsonio import read_json_file

    library = TemplateLibrary.load(path)
    setting = library.setting
    # The set version the library was distilled from; a library whose provenance names none came from v1.
    made = read_json_file(path.parent / "provenance.json", "").get("templates.json", {})
    version = (made.get("data") or {}).get("version") or "v1"
    wanted = {t.source_case for t in library}
    cases = {}
    train = load_benchmark(setting, split="train", version=version, data=SHIPPED_DATA / setting).instances
    for instance in train:
        for inst, problem in solved_cases([instance]):
            if problem.problem_id in wanted:
                cases[problem.problem_id] = case_text(get_setting(setting).solved_case(inst, problem))
    for t in library:
        assert t.source_case in cases, f"{_label(path)}: {t.id}'s source case {t.source_case} is not in the data"
        source = cases[t.source_case]
        report = check(t.name, t.pattern, t.evidence_flow, source=source)
        assert report.passed, f"{_label(path)}: {t.id} carries {[str(lk) for lk in report.leaks]}"
        stored = set(library.meta["abstraction"]["templates"][t.id]["source_keys"])
        assert stored == source_keys(source), f"{_label(path)}: {t.id}'s stored source tokens are stale"


PROGRAMS = sorted((ROOT / "programs").glob("*/*/*.json"))


@pytest.mark.parametrize("path", [p for p in PROGRAMS if p.name not in ("templates.json", "provenance.json",
                                                                         "tune.json")], ids=_label)
def test_templates_inside_shipped_programs_are_those_of_the_shipped_library(path):
    import json

    embedded = (json.loads(path.read_text()).get("tide_config") or {}).get("templates") or []
    library_path = path.parent / "templates.json"
    shipped = {t.id: t.model_dump() for t in TemplateLibrary.load(library_path)} if library_path.exists() else {}
    for raw in embedded:
        assert shipped.get(raw["id"]) == raw, (f"{_label(path)} embeds template {raw['id']}, which is not the "
                                               f"checked one of {_label(library_path)}; recompile the program")
