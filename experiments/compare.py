"""One table and one figure over several `run.py table1` folders (e.g. whole context, shortlist, shuffled, 1.5B;
or uncompiled against compiled, plain and shuffled).

    python experiments/compare.py --out experiments/results/shortlist-summary \
        "workspace 0.5B=experiments/results/workspace-local-small-shortlist" ...

Reads each folder's table1.csv and table1_hygiene.csv, as written; runs nothing. Every method is read against the
highest chance floor of its own run. Only held-out (test split) runs are compared.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plots  # noqa: E402

from tide_dspy.util.safe_write import write_text  # noqa: E402

FLOORS = plots.FLOOR_METHODS
GOAL = 1.5  # the scan's target for the LM methods, as a multiple of the highest chance floor (--goal)


def read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        raise SystemExit(f"{path}: not found; the folder must hold a finished `run.py table1` run")
    with path.open() as f:
        return list(csv.DictReader(f))


def number(value: str) -> float | None:
    return float(value) if value not in ("", None) else None


def read_variant(folder: Path) -> list[dict]:
    """table1.csv rows joined with their hygiene row: method, retrieval F1 and coverage, scan recall, seconds."""
    hygiene = {r["method"]: r for r in read_csv(folder / "table1_hygiene.csv")}
    rows = []
    for r in read_csv(folder / "table1.csv"):
        h = hygiene.get(r["method"], {})
        instances = int(r["instances"]) or 1
        rows.append({"method": r["method"], "retrieval_f1": number(r["retrieval_f1"]),
                     "retrieval_coverage": number(r["retrieval_coverage"]),
                     "scan_recall": number(h.get("scan_recall_at_focus", "")),
                     "seconds_per_instance": (number(h.get("seconds", "")) or 0.0) / instances})
    return rows


def provenance(label: str, folder: Path) -> str:
    """Where a run's numbers come from: its backbone, judge and command (from run.py's meta-table1.json)."""
    meta_path = folder / "meta-table1.json"
    if not meta_path.is_file():
        raise SystemExit(f"{meta_path}: not found; the folder must hold a finished `run.py table1` run")
    meta = json.loads(meta_path.read_text())
    if meta.get("split", "test") != "test":
        raise SystemExit(f"{meta_path}: a run on the {meta['split']} split; compare reads held-out (test) runs only")
    return (f"- {label}: backbone {meta['backbone'].get('backbone') or meta['backbone'].get('model')}, "
            f"judge {meta['judge']}, `python {meta['command']}`")


def table(variants: dict[str, list[dict]]) -> list[str]:
    lines = ["| run | method | retrieval cov / F1 | x highest floor | scan recall@focus "
             "| s per instance (cached calls cost ~0) |",
             "|---|---|---|---|---|---|"]
    for label, rows in variants.items():
        floor = plots.higher_floor(rows)[1]
        for r in rows:
            ratio = "floor" if r["method"] in FLOORS else (f"{r['retrieval_f1'] / floor:.2f}x" if floor else "n/a")
            recall = "-" if r["scan_recall"] is None else f"{r['scan_recall']:.3f}"
            seconds = "-" if r["method"] in FLOORS else f"{r['seconds_per_instance']:.0f}"
            lines.append(f"| {label} | {r['method']} | {r['retrieval_coverage']:.2f} / {r['retrieval_f1']:.2f} | "
                         f"{ratio} | {recall} | {seconds} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="+", metavar="LABEL=FOLDER")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="retrieval F1 against the chance floors")
    parser.add_argument("--goal", type=float, default=GOAL,
                        help=f"draw a tick at this multiple of each run's highest floor (default {GOAL}; 0: none)")
    args = parser.parse_args(argv)
    variants, sources = {}, []
    for spec in args.variants:
        label, sep, folder = spec.partition("=")
        if not sep:
            parser.error(f"{spec!r}: write LABEL=FOLDER")
        variants[label] = read_variant(Path(folder))
        sources.append(provenance(label, Path(folder)))
    args.out.mkdir(parents=True, exist_ok=True)
    lines = [*table(variants), "", "Runs:", *sources]
    write_text(args.out / "compare.md", "\n".join(lines) + "\n")
    write_text(
        args.out / "command.txt", shlex.join(["python", "experiments/compare.py", *(argv or sys.argv[1:])]) + "\n"
    )
    plots.compare(variants, args.out / "compare.png", args.title, args.goal)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
