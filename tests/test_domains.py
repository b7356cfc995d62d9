"""Domain facts that live on the Setting (tide_dspy.domains), one behaviour per test."""

from __future__ import annotations

import copy
import inspect
import json

import pytest

from tide_dspy.data.records import detect_setting, instance_from_record
from tide_dspy.discovery import TIDE, FirstListed
from tide_dspy.domains import REPOSITORY, WORKSPACE, RepositorySetting, Setting, get_setting, setting_of_gold
from tide_dspy.metrics.judges import LLMJudge, ProxyJudge
from tide_dspy.product.report import template_label
from tide_dspy.product.result import DiscoverResult
from tide_dspy.schemas import Action, Artifact, ChosenAction, Finding, GoldProblem, Instance
from tide_dspy.templates import TemplateLibrary


def _result(setting) -> DiscoverResult:
    kind = "email" if setting is WORKSPACE else "function"
    instance = Instance(instance_id="i", setting=setting.name, artifacts=[Artifact(id="a", kind=kind)])
    return DiscoverResult(setting=setting.name, target="t", instance=instance,
                          findings=[Finding(description="d", evidence=["a"])], program_source="p")


def test_get_setting_returns_a_setting_given_as_is():
    assert get_setting(REPOSITORY) is REPOSITORY and get_setting("workspace") is WORKSPACE


def test_gold_with_a_patch_is_read_as_the_repository_setting():
    patched = GoldProblem(problem_id="p", description="d", evidence=["a"], patch="diff")
    plain = GoldProblem(problem_id="q", description="d", evidence=["a"])
    assert setting_of_gold([plain, patched]) is REPOSITORY
    assert setting_of_gold([plain]) is WORKSPACE


def test_resolution_of_reads_the_settings_own_field():
    action = ChosenAction(action_id="act", type="email")
    finding = Finding(description="d", evidence=["a"], action=action, patch="")
    assert WORKSPACE.resolution_of(finding) is action
    assert REPOSITORY.resolution_of(finding) is None  # an empty patch is no patch


def test_records_name_their_setting_by_their_fields():
    assert detect_setting({"candidates": []}) == REPOSITORY.name
    assert detect_setting({"artifacts": []}) == WORKSPACE.name


def test_only_repository_findings_without_a_template_are_called_template_novel():
    finding = Finding(description="d", evidence=["a"])
    assert template_label(_result(REPOSITORY), finding) == "none cited (template-novel)"
    assert template_label(_result(WORKSPACE), finding) == "none cited"


def test_only_the_repository_summary_counts_applying_patches():
    assert "patches apply" in _result(REPOSITORY).summary_line()
    assert "patches apply" not in _result(WORKSPACE).summary_line()


def test_a_setting_missing_an_abstract_method_cannot_be_instantiated():
    class Incomplete(Setting):  # every class attribute, but no rendering or checking
        name, round_signature, scan_signature, distill_signature = "x", None, None, None
        draft_type, max_evidence, typical_evidence, rounds, per_round = None, 1, 1, 1, 1
        tuning_ranges, resolution_kind, template_id_prefix = {}, "patch", ("x-t", 2)

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()


def test_a_setting_missing_a_class_attribute_cannot_be_instantiated():
    methods = {m: vars(RepositorySetting)[m] for m in Setting.__abstractmethods__}
    facts = {a: getattr(REPOSITORY, a) for a in Setting.REQUIRED if a != "rounds"}
    no_loop_shape = type("NoLoopShape", (Setting,), {**methods, **facts})
    with pytest.raises(TypeError, match="does not define rounds"):
        no_loop_shape()


def test_a_copied_program_shares_its_setting():
    assert copy.deepcopy(WORKSPACE) is WORKSPACE and copy.copy(REPOSITORY) is REPOSITORY


def test_tide_runs_the_workspace_loop_shape_by_default():
    program = TIDE("workspace")
    assert (program.max_rounds, program.per_round) == (10, 1)


def test_tide_runs_the_repository_loop_shape_by_default():
    program = TIDE("repository")
    assert (program.max_rounds, program.per_round) == (3, 3)


def test_a_program_resolves_its_setting_once():
    program = TIDE(REPOSITORY.name)
    assert program.setting is REPOSITORY and program.scanner is None
    program.use_scan(4)
    assert program.scanner.setting is REPOSITORY


def test_the_generator_offers_the_action_types_of_the_default_library():
    from tide_dspy.data.workspace_generator import ActionDraft
    from tide_dspy.product.library import default_actions

    offered = ActionDraft.model_fields["type"].description.removeprefix("one of: ").split(", ")
    assert sorted(offered) == sorted(a.type for a in default_actions()) == sorted(WORKSPACE.action_types)


def test_each_setting_converts_its_own_record_format():
    record = {"instance_id": "r", "split": "test", "repo": "o/r", "anchor_commit": "abc", "problems": [],
              "candidates": [{"id": "a.py::f", "path": "a.py", "qualname": "f", "start_line": 1, "end_line": 2,
                              "code": "def f(): pass"}]}
    instance = instance_from_record(record)
    assert instance.setting == REPOSITORY.name and instance.artifacts[0].kind == "function"


def test_a_record_with_the_artifact_fields_of_two_settings_is_refused():
    with pytest.raises(ValueError, match="cannot tell the setting"):
        detect_setting({"artifacts": [], "candidates": []})


def test_a_report_names_evidence_in_its_settings_words():
    function = Artifact(id="a.py::f", kind="function", payload={"path": "a.py", "start_line": 3, "end_line": 9})
    email = Artifact(id="e1", kind="email", payload={"subject": "Budget"})
    assert REPOSITORY.evidence_label(function) == "a.py:3-9 (a.py::f)"
    assert WORKSPACE.evidence_label(email, "inbox.mbox") == f'e1 email "{email.title}" (inbox.mbox)'


def _with_action(setting) -> Instance:
    return Instance(instance_id="i", setting=setting.name, artifacts=[Artifact(id="a", kind="document")],
                    actions=[Action(id="act_1", type="send_email", description="d")])


def test_a_chance_floor_takes_the_first_action_where_an_action_resolves():
    finding = FirstListed(WORKSPACE)(_with_action(WORKSPACE)).findings[0]
    assert finding.action.action_id == "act_1"


def test_a_chance_floor_cites_no_action_where_a_patch_resolves():
    finding = FirstListed(REPOSITORY)(_with_action(REPOSITORY)).findings[0]
    assert finding.action is None and not finding.patch


def test_the_judges_require_a_setting():
    gold = GoldProblem(problem_id="p", description="d", evidence=["a"])
    with pytest.raises(TypeError, match="setting"):
        ProxyJudge()(gold, Finding(description="d", evidence=["a"]))
    assert inspect.signature(LLMJudge.forward).parameters["setting"].default is inspect.Parameter.empty


def test_a_record_naming_an_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="unknown setting 'calendar'"):
        instance_from_record({"instance_id": "i", "setting": "calendar", "artifacts": []})


def test_a_template_library_naming_an_unknown_setting_is_refused(tmp_path):
    path = tmp_path / "templates.json"
    path.write_text(json.dumps({"setting": "calendar", "templates": []}))
    with pytest.raises(ValueError, match="'calendar' is not a setting"):
        TemplateLibrary.load(path)
