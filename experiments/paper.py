"""The paper's published numbers beside the runs under experiments/results/, in one Markdown file.

    python experiments/paper.py [--results experiments/results] [--out experiments/results/paper-beside-ours.md]

The paper's rows are its Table 1 in full and the cells of its Tables 2 and 3 that were extracted (the numbers as
tide-dspy's SPEC states them: means of 3 runs, GPT-5 mini as judge, the paper's own data). Our rows are read from
each run folder's table1.csv / demos.csv / transfer.csv and meta-<experiment>.json, written by experiments/run.py,
and say their backbone, judge, data, runs, date and method settings. A cell of ours is only ever what our CSV holds:
no paper number is written into a row of ours, and an experiment we did not run has no row. Runs under
results/archive/ (kept for the record, made by code that has since changed) are left out unless --archive.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
from pathlib import Path

from tide_dspy.domains import REPOSITORY, WORKSPACE
from tide_dspy.util.safe_write import write_text

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "Jeong et al., TIDE (arXiv 2606.04743), LaTeX tables"
PAPER_JUDGE = "GPT-5 mini"
PAPER_DATA = "the paper's (PROBE workspaces; SWE-bench multi-bug repositories)"
PAPER_RUNS = 3
COMPONENTS = ("retrieval", "identification", "resolution")

# Table 1: backbone -> method -> (WS retrieval, WS ident., WS resol., Repo retrieval, Repo ident., Repo resol.),
# each (coverage, F1) in percent.
PAPER_TABLE1: dict[str, dict[str, tuple[tuple[float, float], ...]]] = {
    "GPT-5 mini": {
        "Single": ((47.60, 54.32), (47.85, 54.63), (49.67, 56.14), (8.66, 10.34), (11.15, 12.92), (12.19, 13.27)),
        "Multi": ((32.15, 45.41), (27.24, 38.85), (29.64, 41.85), (10.11, 12.66), (10.19, 12.77), (9.89, 12.39)),
        "TIDE": ((69.06, 70.46), (67.64, 68.76), (76.08, 77.32), (16.82, 18.61), (17.29, 19.73), (15.52, 17.39)),
    },
    "Gemini 3.5 Flash": {
        "Single": ((50.01, 61.48), (42.99, 52.95), (35.95, 44.31), (13.08, 17.20), (13.34, 16.90), (15.08, 18.71)),
        "Multi": ((46.10, 58.54), (38.98, 49.95), (32.44, 41.54), (14.75, 18.51), (14.71, 17.72), (15.32, 18.89)),
        "TIDE": ((83.84, 84.91), (70.11, 71.05), (54.37, 55.08), (22.55, 25.14), (21.93, 24.22), (24.32, 26.98)),
    },
    "Claude Sonnet 4.5": {
        "Single": ((13.82, 30.73), (13.53, 25.74), (17.69, 22.00), (12.85, 16.09), (9.86, 12.18), (9.84, 12.34)),
        "Multi": ((21.60, 43.33), (18.04, 36.04), (23.99, 31.04), (9.37, 13.36), (7.96, 11.18), (8.88, 11.01)),
        "TIDE": ((32.01, 55.51), (35.77, 62.44), (46.49, 54.88), (19.99, 22.70), (14.50, 16.50), (15.79, 17.76)),
    },
    "Qwen 3.6 Flash": {
        "Single": ((30.46, 42.05), (32.44, 44.67), (28.60, 37.60), (5.60, 6.83), (5.34, 6.62), (4.84, 5.76)),
        "Multi": ((39.34, 52.12), (31.04, 42.27), (26.21, 35.37), (5.00, 6.72), (6.58, 7.50), (5.83, 6.50)),
        "TIDE": ((52.39, 60.21), (50.50, 58.13), (41.87, 48.06), (9.94, 11.33), (6.87, 8.07), (8.47, 9.70)),
    },
}
# Table 2 (repository, GPT-5 mini, retrieval coverage / F1): the extracted cells.
PAPER_TABLE2: dict[str, tuple[float, float]] = {"Single": (8.66, 10.34), "Iter + Demos": (10.40, 11.43),
                                                "TIDE": (16.82, 18.61)}
# Table 3 (repository, retrieval coverage): (inference backbone, template source) -> coverage; the extracted cells.
PAPER_TABLE3: dict[tuple[str, str], float] = {
    ("GPT-5 mini", "GPT-5 mini"): 16.82, ("GPT-5 mini", "Gemini 3.5 Flash"): 16.30,
    ("Gemini 3.5 Flash", "Gemini 3.5 Flash"): 21.47, ("Gemini 3.5 Flash", "GPT-5 mini"): 24.03,
}
# Our method names as the paper's tables name them (the rest, floors included, keep their own).
PAPER_NAME = {"single": "Single", "multi": "Multi", "tide": "TIDE", "iter": "Iter", "iter-demos": "Iter + Demos"}


def read_csv(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def number(value) -> float | None:
    return float(value) if value not in (None, "") else None


def ours(record: dict, key: str) -> str:
    """One cell of ours as our CSV holds it: `mean` or `mean [low, high]`; `-` when absent."""
    mean = number(record.get(key))
    if mean is None:
        return "-"
    low, high = number(record.get(f"{key}_ci_low")), number(record.get(f"{key}_ci_high"))
    return f"{mean:.2f}" if low is None else f"{mean:.2f} [{low:.2f}, {high:.2f}]"


def setting_of(meta: dict) -> str | None:
    """The run's setting: recorded in its meta, else read from the command that made it."""
    if meta.get("setting"):
        return meta["setting"]
    words = shlex.split(meta.get("command", ""))
    return words[words.index("--setting") + 1] if "--setting" in words[:-1] else None


def settings_text(meta: dict) -> str:
    settings = meta.get("settings")
    if not settings:
        return "not recorded"
    return ", ".join(f"{k}={v}" for k, v in settings.items() if k != "note")


def provenance(folder: Path, meta: dict, runs: str | None) -> dict:
    """Where a row of ours comes from: its folder, backbone, judge, data, runs, date and settings."""
    backbone = meta.get("backbone") or {}
    data = meta.get("data") or {}
    instances = len(meta.get("instances") or [])
    data_text = (f"{data.get('name') or setting_of(meta)} {data.get('version') or ''}".strip()
                 + f", {meta.get('split', 'test')} split, {instances} instances")
    return {"run": folder.name, "backbone": backbone.get("backbone") or backbone.get("model") or "?",
            "judge": meta.get("judge", "?"), "data": data_text, "runs": str(meta.get("runs") or runs or "?"),
            "date": (meta.get("date") or "?")[:10], "settings": settings_text(meta)}


def run_folders(results: Path, experiment: str, archive: bool) -> list[tuple[Path, dict]]:
    found = []
    for meta_path in sorted(results.rglob(f"meta-{experiment}.json")):
        if not archive and "archive" in meta_path.relative_to(results).parts:
            continue
        found.append((meta_path.parent, json.loads(meta_path.read_text())))
    return found


def table1(results: Path, archive: bool) -> list[str]:
    head = ("| source | backbone | method | WS retrieval | WS ident. | WS resol. | Repo retrieval | Repo ident. "
            "| Repo resol. | judge | data | runs | date |")
    lines = ["## Table 1 (coverage / F1, percent)", "", head, "|" + "---|" * 13]
    for backbone, methods in PAPER_TABLE1.items():
        for method, cells in methods.items():
            lines.append(f"| paper | {backbone} | {method} | "
                         + " | ".join(f"{cov:.2f} / {f1:.2f}" for cov, f1 in cells)
                         + f" | {PAPER_JUDGE} | {PAPER_DATA} | {PAPER_RUNS} | paper |")
    notes = []
    for folder, meta in run_folders(results, "table1", archive):
        setting = setting_of(meta)
        if setting not in (WORKSPACE.name, REPOSITORY.name) or not (folder / "table1.csv").is_file():
            continue
        rows = read_csv(folder / "table1.csv")
        where = provenance(folder, meta, rows[0].get("runs") if rows else None)
        for r in rows:
            cells = [f"{ours(r, f'{c}_coverage')} / {ours(r, f'{c}_f1')}" for c in COMPONENTS]
            blank = ["-"] * len(COMPONENTS)
            cells = cells + blank if setting == WORKSPACE.name else blank + cells  # the paper's column order
            lines.append(f"| ours: {where['run']} | {where['backbone']} | {PAPER_NAME.get(r['method'], r['method'])} | "
                         + " | ".join(cells) + f" | {where['judge']} | {where['data']} | {where['runs']} | "
                         f"{where['date']} |")
        notes.append(f"- {where['run']}: settings {where['settings']}")
    return lines + ["", "Settings of our runs (docs/paper.md says which are the paper's):", *notes] if notes else lines


def table2(results: Path, archive: bool) -> list[str]:
    lines = ["## Table 2 (retrieval coverage / F1, percent)", "",
             "| source | setting | backbone | method | retrieval | judge | data | runs | date |", "|" + "---|" * 9]
    for method, (cov, f1) in PAPER_TABLE2.items():
        lines.append(f"| paper | repository | GPT-5 mini | {method} | {cov:.2f} / {f1:.2f} | {PAPER_JUDGE} | "
                     f"{PAPER_DATA} | {PAPER_RUNS} | paper |")
    for folder, meta in run_folders(results, "demos", archive):
        if not (folder / "demos.csv").is_file():
            continue
        rows = read_csv(folder / "demos.csv")
        where = provenance(folder, meta, rows[0].get("runs") if rows else None)
        for r in rows:
            lines.append(f"| ours: {where['run']} | {setting_of(meta)} | {where['backbone']} | "
                         f"{PAPER_NAME.get(r['method'], r['method'])} | {ours(r, 'retrieval_coverage')} / "
                         f"{ours(r, 'retrieval_f1')} | {where['judge']} | {where['data']} | {where['runs']} | "
                         f"{where['date']} |")
    return lines


def table3(results: Path, archive: bool) -> list[str]:
    lines = ["## Table 3 (repository, retrieval coverage, percent)", "",
             "| source | inference backbone | templates from | retrieval coverage | judge | data | runs | date |",
             "|" + "---|" * 8]
    for (inference, source), cov in PAPER_TABLE3.items():
        lines.append(f"| paper | {inference} | {source} | {cov:.2f} | {PAPER_JUDGE} | {PAPER_DATA} | {PAPER_RUNS} "
                     "| paper |")
    for folder, meta in run_folders(results, "transfer", archive):
        if not (folder / "transfer.csv").is_file():
            continue
        rows = read_csv(folder / "transfer.csv")
        where = provenance(folder, meta, rows[0].get("runs") if rows else None)
        for r in rows:
            label = "chance floor: " + r["method"] if r["inference"] == "-" else r["inference"]
            lines.append(f"| ours: {where['run']} | {label} | {r['templates_from']} | "
                         f"{ours(r, 'retrieval_coverage')} | {where['judge']} | {where['data']} | {where['runs']} | "
                         f"{where['date']} |")
    return lines


def report(results: Path, archive: bool = False) -> str:
    parts = [
        "# The paper beside ours",
        "",
        f"Paper rows: {SOURCE}, as ../shared/SPEC.md restates them (Table 1 in full; Tables 2 and 3: the extracted "
        "cells only). Our rows: every run folder under "
        f"`{results.relative_to(ROOT) if results.is_relative_to(ROOT) else results}` "
        f"that holds the experiment's CSV and meta{'' if archive else ' (archive/ left out)'}; a cell of ours is "
        "`mean [95% interval]` where the run recorded one. Our backbones, judges and data differ from the paper's, "
        "so the rows sit side by side for reading, not as a reproduction, and every row of ours says what made it.",
        "",
        *table1(results, archive), "", *table2(results, archive), "", *table3(results, archive),
    ]
    return "\n".join(parts) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--out", type=Path, default=None,
                        help="the Markdown file (default: RESULTS/paper-beside-ours.md)")
    parser.add_argument("--archive", action="store_true", help="also the runs under RESULTS/archive/")
    args = parser.parse_args(argv)
    text = report(args.results.resolve(), args.archive)
    out = args.out or args.results / "paper-beside-ours.md"
    write_text(out, text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
