"""Run TIDE on one shared workspace instance and print its findings and per-round records.

    python examples/tide_workspace.py                      # embedded Qwen2.5-Coder 1.5B (about 5 min here)
    python examples/tide_workspace.py --backbone local-small --rounds 3
"""

import argparse

import dspy

from tide_dspy import TIDE
from tide_dspy.backbones import adapter_for, get_lm
from tide_dspy.data import load_instances
from tide_dspy.data.selection import data_path
from tide_dspy.templates import TemplateLibrary

parser = argparse.ArgumentParser()
parser.add_argument("--backbone", default="local")
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--templates", default="programs/workspace/local-small/templates.json")
args = parser.parse_args()

instance = load_instances(data_path("workspace"), split="test")[0]
templates = TemplateLibrary.load(args.templates).templates
program = TIDE("workspace", templates=templates, max_rounds=args.rounds)

lm = get_lm(args.backbone)
with dspy.context(lm=lm, adapter=adapter_for(lm)):
    result = program(
        instance,
        on_round=lambda r: print(
            f"round {r.round}: {r.new} new, {r.rediscovered} re-discovered, "
            f"{r.input_tokens} prompt tokens, {r.seconds:.0f}s"
        ),
    )

for f in result.findings:
    print(
        f"\n[round {f.round}] {f.description}\n  evidence: {f.evidence}\n  action: {f.action}\n"
        f"  template: {f.used_template_id or '-'}"
    )
