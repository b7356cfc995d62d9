"""Every shipped optimizer compiles TIDE at the paper's settings (T=10, k=1 on workspaces; T=3, k=3 on repositories)
on a hosted backbone, gpt-5-mini, pointed at the provider simulator; the saved program loads with `load_program` in
a fresh process, from another folder, and runs.

The simulator's findings cite the artifacts in the order shown, two a finding, a new pair each round; the train
instances here hold their gold evidence among those, so the search scores examples above 0 (which is what makes
bootstrapping keep a trace as a demo). The optimizers get tiny budgets (--opt). Minutes in all: the `paper` lane.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from routed_lm import FIXTURE_DATA

from tide_dspy.cli.main import main
from tide_dspy.testing.provider_sim import ProviderSimulator

pytestmark = pytest.mark.paper

ROOT = Path(__file__).resolve().parents[1]
PAPER_SHAPE = {"workspace": (10, 1), "repository": (3, 3)}
TEMPLATES = {s: ROOT / "programs" / s / "local" / "templates.json" for s in PAPER_SHAPE}
TINY = {
    "miprov2": ["init.auto=null", "init.num_candidates=2", "compile.num_trials=2"],
    "bootstrap": [],
    "copro": ["init.breadth=2", "init.depth=1"],
    "gepa": ["init.max_metric_calls=8"],
    "simba": ["init.max_steps=1", "init.num_candidates=2", "init.bsize=2"],
}
TRAIN_COPIES = 5  # 2 to train on, 3 held out for validation

LOAD_AND_RUN = """
import json, sys
import dspy
from tide_dspy import get_lm, load_program
from tide_dspy.backbones import lm_context
from tide_dspy.data import load_instances

dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
program = load_program(sys.argv[1])
instance = load_instances(sys.argv[2], setting=program.setting.name, split="train")[0]
with lm_context(get_lm("gpt-5-mini", api_base=sys.argv[3])):
    prediction = program(instance)
print(json.dumps({"setting": program.setting.name, "rounds": program.max_rounds, "per_round": program.per_round,
                  "demos": len(program.discover.demos), "findings": len(prediction.findings),
                  "round_calls": sum(r.lm_calls for r in prediction.rounds)}))
"""


@pytest.fixture(scope="module")
def sim():
    with ProviderSimulator() as simulator:
        yield simulator


@pytest.fixture
def hosted(sim, monkeypatch):
    """gpt-5-mini's key in the environment, and no stray base address that would send its calls elsewhere."""
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "TIDE_API_BASE", "TIDE_API_KEY", "TIDE_TEMPERATURE",
                 "TIDE_MAX_TOKENS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", sim.keys["openai"])
    return sim


def train_copies(folder: Path, setting: str) -> Path:
    """`folder/<setting>/train.jsonl`: TRAIN_COPIES train instances made from the fixtures' train instances (their
    records under new ids), so validation has 3 instances."""
    source = next((FIXTURE_DATA / setting).glob("*.jsonl"))
    records = [r for r in map(json.loads, source.read_text().splitlines()) if r["split"] == "train"]
    out = folder / setting / "train.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    copies = [{**records[n % len(records)], "instance_id": f"{records[n % len(records)]['instance_id']}-{n}"}
              for n in range(TRAIN_COPIES)]
    out.write_text("".join(json.dumps(r) + "\n" for r in copies))
    return out.parent


def compile_args(sim, setting: str, optimizer: str, data: Path, programs: Path, *extra: str) -> list[str]:
    rounds, per_round = PAPER_SHAPE[setting]
    opts = [arg for option in TINY[optimizer] for arg in ("--opt", option)]
    return ["compile", "--setting", setting, "--rounds", str(rounds), "--per-round", str(per_round),
            "--backbone", "gpt-5-mini", "--api-base", sim.base_url("openai"), "--optimizer", optimizer, *opts,
            "--data", str(data), "--templates", str(TEMPLATES[setting]), "--programs", str(programs), "--no-track",
            *extra]


def refused(sim) -> list[str]:
    return [f"{r.kind} {r.status}: {r.error}" for r in sim.rejected()]


def trial_scores(programs: Path, setting: str) -> list[float]:
    lines = (programs / setting / "gpt-5-mini" / "compile" / "trials.jsonl").read_text().splitlines()
    return [json.loads(line)["score"] for line in lines[1:]]


def load_and_run(program: Path, data: Path, sim, elsewhere: Path) -> dict:
    """Copy the saved program into `elsewhere` and run it there in a fresh Python process."""
    elsewhere.mkdir(parents=True, exist_ok=True)
    copy = elsewhere / "tide.json"
    shutil.copy(program, copy)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENAI_API_KEY": sim.keys["openai"]}
    done = subprocess.run([sys.executable, "-c", LOAD_AND_RUN, str(copy), str(data), sim.base_url("openai")],
                          cwd=elsewhere, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("setting", sorted(PAPER_SHAPE))
@pytest.mark.parametrize("optimizer", sorted(TINY))
def test_every_optimizer_compiles_tide_at_the_papers_settings(hosted, tmp_path, setting, optimizer):
    sim = hosted
    data = train_copies(tmp_path / "data", setting)
    programs = tmp_path / "programs"
    # --keep-worse: the simulator's answers ignore the instruction, so every candidate ties and compile would
    # keep the original; the compiled state (a bootstrapped demo, say) is what has to survive saving and loading.
    assert main(compile_args(sim, setting, optimizer, data, programs, "--keep-worse")) == 0
    assert refused(sim) == []
    assert max(trial_scores(programs, setting)) > 0  # the search scored a train example above 0
    saved = programs / setting / "gpt-5-mini" / "tide.json"
    ran = load_and_run(saved, data, sim, tmp_path / "elsewhere")
    rounds, per_round = PAPER_SHAPE[setting]
    assert (ran["setting"], ran["rounds"], ran["per_round"]) == (setting, rounds, per_round)
    assert ran["findings"] > 0 and ran["round_calls"] > 0
    if optimizer == "bootstrap":  # its demo is a trace of a round, with findings of the type built per instance
        assert ran["demos"] == 1
