"""Compile never ships a regression: the compiled program replaces the original only when its validation score is
strictly higher, and the command says which it kept and on how many instances."""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest
from routed_lm import FIXTURE_DATA, RoutedLM, field_block, fixture_instances

from tide_dspy.cli.main import main
from tide_dspy.optimize import split_train
from tide_dspy.programs import load_program
from tide_dspy.signatures import WorkspaceRound

PROPOSAL = "Debug all functions to find bugs nobody has reported yet."
SAVED = Path("programs/workspace/dummy/tide.json")


class TrainOnlyLM(RoutedLM):
    """Under the proposed instruction the rounds cite the gold evidence on the train part and wrong evidence on the
    held-out part; under the original instruction the other way round. So the search prefers the proposal, and
    validation shows it is worse."""

    def __init__(self, instances, held_out: set[str]):
        super().__init__(instances, instruction=PROPOSAL)
        self.held_out = held_out

    def copy(self, **kwargs):
        new = super().copy(**kwargs)
        new.held_out = self.held_out
        return new

    def route(self, message: str, system: str = ""):
        if "[[ ## findings ## ]]" not in message.split("Respond with")[-1]:
            return super().route(message, system)
        context = field_block(message, "context")
        shown = next(i for i in self.instances if all(a.id in context for a in i.artifacts))
        wrong = (PROPOSAL in system) == (shown.instance_id in self.held_out)
        return {"findings": self.findings_for(message, wrong=wrong)}


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TIDE_DATA", str(FIXTURE_DATA))
    library = tmp_path / "templates.json"
    library.write_text(json.dumps({"setting": "workspace", "templates": [
        {"id": "ws-t01", "name": "n", "pattern": "p", "evidence_flow": ["a", "b"]}]}))
    return ["compile", "--setting", "workspace", "--backbone", "dummy", "--templates", str(library), "--no-track",
            "--rounds", "2", "--opt", "init.breadth=2", "--opt", "init.depth=1"]


def saved() -> dict:
    return json.loads(SAVED.read_text())


def test_a_tie_keeps_the_original_instruction(workspace, capsys):
    """Every candidate scores the same (the answers ignore the instruction): the proposal must not replace the
    round instruction and its output rules."""
    dspy.configure(lm=RoutedLM(fixture_instances("workspace"), instruction=PROPOSAL))
    assert main(workspace) == 0
    out = capsys.readouterr().out
    before = saved()["tide_extra"]["validation"]["before"]
    assert f"compile did not improve validation ({before:.4f} → {before:.4f}); kept the original" in out
    assert "note: on 1 held-out train instance this choice is selection, not evidence" in out
    assert load_program(SAVED).discover.signature.instructions == WorkspaceRound.instructions
    assert saved()["tide_extra"]["validation"]["kept"] == "original"


def test_a_worse_compiled_program_is_not_saved_unless_keep_worse(workspace, capsys):
    train, val = split_train(fixture_instances("workspace", "train"))
    dspy.configure(lm=TrainOnlyLM(fixture_instances("workspace"), {i.instance_id for i in val}))
    assert main(workspace) == 0
    validation = saved()["tide_extra"]["validation"]
    assert validation["after"] < validation["before"] and validation["kept"] == "original"
    assert (f"compile did not improve validation ({validation['before']:.4f} → {validation['after']:.4f}); kept the "
            "original") in capsys.readouterr().out
    assert load_program(SAVED).discover.signature.instructions == WorkspaceRound.instructions

    assert main([*workspace, "--keep-worse"]) == 0
    assert "saved the compiled program anyway (--keep-worse)" in capsys.readouterr().out
    assert saved()["tide_extra"]["validation"]["kept"] == "compiled"
    assert load_program(SAVED).discover.signature.instructions == PROPOSAL


def test_a_better_compiled_program_is_saved(workspace, capsys):
    dspy.configure(lm=RoutedLM(fixture_instances("workspace"), instruction=PROPOSAL, gated=True))
    assert main(workspace) == 0
    assert "compile improved validation" in capsys.readouterr().out
    assert load_program(SAVED).discover.signature.instructions == PROPOSAL
    provenance = json.loads((SAVED.parent / "provenance.json").read_text())["tide.json"]
    assert provenance["kept"] == "compiled" and provenance["val_after"] > provenance["val_before"]
