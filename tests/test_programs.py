"""build_program / save_program / load_program, including a load in a fresh process elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import dspy
import pytest
from routed_lm import RoutedLM

from tide_dspy.data.selection import Selection
from tide_dspy.discovery import TIDE, MultiAgent, SingleAgent
from tide_dspy.methods import method_of
from tide_dspy.programs import build_program, load_program, save_program
from tide_dspy.schemas import Template
from tide_dspy.templates import TemplateLibrary

TEMPLATES = [Template(id="ws-t01", name="Approval not recorded", pattern="a spoken approval never reached the system",
                      evidence_flow=["claim of approval", "system still pending", "deadline"])]


@pytest.mark.parametrize("method,cls,guidance", [
    ("tide", TIDE, "templates"), ("single", SingleAgent, "none"), ("multi", MultiAgent, "none"),
    ("iter", TIDE, "none"), ("iter-demos", TIDE, "demos"),
])
def test_build_program_per_method(method, cls, guidance):
    program = build_program(method, "workspace", templates=TEMPLATES, demos=["Solved example: ..."])
    assert type(program) is cls and program.guidance == guidance
    assert method_of(program) == method
    assert (program.templates == TEMPLATES) == (guidance == "templates")
    assert bool(program.demos) == (guidance == "demos")


def test_setting_defaults_and_overrides():
    ws = build_program("iter", "workspace")
    repo = build_program("iter", "repository")
    assert (ws.max_rounds, ws.per_round) == (10, 1)
    assert (repo.max_rounds, repo.per_round) == (3, 3)
    custom = build_program("multi", "repository", max_rounds=5, per_round=None, temperature=0.3)
    assert (custom.max_rounds, custom.per_round, custom.temperature) == (5, 3, 0.3)
    single = build_program("single", "workspace", max_findings=4, max_rounds=9)
    assert (single.max_rounds, single.per_round) == (1, 4)


def test_build_program_refuses_what_it_cannot_build(tmp_path):
    with pytest.raises(ValueError, match="tide distill"):
        build_program("tide", "workspace")
    with pytest.raises(ValueError, match="solved_demos"):
        build_program("iter-demos", "workspace")
    with pytest.raises(ValueError, match="unknown method"):
        build_program("magic", "workspace")
    path = TemplateLibrary(TEMPLATES, "workspace").save(tmp_path / "templates.json")
    assert build_program("tide", "workspace", templates=path).templates == TEMPLATES


def test_save_and_load_keep_config_state_and_extra(tmp_path):
    program = build_program("tide", "repository", templates=TEMPLATES, max_rounds=2, per_round=4)
    program.discover.signature = program.discover.signature.with_instructions("Optimized instruction.")
    path = save_program(program, tmp_path / "tide.json",
                        extra={"backbone": "local", "templates_path": "t.json", "api_key": "sk-secret"})
    text = path.read_text()
    assert "sk-secret" not in text and "api_key" not in text
    state = json.loads(text)
    assert state["tide_config"]["max_rounds"] == 2 and state["tide_extra"]["backbone"] == "local"
    assert state["tide_extra"]["dspy_version"] == dspy.__version__
    loaded = load_program(path)
    assert type(loaded) is TIDE and loaded.config() == program.config()
    assert loaded.discover.signature.instructions == "Optimized instruction."
    assert loaded.tide_extra["templates_path"] == "t.json"


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_program(tmp_path / "missing.json")
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"discover": {}}))
    with pytest.raises(ValueError, match="plain.json: no 'tide_config'"):
        load_program(plain)
    with pytest.raises(ValueError, match=r"\.json path"):
        save_program(build_program("iter", "workspace"), tmp_path / "p.pkl")


FRESH_PROCESS = textwrap.dedent("""
    import json, sys
    import dspy
    from dspy.utils.dummies import DummyLM
    import tide_dspy
    program = tide_dspy.load_program(sys.argv[1])
    instance = json.loads(open(sys.argv[2]).read())
    from tide_dspy.schemas import Instance
    instance = Instance.model_validate(instance)
    draft = {"description": "first problem", "evidence_ids": [instance.problems[0].evidence[0]],
             "patch": "", "action_id": instance.actions[0].id if instance.actions else "", "parameters": {}}
    lm = DummyLM([{"findings": [draft]}, {"findings": []}])
    with dspy.context(lm=lm):
        out = program(instance)
    sent = lm.history[0]["messages"]
    print(json.dumps({"kind": type(program).__name__, "findings": len(out.findings),
                      "instruction_sent": "Optimized instruction." in sent[0]["content"],
                      "template_sent": "ws-t01" in sent[-1]["content"]}))
""")


def test_saved_program_runs_in_a_fresh_process_with_another_cwd(tmp_path, workspace_instance):
    program = build_program("tide", "workspace", templates=TEMPLATES, max_rounds=3)
    program.discover.signature = program.discover.signature.with_instructions("Optimized instruction.")
    saved = save_program(program, tmp_path / "programs" / "tide.json", extra={"backbone": "dummy"})
    (tmp_path / "instance.json").write_text(workspace_instance.model_dump_json())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "check.py").write_text(FRESH_PROCESS)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([sys.executable, "check.py", str(saved), str(tmp_path / "instance.json")], cwd=elsewhere,
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"kind": "TIDE", "findings": 1, "instruction_sent": True, "template_sent": True}


def test_loaded_program_runs_like_the_original(workspace_instance, tmp_path):
    program = build_program("tide", "workspace", templates=TEMPLATES, max_rounds=3, per_round=2)
    loaded = load_program(save_program(program, tmp_path / "p.json"))
    outs = []
    for p in (program, loaded):
        with dspy.context(lm=RoutedLM([workspace_instance])):
            outs.append(p(workspace_instance))
    assert [f.description for f in outs[0].findings] == [f.description for f in outs[1].findings]
    assert len(outs[0].findings) == min(3 * 2, len(workspace_instance.problems))


def test_a_saved_program_is_evaluated_with_another_library_and_its_compiled_instruction(tmp_path):
    from tide_dspy.programs import build_program, save_program
    from tide_dspy.schemas import Template
    from tide_dspy.templates import TemplateLibrary
    from tide_dspy.workflows import ProgramShape, evaluation_program

    old = [Template(id="ws-t01", name="old", pattern="old pattern", evidence_flow=["a step of four words"])]
    program = build_program("tide", "workspace", templates=old)
    program.discover.signature = program.discover.signature.with_instructions("Compiled instruction.")
    path = str(save_program(program, tmp_path / "tide.json"))
    new = TemplateLibrary([Template(id="ws-t07", name="new", pattern="new pattern",
                                    evidence_flow=["another step of words"])], "workspace")
    options = dict(backbone="dummy", method=None, shape=ProgramShape(), programs=tmp_path)
    selection = Selection(setting=None, split="test")
    loaded, _, _ = evaluation_program(selection, program=path, templates=new.save(tmp_path / "t.json"), **options)
    assert [t.id for t in loaded.templates] == ["ws-t07"]
    assert loaded.discover.signature.instructions == "Compiled instruction."
    repo = TemplateLibrary([Template(id="repo-t001", name="n", pattern="p", evidence_flow=["x"])], "repository")
    with pytest.raises(ValueError, match="repository library"):
        evaluation_program(selection, program=path, templates=repo.save(tmp_path / "repo.json"), **options)
