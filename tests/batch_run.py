"""A batched TIDE evaluation of the workspace fixtures, as a process of its own that a test can kill while a batch
is in flight (tests/test_batch.py) and then run again to resume it. It prints the collector's summary as JSON.

    python tests/batch_run.py PROVIDER API_BASE OUT_FOLDER ROUNDS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import dspy

ROOT = Path(__file__).resolve().parents[1]
BACKBONE = {"openai": "gpt-5-mini", "anthropic": "claude-sonnet-4.5", "gemini": "gemini-3.5-flash"}


def main(provider: str, api_base: str, out: str, rounds: str) -> int:
    from tide_dspy.backbones import get_lm
    from tide_dspy.batch import BatchSettings, Collector, Ledger, batch_lm
    from tide_dspy.data.selection import Selection
    from tide_dspy.domains import get_setting
    from tide_dspy.evaluation import evaluate
    from tide_dspy.workflows import ProgramShape, evaluation_program

    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)  # a fresh cache: only the ledger helps
    selection = Selection(setting=get_setting("workspace"), split="test",
                          data=str(ROOT / "tests/fixtures/instances/workspace/workspaces.jsonl"))
    instances = selection.load()
    program, _, _ = evaluation_program(selection, backbone=BACKBONE[provider], program=None, method="tide",
                                       shape=ProgramShape(rounds=int(rounds)),
                                       templates=str(ROOT / "programs/workspace/local/templates.json"),
                                       programs=str(ROOT / "programs"))
    col = Collector(BatchSettings(window=60, poll_initial=0.05, poll_max=0.2), Ledger.open(out),
                    progress=lambda line: print(line, file=sys.stderr, flush=True))
    lm = batch_lm(get_lm(BACKBONE[provider], api_base=api_base), col)
    forward = program.forward

    def held(*args, **kwargs):
        with col.holding():
            return forward(*args, **kwargs)
    program.forward = held
    col.expect(len(instances))
    with col:
        result = evaluate(program, instances, lm=lm, workers=len(instances), progress=False,
                          out_path=Path(out) / "results.jsonl", method="tide")
    print(json.dumps({"summary": col.summary(), "n_failed": result.n_failed, "findings": result.findings}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
