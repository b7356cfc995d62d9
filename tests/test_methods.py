"""The method registry (tide_dspy.methods): one definition per method name, read by `tide evaluate`, `tide compile`
and experiments/run.py alike."""

from __future__ import annotations

import pytest
from routed_lm import FIXTURE_DATA

from scripts import load_script
from tide_dspy.cli.common import selection_of, shape_of
from tide_dspy.cli.main import build_parser, main
from tide_dspy.discovery import SingleAgent
from tide_dspy.domains import SETTINGS
from tide_dspy.methods import DEMOS, METHODS, Method, get_method, method_of
from tide_dspy.schemas import Template
from tide_dspy.templates import TemplateLibrary
from tide_dspy.workflows import ProgramShape, build_method, evaluation_program

PREFIX = {"workspace": "ws-t", "repository": "repo-t"}


@pytest.fixture
def libraries(tmp_path) -> dict[str, str]:
    paths = {}
    for name in SETTINGS:
        templates = [Template(id=f"{PREFIX[name]}0{i}", name=f"pattern {i}", pattern=f"shape {i}", evidence_flow=["x"])
                     for i in (1, 2)]
        paths[name] = str(TemplateLibrary(templates, name).save(tmp_path / f"{name}.json"))
    return paths


def evaluate_builds(setting: str, method: str, library: str, *extra: str):
    """The program `tide evaluate --method METHOD` builds with these options (the CLI's own parsing)."""
    args = build_parser().parse_args(["evaluate", "--setting", setting, "--method", method, "--data",
                                      str(FIXTURE_DATA / setting), "--templates", library, *extra])
    built, _, _ = evaluation_program(selection_of(args), backbone=args.backbone, program=None, method=args.method,
                                     shape=shape_of(args), templates=args.templates, programs=args.programs)
    return built


def run_py_builds(setting: str, method: str, library: str, *extra: str):
    """The program experiments/run.py builds for METHOD with these options."""
    run = load_script("run")
    args = run.parse_args(["table1", "--setting", setting, "--data", str(FIXTURE_DATA / setting), "--templates",
                           library, *extra])
    return run.make_program(method, args, run.template_library(args))


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("method", sorted(METHODS))
def test_tide_evaluate_and_run_py_build_the_same_program(method, setting, libraries):
    evaluated = evaluate_builds(setting, method, libraries[setting])
    experimented = run_py_builds(setting, method, libraries[setting])
    assert method_of(evaluated) == method_of(experimented) == method
    assert evaluated.dump_state() == experimented.dump_state()


@pytest.mark.parametrize("extra", [[], ["--rounds", "4", "--per-round", "2"]])
def test_both_build_the_same_program_at_another_shape_too(extra, libraries):
    for method in METHODS:
        assert (evaluate_builds("repository", method, libraries["repository"], *extra).dump_state()
                == run_py_builds("repository", method, libraries["repository"], *extra).dump_state()), method


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_singles_quota_is_tides_finding_budget(setting):
    s = SETTINGS[setting]
    assert build_method(s, "single", ProgramShape()).per_round == s.rounds * s.per_round
    assert build_method(s, "single", ProgramShape(rounds=4, per_round=2)).per_round == 8


def test_iter_demos_shows_the_registrys_number_of_solved_examples():
    program = build_method(SETTINGS["workspace"], "iter-demos", ProgramShape(), data=str(FIXTURE_DATA / "workspace"))
    assert len(program.demos) == DEMOS == get_method("iter-demos").demos


def test_each_method_is_one_class_and_guidance_so_a_saved_program_names_its_method():
    pairs = [(m.program, m.guidance) for m in METHODS.values()]
    assert len(set(pairs)) == len(pairs)


def test_an_unknown_method_is_an_error_that_lists_the_known_ones(capsys):
    with pytest.raises(ValueError, match="unknown method 'magic'; the methods are tide, single, multi"):
        get_method("magic")
    with pytest.raises(SystemExit):
        main(["evaluate", "--setting", "workspace", "--method", "magic"])
    err = capsys.readouterr().err
    assert "invalid choice: 'magic'" in err and all(f"'{name}'" in err for name in METHODS)
    with pytest.raises(SystemExit):
        load_script("run").parse_args(["table1", "--setting", "workspace", "--methods", "magic"])


def test_adding_a_method_is_one_entry(monkeypatch, libraries):
    """The entry docs/program.md shows: Single with the templates in its prompt, built by every entry point."""
    entry = Method("single-templates", "SingleAgent", guidance="templates",
                   summary="one call that returns every finding at once, guided by the templates")
    monkeypatch.setitem(METHODS, entry.name, entry)
    evaluated = evaluate_builds("workspace", "single-templates", libraries["workspace"])
    assert type(evaluated) is SingleAgent and [t.id for t in evaluated.templates] == ["ws-t01", "ws-t02"]
    assert method_of(evaluated) == "single-templates"
    experimented = run_py_builds("workspace", "single-templates", libraries["workspace"])
    assert experimented.dump_state() == evaluated.dump_state()


def test_a_method_is_a_floor_exactly_when_its_program_calls_no_model():
    from tide_dspy.discovery import ChanceFloor

    assert {name for name, m in METHODS.items() if m.floor} == {
        name for name, m in METHODS.items() if issubclass(m.program, ChanceFloor)}


def test_a_chance_floor_holds_no_predictor_to_save_hash_or_show_an_optimizer(tmp_path):
    import json

    from tide_dspy.discovery import LexicalJoin
    from tide_dspy.programs import build_program, load_program, save_program

    floor = build_program("lexical-join", "repository", max_rounds=2, max_evidence=3)
    assert floor.named_predictors() == [] and set(floor.dump_state()) == {"tide_config"}
    path = save_program(floor, tmp_path / "floor.json")
    assert set(json.loads(path.read_text())) == {"tide_config", "metadata", "tide_extra"}
    loaded = load_program(path)
    assert type(loaded) is LexicalJoin and loaded.config() == floor.config() and loaded.max_rounds == 2
