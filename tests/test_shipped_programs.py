"""Every shipped compiled program (programs/<setting>/<backbone>/tide.json) loads in a fresh process with
`load_program`, and its provenance names the train instances it was compiled on and where it was measured.

The default backbone's repository program must be among them: it is the one `tide discover repo` loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = sorted((ROOT / "programs").glob("*/*/tide.json"))
DEFAULT_REPOSITORY = ROOT / "programs" / "repository" / "local" / "tide.json"

LOAD = """
import json, sys
from tide_dspy.programs import load_program

program = load_program(sys.argv[1])
print(json.dumps({"kind": type(program).__name__, "setting": program.setting.name,
                  "scan": program.scanner is not None,
                  "instructions": {n: p.signature.instructions for n, p in program.named_predictors()},
                  "train_ids": program.tide_extra.get("train_ids")}))
"""


def _label(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _provenance(path: Path) -> dict:
    return json.loads((path.parent / "provenance.json").read_text())["tide.json"]


def test_the_default_backbone_ships_a_compiled_repository_program():
    assert DEFAULT_REPOSITORY in PROGRAMS


@pytest.mark.parametrize("path", PROGRAMS, ids=_label)
def test_a_shipped_program_loads_in_a_fresh_process(path, tmp_path):
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([sys.executable, "-c", LOAD, str(path)], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["kind"] == "TIDE" and loaded["setting"] == path.parent.parent.name
    assert all(text.strip() for text in loaded["instructions"].values())
    assert loaded["train_ids"] == _provenance(path)["train_ids"]


@pytest.mark.parametrize("path", PROGRAMS, ids=_label)
def test_a_shipped_program_names_its_train_and_validation_instances(path):
    record = _provenance(path)
    assert record["command"].startswith("tide compile") and "--split train" in record["command"]
    assert record["train_ids"] and record["val_ids"]
    assert not set(record["train_ids"]) & set(record["val_ids"])


def test_the_default_repository_program_was_measured_on_held_out_test_instances():
    record = _provenance(DEFAULT_REPOSITORY)
    assert record["heldout"], "no held-out result recorded (run.py table1 --compiled or heldout_scan.py writes it)"
    compiled_on = set(record["train_ids"]) | set(record["val_ids"])
    for run, result in record["heldout"].items():
        assert result["split"] == "test", run
        assert result["instances"] and not compiled_on & set(result["instances"]), run
        methods = result["methods"]
        assert {"tide", "tide-compiled"} <= set(methods), run
        if not result.get("scan_only"):  # a table1 run: both programs beside the three floors
            assert {"random", "first-listed", "lexical-join"} <= set(methods), run
            assert result["highest_floor"] in {"random", "first-listed", "lexical-join"}, run


# The fields whose descriptions hold the output rules of a round: cite by handle; one library action or a diff.
RULE_FIELDS = {"workspace": ("evidence_ids", "action"), "repository": ("evidence_ids", "patch")}


def round_prompt(program, adapter) -> str:
    """The system prompt of `program`'s first round on a fixture instance of its setting, as `adapter` writes it:
    the program's own signature (its compiled instruction and demos) grounded in the instance, as a round sends."""
    from routed_lm import fixture_instances

    setting = program.setting
    instance = fixture_instances(setting.name)[0]
    view = program.view(instance)
    signature = setting.grounded_signature(program.discover.signature, instance, view, program.per_round,
                                           program.max_evidence)
    inputs = setting.round_inputs(instance, view, program.guidance_text(), [], program.per_round)
    return adapter.format(signature, demos=program.discover.demos, inputs=inputs)[0]["content"]


def output_rules(setting) -> list[str]:
    return [setting.draft_type.model_fields[f].description for f in RULE_FIELDS[setting.name]]


@pytest.mark.parametrize("adapter", ["ChatAdapter", "JSONAdapter"])
@pytest.mark.parametrize("path", PROGRAMS, ids=_label)
def test_a_shipped_programs_round_prompt_carries_the_output_rules(path, adapter):
    import dspy

    from tide_dspy.programs import load_program

    program = load_program(path)
    prompt = round_prompt(program, getattr(dspy, adapter)())
    for rule in output_rules(program.setting):
        assert json.dumps(rule)[1:-1] in prompt, rule


@pytest.mark.parametrize("setting", ["workspace", "repository"])
def test_the_output_rules_survive_an_instruction_that_lost_them(setting):
    import dspy

    from tide_dspy.programs import build_program

    program = build_program("iter", setting)
    program.discover.signature = program.discover.signature.with_instructions(
        "Debug all functions to find bugs nobody has reported yet.")
    prompt = round_prompt(program, dspy.ChatAdapter())
    assert all(json.dumps(rule)[1:-1] in prompt for rule in output_rules(program.setting))
