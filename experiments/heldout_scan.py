"""Held-out recall@N of a saved program's scan alone (no rounds) on test instances.

    python experiments/heldout_scan.py --program programs/repository/local/tide.json --backbone local \
        --max-context-tokens 12000 --limit 1 --out experiments/results/compile-repository-local-scan

The scan is what a scan-recall compile tunes; this measures it on the test split at a fraction of a full
`run.py table1` run's cost (no round reads the whole context). The scan calls are the ones `run.py table1
--compiled` makes, so DSPy's cache replays them there. Rows go to OUT/results.jsonl and resume after a crash.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

from tide_dspy.backbones import LMOptions, describe_lm, lm_from_options
from tide_dspy.evaluation import evaluate
from tide_dspy.programs import load_program
from tide_dspy.scan import ScanOnly
from tide_dspy.util.safe_write import write_text
from tide_dspy.workflows import Selection


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", required=True, help="a saved scanning program (tide.json)")
    parser.add_argument("--backbone", default="local")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads of the embedded backbone")
    parser.add_argument("--max-context-tokens", type=int, default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    program = load_program(args.program)
    if program.scanner is None:
        raise SystemExit(f"{args.program}: the program does not scan")
    instances = Selection(setting=program.setting.name, split="test", max_context_tokens=args.max_context_tokens,
                          limit=args.limit).load()
    lm = lm_from_options(LMOptions(backbone=args.backbone, threads=args.threads))
    out = Path(args.out)
    result = evaluate(ScanOnly(program), instances, out_path=out / "results.jsonl", lm=lm, method="scan")
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    summary = {"command": "python experiments/heldout_scan.py " + " ".join(argv or __import__("sys").argv[1:]),
               "date": datetime.now(UTC).isoformat(timespec="seconds"), "program": args.program,
               "backbone": describe_lm(lm), "split": "test", "focus_size": program.focus_size,
               "scan_recall_at_focus": result.scan_recall,
               "instances": {r["instance_id"]: (r.get("scan") or {}).get("recall_at_focus") for r in rows}}
    write_text(out / "meta-scan.json", json.dumps(summary, indent=1) + "\n")
    print(json.dumps({"scan_recall_at_focus": result.scan_recall, "instances": summary["instances"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
