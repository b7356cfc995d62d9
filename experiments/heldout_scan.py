"""Held-out recall@N of a compiled program's scan and of the same program's uncompiled scan, alone (no rounds), on
test instances.

    python experiments/heldout_scan.py --program programs/repository/local/tide.json --backbone local \
        --max-context-tokens 12000 --limit 1 --out experiments/results/compile-repository-local-scan

The scan is what a scan-recall compile tunes. This measures it on the test split at a fraction of the cost of a
full `run.py table1` run, since no round reads the whole context. The uncompiled scan is the program's with the
setting's default scan instruction: the same templates, artifact order and focus. The scan calls are the ones
`run.py table1 --compiled` makes, so DSPy's cache replays them there and back. Rows go to OUT/<method>/results.jsonl
and resume after a crash. The result is added to the program's provenance.json under "heldout", marked scan_only.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from tide_dspy.backbones import LMOptions, describe_lm, lm_from_options
from tide_dspy.evaluation import evaluate
from tide_dspy.programs import load_program
from tide_dspy.scan import Scanner, ScanOnly
from tide_dspy.util.jsonio import read_json_file, write_json
from tide_dspy.workflows import Selection

COMPILED, UNCOMPILED = "tide-compiled", "tide"


def uncompiled(program):
    """A copy of `program` whose scan has the setting's default instruction (its rounds are unchanged)."""
    plain = program.deepcopy()
    plain.scanner = Scanner(program.setting)
    return plain


def record_heldout(program_path: Path, out: Path, entry: dict) -> None:
    """Add `entry` to the program's provenance.json under "heldout", keyed by the output folder's name."""
    path = program_path.parent / "provenance.json"
    data = read_json_file(path, "") if path.exists() else {}
    data.setdefault(program_path.name, {}).setdefault("heldout", {})[out.name] = entry
    write_json(path, data, ensure_ascii=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", required=True, help="a saved scanning program (tide.json)")
    parser.add_argument("--backbone", default="local")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads of the embedded backbone")
    parser.add_argument("--max-context-tokens", type=int, default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    compiled = load_program(args.program)
    if compiled.scanner is None:
        raise SystemExit(f"{args.program}: the program does not scan")
    instances = Selection(setting=compiled.setting.name, split="test", max_context_tokens=args.max_context_tokens,
                          limit=args.limit).load()
    lm = lm_from_options(LMOptions(backbone=args.backbone, threads=args.threads))
    out, methods = Path(args.out), {}
    for name, program in ((COMPILED, compiled), (UNCOMPILED, uncompiled(compiled))):
        result = evaluate(ScanOnly(program), instances, out_path=out / name / "results.jsonl", lm=lm, method=name)
        rows = [json.loads(line) for line in (out / name / "results.jsonl").read_text().splitlines() if line.strip()]
        methods[name] = {"scan_recall_at_focus": result.scan_recall,
                         "per_instance": {r["instance_id"]: (r.get("scan") or {}).get("recall_at_focus") for r in rows},
                         # 0 where DSPy's cache replayed the calls of an earlier run
                         "seconds_this_run": round(sum(r.get("seconds") or 0.0 for r in rows), 1)}
    entry = {"command": " ".join(["python", "experiments/heldout_scan.py", *(argv or sys.argv[1:])]),
             "date": datetime.now(UTC).isoformat(timespec="seconds"), "split": "test", "scan_only": True,
             "instances": [i.instance_id for i in instances], "focus_size": compiled.focus_size,
             "backbone": describe_lm(lm)["model"], "methods": methods}
    (out / "meta-scan.json").write_text(json.dumps(entry, indent=1) + "\n")
    record_heldout(Path(args.program), out, entry)
    print(json.dumps({name: m["scan_recall_at_focus"] for name, m in methods.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
