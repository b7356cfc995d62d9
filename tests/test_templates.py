"""Template distillation and the template library, driven by DummyLM."""

from __future__ import annotations

import json

import dspy
import pytest
from dspy.utils.dummies import DummyLM
from routed_lm import RoutedLM, fixture_instances

from tide_dspy.domains import get_setting
from tide_dspy.schemas import Template
from tide_dspy.templates import (
    Distiller,
    TemplateLibrary,
    distill_library,
    distill_one,
    solved_demos,
    template_id,
)


def tpl(i: int, name: str, pattern: str, source: str | None = None) -> Template:
    return Template(id=template_id("workspace", i), name=name, pattern=pattern, evidence_flow=["a", "b"],
                    setting="workspace", source_case=source or f"case-{i}")


def test_template_ids_follow_the_setting_prefix_and_widen_when_needed():
    assert template_id("workspace", 1) == "ws-t01"
    assert template_id("repository", 7) == "repo-t007"
    assert template_id("workspace", 7, total=120) == "ws-t007"


def test_distiller_is_one_predictor_on_the_settings_distill_signature(workspace_instance):
    distiller = Distiller("workspace")
    assert [type(p).__name__ for p in distiller.predictors()] == ["Predict"]
    assert distiller.distill.signature.instructions == get_setting("workspace").distill_signature.instructions
    lm = DummyLM([{"template": {"name": "n", "pattern": "p", "evidence_flow": ["x"]}}])
    problem = workspace_instance.problems[0]
    with dspy.context(lm=lm):
        out = distiller(workspace_instance, problem)
    assert out.template.name == "n"
    sent = lm.history[0]["messages"][-1]["content"]
    assert problem.description in sent
    assert all(e in sent for e in problem.evidence)  # the case context is the evidence artifacts


def test_distill_library_makes_one_template_per_solved_problem():
    instances = fixture_instances("workspace", "train")
    lm = RoutedLM(instances)
    library = distill_library(instances, "workspace", lm=lm, progress=False)
    n_problems = sum(len(i.problems) for i in instances)
    assert library.meta["lm_usage"]["calls"] == n_problems  # every draft passes the check the first time
    assert library.meta["cases"] == library.meta["passed"] == n_problems and library.meta["failures"] == []
    assert len(library) == n_problems - library.meta["merges"]
    assert library.ids[0] == "ws-t01"
    assert {t.source_case for t in library} <= {p.problem_id for i in instances for p in i.problems}
    assert all(t.setting == "workspace" and t.evidence_flow for t in library)
    checks = library.meta["abstraction"]
    assert checks["mean_score"] == checks["draft_mean_score"] == 1.0
    assert set(checks["templates"]) == set(library.ids) and all(c["source_keys"] for c in checks["templates"].values())


LEAKY = {"template": {"name": "Priya Anand never e-signed", "pattern": "PO-58-3301 waits on the controller until 4/17",
                      "evidence_flow": ["find the request still pending in the tracker",
                                        "join it with the email saying it was approved"]}}
ABSTRACT = {"template": {"name": "Verbal approval never recorded",
                         "pattern": "an approver said yes aloud but the system of record still waits on a signature",
                         "evidence_flow": ["find a request still pending in the tracker",
                                           "join it with a message saying it was approved"]}}
EMPTY = {"template": {"name": "", "pattern": "", "evidence_flow": []}}


def test_refine_retries_with_the_leaked_tokens_as_hint_until_the_check_passes(workspace_instance):
    problem = workspace_instance.problems[0]  # the PO-58-3301 case
    lm = DummyLM([LEAKY, ABSTRACT])
    outcome = distill_one(Distiller("workspace"), workspace_instance, problem, max_attempts=3, lm=lm)
    assert outcome.passed and outcome.draft.name == "Verbal approval never recorded"
    assert outcome.scores == [0.2, 1.0]  # four leaks, then none; no third attempt
    first, second = (e["messages"][-1]["content"] for e in outcome.history)
    assert "hint_" not in first
    hint = second.split("[[ ## hint_ ## ]]")[1]
    assert all(token in hint for token in ("'Priya'", "'Anand'", "'PO-58-3301'", "'4/17'"))


def test_templates_that_never_pass_are_dropped_and_counted(workspace_instance):
    instance = workspace_instance.model_copy(update={"problems": workspace_instance.problems[:3]})
    # case 1: leaky, leaky, abstract (kept); case 2: leaky three times (dropped); case 3: empty three times.
    lm = DummyLM([LEAKY, LEAKY, ABSTRACT, LEAKY, LEAKY, LEAKY, EMPTY, EMPTY, EMPTY])
    library = distill_library([instance], "workspace", lm=lm, max_attempts=3, progress=False)
    assert library.meta["lm_usage"]["calls"] == 9
    assert [t.source_case for t in library] == [instance.problems[0].problem_id]
    assert (library.meta["passed"], library.meta["failed"]) == (1, 2)
    dropped, empty = library.meta["failures"]
    assert dropped["source_case"] == instance.problems[1].problem_id and dropped["score"] < 1
    assert "4/17" in {lk["token"] for lk in dropped["leaks"]}  # a date of that case too (the April 17 meetings)
    assert empty == {"source_case": instance.problems[2].problem_id, "error": "empty name or pattern"}
    assert library.meta["abstraction"]["mean_score"] == 1.0
    assert library.meta["abstraction"]["draft_mean_score"] < 1.0


def test_distill_library_refuses_a_split_without_solved_problems(workspace_instance):
    unsolved = workspace_instance.model_copy(update={"problems": []})
    with pytest.raises(ValueError, match="no solved workspace problems"):
        distill_library([unsolved], "workspace", lm=DummyLM([]), progress=False)


def test_merge_near_duplicates_on_name_and_pattern():
    library = TemplateLibrary([
        tpl(1, "Verbal approval not recorded", "an approval given aloud never reached the system of record"),
        tpl(2, "Verbal approval not recorded", "an approval given aloud never reached the system of record."),
        tpl(3, "Approval not recorded verbal", "an approval given aloud never reached the record system of"),
        tpl(4, "Verbal approval not recorded", "a contract expires before the event that depends on it"),
        tpl(5, "Stale metrics in briefing", "a leadership briefing double counts a metric"),
        # Same meaning in more words: the token-set ratio ignores the extra ones.
        tpl(6, "Stale metrics in the leadership briefing", "a leadership briefing double counts a metric that "
                                                            "was revised since"),
    ], "workspace")
    assert library.merge_near_duplicates() == 3
    assert library.ids == ["ws-t01", "ws-t04", "ws-t05"]
    assert [m["id"] for m in library.meta["merged"]["ws-t01"]] == ["ws-t02", "ws-t03"]
    assert [m["id"] for m in library.meta["merged"]["ws-t05"]] == ["ws-t06"]
    assert library.merge_near_duplicates() == 0


def test_cap_keeps_the_most_general_templates_in_library_order():
    library = TemplateLibrary([tpl(i, f"name {i}", f"pattern {i}") for i in range(1, 6)], "workspace",
                              {"merged": {"ws-t04": [{"id": "ws-t09", "source_case": "c"}]}})
    assert library.cap(10) == []
    assert library.cap(3) == ["ws-t03", "ws-t05"]
    assert library.ids == ["ws-t01", "ws-t02", "ws-t04"]
    with pytest.raises(ValueError, match="max_templates"):
        library.cap(0)


def test_distill_library_caps_the_library(workspace_instance):
    instance = workspace_instance.model_copy(update={"problems": workspace_instance.problems[:3]})
    lm = RoutedLM([instance])
    library = distill_library([instance], "workspace", lm=lm, max_templates=2, progress=False)
    assert len(library) == 2 and library.meta["capped"] == ["ws-t03"]
    assert set(library.meta["abstraction"]["templates"]) == {"ws-t01", "ws-t02"}


def test_library_round_trips_through_json(tmp_path):
    library = TemplateLibrary([tpl(1, "A", "pattern a"), tpl(2, "B", "pattern b")], "workspace", {"backbone": "x"})
    path = library.save(tmp_path / "sub" / "templates.json")
    loaded = TemplateLibrary.load(path)
    assert loaded.templates == library.templates
    assert loaded.setting == "workspace" and loaded.meta == {"backbone": "x"}
    saved = json.loads(path.read_text())["templates"][0]
    assert set(saved) >= {"id", "name", "pattern", "evidence_flow", "source_case"}
    # A bare list of templates is accepted too.
    (tmp_path / "bare.json").write_text(json.dumps([t.model_dump() for t in library.templates]))
    assert TemplateLibrary.load(tmp_path / "bare.json").ids == ["ws-t01", "ws-t02"]


def test_bad_library_files_get_errors_naming_file_and_field(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match="tide distill"):
        TemplateLibrary.load(missing)
    broken = tmp_path / "broken.json"
    broken.write_text('{"templates": [\n{"id": 1,,}]}')
    with pytest.raises(ValueError, match=r"broken.json: line 2"):
        TemplateLibrary.load(broken)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"templates": [tpl(1, "A", "p").model_dump(), {"id": "x", "name": "n", "pattern": "p"}]}))
    with pytest.raises(ValueError, match=r"bad.json: templates\[1\]\.evidence_flow"):
        TemplateLibrary.load(bad)
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps({"templates": [tpl(1, "A", "p").model_dump(), tpl(1, "B", "q").model_dump()]}))
    with pytest.raises(ValueError, match="duplicate template ids"):
        TemplateLibrary.load(dup)


def test_subset_is_seeded_ordered_and_bounded():
    library = TemplateLibrary([tpl(i, f"name {i}", f"pattern {i}") for i in range(1, 11)], "workspace")
    a, b = library.subset(4, seed=3), library.subset(4, seed=3)
    assert a.ids == b.ids and len(a) == 4
    assert a.ids == sorted(a.ids)  # library order is kept
    assert library.subset(4, seed=4).ids != a.ids or library.subset(4, seed=5).ids != a.ids
    assert library.subset(50).ids == library.ids
    assert len(library.subset(0)) == 0
    with pytest.raises(ValueError):
        library.subset(-1)


def test_solved_demos_are_rendered_round_robin_over_instances():
    instances = fixture_instances("workspace", "train")
    demos = solved_demos(instances, "workspace", 3)
    s = get_setting("workspace")
    a, b = instances
    assert demos == [s.render_demo(a, a.problems[0]), s.render_demo(b, b.problems[0]), s.render_demo(a, a.problems[1])]
    assert solved_demos(instances, "workspace", 0) == []


def test_repository_cases_distill_to_repo_ids(repository_instance):
    lm = RoutedLM([repository_instance])
    library = distill_library([repository_instance], "repository", lm=lm, progress=False, merge_threshold=None)
    assert library.ids[0] == "repo-t001" and len(library) == len(repository_instance.problems)
    outcome = distill_one(Distiller("repository"), repository_instance, repository_instance.problems[0], lm=lm)
    sent = outcome.history[0]["messages"][-1]["content"]
    assert repository_instance.problems[0].patch.splitlines()[0] in sent  # the resolution is the gold patch
