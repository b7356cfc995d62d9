"""What reproducing Table 1 costs on each of the paper's backbones, before a cent is spent.

For each backbone and setting, `run.py table1 --dry-run` is estimated (experiments/run.py `estimate_table1`):
the paper's Table 1 methods (Single, Multi, TIDE; the chance floors call nothing), `--runs` runs, judged by
`--judge`, on the shared data's test split. Prices, windows and output limits come from LiteLLM's model cost map
(tide_dspy/cost/prices.py). "With caching" prices the prompt tokens that repeat an earlier call of the same
instance and method (TIDE's rounds 2..T, Multi's samples 2..N) at the map's cached-prompt price, where it lists
one. The assumptions behind the output side are in docs/cost.md.

    python experiments/cost_table1.py --out experiments/results/cost
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import run  # noqa: E402

from tide_dspy.backbones import LMOptions, lm_from_options  # noqa: E402
from tide_dspy.cost.estimate import PromptCounter  # noqa: E402
from tide_dspy.cost.prices import money  # noqa: E402
from tide_dspy.domains import SETTING_NAMES  # noqa: E402
from tide_dspy.metrics import make_judge  # noqa: E402
from tide_dspy.util.tokens import tokenizer_name  # noqa: E402

PAPER_BACKBONES = ("gpt-5-mini", "claude-sonnet-4.5", "gemini-3.5-flash", "qwen-3.6-flash")
SETTINGS = SETTING_NAMES
METHODS = ("single", "multi", "tide")


def role_cost(estimate, role: str, caching: bool, methods=METHODS) -> float | None:
    costs = [t.cost(estimate.prices.get(role), caching) for (label, r), t in estimate.tallies.items()
             if r == role and label in methods and t.calls]
    return None if any(c is None for c in costs) else sum(costs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbones", nargs="*", default=list(PAPER_BACKBONES))
    parser.add_argument("--judge", default="gpt-5-mini")
    parser.add_argument("--runs", type=int, default=3, help="runs per method (the paper reports the mean of 3)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--data", default=None, help="folder with workspace/ and repository/ (default: $TIDE_DATA)")
    parser.add_argument("--out", default=None, help="write table1_cost.md and table1_cost.json here")
    args = parser.parse_args(argv)
    started, counter, records = time.time(), PromptCounter(), []
    for backbone in args.backbones:
        record = {"backbone": backbone, "settings": {}}
        for setting in SETTINGS:
            run_args = run.parse_args([
                "table1", "--setting", setting, "--split", args.split, "--backbone", backbone, "--judge", args.judge,
                "--runs", str(args.runs), "--methods", *METHODS, "--dry-run",
                *(["--data", str(Path(args.data) / setting)] if args.data else [])])
            instances = run.chosen_instances(run_args)
            lm = lm_from_options(LMOptions.from_namespace(run_args))
            estimate = run.estimate_table1(run_args, instances, lm, make_judge(args.judge), counter)
            record["settings"][setting] = {
                "instances": len(instances), "skipped": estimate.skipped,
                **{f"{role}{'_cached' if caching else ''}": role_cost(estimate, role, caching)
                   for role in ("backbone", "judge") for caching in (False, True)},
                **{f"tide_{role}{'_cached' if caching else ''}": role_cost(estimate, role, caching, ("tide",))
                   for role in ("backbone", "judge") for caching in (False, True)},
                "estimate": estimate.to_dict()}
            print(f"{backbone} {setting}: {money(estimate.cost())} ({money(estimate.cost(caching=True))} with "
                  f"caching), {len(estimate.skipped)} skipped", flush=True)
        records.append(record)

    def total(record, key):
        values = [s.get(key) for s in record["settings"].values()]
        return None if any(v is None for v in values) else sum(values)

    counts = ", ".join(f"{s} {records[0]['settings'][s]['instances']}" for s in SETTINGS)
    lines = [f"Table 1 ({', '.join(METHODS)}; {args.runs} runs; judge {args.judge}) on the {args.split} split: "
             f"{counts} instances. USD at list prices; tokens counted with {tokenizer_name()}.", "",
             "| backbone | backbone USD | judge USD | total | total with caching | TIDE only | TIDE only, with caching "
             "| skipped (over the window) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in records:
        both = {c: (total(r, "backbone" + c) or 0) + (total(r, "judge" + c) or 0) if total(r, "backbone" + c)
                is not None else None for c in ("", "_cached")}
        tide = {c: (total(r, "tide_backbone" + c) or 0) + (total(r, "tide_judge" + c) or 0)
                if total(r, "tide_backbone" + c) is not None else None for c in ("", "_cached")}
        skipped = sum(len(s["skipped"]) for s in r["settings"].values())
        lines.append(f"| {r['backbone']} | {money(total(r, 'backbone'))} | {money(total(r, 'judge'))} | "
                     f"{money(both[''])} | {money(both['_cached'])} | {money(tide[''])} | {money(tide['_cached'])} | "
                     f"{skipped} |")
    by_setting = ["", "| backbone | setting | backbone USD | with caching | judge USD |", "|---|---|---|---|---|"]
    for r in records:
        for setting, s in r["settings"].items():
            by_setting.append(f"| {r['backbone']} | {setting} | {money(s['backbone'])} | {money(s['backbone_cached'])} "
                              f"| {money(s['judge'])} |")
    lines += by_setting
    lines += ["", "Caching: the cached-prompt price of the backbone's rules applies to prompt tokens that repeat an "
              "earlier call of the same instance and method; where the rules list no cached price, none is applied. "
              "Skipped instances are left out (Claude's 1M-token beta window would take them, at long-context "
              "prices). Template distillation for a hosted backbone is not included.",
              f"{time.time() - started:.0f} s"]
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "table1_cost.md").write_text("\n".join(lines[:-1]) + "\n")
        (out / "table1_cost.json").write_text(json.dumps(
            {"command": "python experiments/cost_table1.py " + " ".join(argv or sys.argv[1:]),
             "tokenizer": tokenizer_name(), "records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
