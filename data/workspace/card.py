"""Print the data card's tables (README.md beside this file) from the built workspace files.

    python data/workspace/card.py            # every table of the card, from v1/ and v2/
    python data/workspace/card.py --floors   # also the chance floors of each version (as `tide data check` prints them)

The card's numbers are this script's output, pasted: none is typed by hand. `tests/test_data_sets.py` checks that
every table row it prints is in the card, so a rebuilt v2 with a stale card fails.

This is a data script, not part of the package: it reads the built files as the package ships them.
"""

from __future__ import annotations

import argparse
import json
import lzma
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERSIONS = ("v1", "v2")
SPLITS = ("train", "test")
KINDS = ("email", "document", "calendar")


def records(version: str) -> list[dict]:
    with lzma.open(HERE / version / "workspaces.jsonl.xz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def evidence_ids(record: dict) -> set[str]:
    return {i for p in record["problems"] for i in p["evidence"]}


def short(instance_id: str) -> str:
    return instance_id.removeprefix("ws-")


def table(head: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + [
        "| " + " | ".join(str(c) for c in row) + " |" for row in rows]


STATUS = {"v1": "the first hand-written set, unchanged", "v2": "**default**; built from v1 and `src/`"}


def versions_table() -> list[str]:
    rows = []
    for version in VERSIONS:
        recs = records(version)
        size = (HERE / version / "workspaces.jsonl.xz").stat().st_size
        ws = Counter(r["split"] for r in recs)
        probs = Counter()
        for r in recs:
            probs[r["split"]] += len(r["problems"])
        rows.append([version, f"`{version}/workspaces.jsonl.xz` ({round(size / 1000)} KB)",
                     f"{len(recs)} ({ws['train']} / {ws['test']})",
                     f"{sum(probs.values())} ({probs['train']} / {probs['test']})",
                     f"{sum(len(r['artifacts']) for r in recs):,}", STATUS[version]])
    return table(["version", "file", "workspaces (train / test)", "problems (train / test)", "items", "status"],
                 rows)


def counts_table(recs: list[dict]) -> list[str]:
    rows, total = [], Counter()
    for split in SPLITS:
        mine = [r for r in recs if r["split"] == split]
        c = Counter(workspaces=len(mine), problems=sum(len(r["problems"]) for r in mine),
                    items=sum(len(r["artifacts"]) for r in mine), evidence=sum(len(evidence_ids(r)) for r in mine),
                    actions=sum(len(r["actions"]) for r in mine))
        c["distractors"] = c["items"] - c["evidence"]
        total.update(c)
        rows.append([split, *(f"{c[k]:,}" for k in ("workspaces", "problems", "items", "evidence", "distractors",
                                                     "actions"))])
    rows.append(["**total**", *(f"**{total[k]:,}**" for k in ("workspaces", "problems", "items", "evidence",
                                                               "distractors", "actions"))])
    return table(["split", "workspaces", "problems", "items", "evidence items", "distractors", "actions"], rows)


def mix_lines(recs: list[dict], v1_ids: set[str]) -> list[str]:
    kinds = Counter(a["kind"] for r in recs for a in r["artifacts"])
    n = sum(kinds.values())
    mix = ", ".join(f"{kinds[k]:,} {k}s ({100 * kinds[k] / n:.0f}%)" if k != "calendar" else
                    f"{kinds[k]:,} calendar entries ({100 * kinds[k] / n:.0f}%)" for k in KINDS)

    def share(r: dict) -> float:
        return 100 * (1 - len(evidence_ids(r)) / len(r["artifacts"]))

    def span(group: list[dict]) -> str:
        values = [share(r) for r in group]
        return f"{min(values):.0f}-{max(values):.0f}%"

    new = [r for r in recs if r["instance_id"] not in v1_ids]
    old = [r for r in recs if r["instance_id"] in v1_ids]
    items = [len(r["artifacts"]) for r in recs]
    per_problem = [len(p["evidence"]) for r in recs for p in r["problems"]]
    problems = [len(r["problems"]) for r in recs]
    actions = [len(r["actions"]) for r in recs]
    people = [len(r["profile"]["relationships"]) for r in recs]
    return [f"- Item mix: {mix}.",
            f"- Items per workspace: {min(items)}-{max(items)}; problems per workspace: {min(problems)}-"
            f"{max(problems)}; evidence items per problem: {min(per_problem)}-{max(per_problem)} "
            f"(mean {sum(per_problem) / len(per_problem):.1f}); library actions per workspace: {min(actions)}-"
            f"{max(actions)}; relationships per persona: {min(people)}-{max(people)}.",
            f"- Distractor share per workspace: {span(new)} in the {len(new)} new workspaces, {span(old)} in the "
            f"{len(old)} extended v1 workspaces."]


def workspace_table(recs: list[dict]) -> list[str]:
    rows = []
    order = {s: n for n, s in enumerate(SPLITS)}
    for r in sorted(recs, key=lambda r: (order[r["split"]], r["instance_id"])):
        profile, arts = r["profile"], r["artifacts"]
        kinds = Counter(a["kind"] for a in arts)
        ev = len(evidence_ids(r))
        rows.append([f"`{r['instance_id']}`", r["split"],
                     f"{profile['occupation']}, {profile['organization']['company_name']}", profile["today"],
                     len(r["problems"]), f"{len(arts)} ({' / '.join(str(kinds[k]) for k in KINDS)})",
                     f"{ev} / {len(arts) - ev}", len(r["actions"]), len(profile["relationships"])])
    return table(["instance_id", "split", "persona (occupation, organization)", "today", "problems",
                  "items (email / document / calendar)", "evidence / distractors", "actions", "relationships"], rows)


def classes_table(recs: list[dict]) -> list[str]:
    count: Counter = Counter()
    where: dict[str, dict[str, set[str]]] = defaultdict(lambda: {s: set() for s in SPLITS})
    per_split: dict[str, Counter] = defaultdict(Counter)
    for r in recs:
        for p in r["problems"]:
            cat = p.get("category") or "(none)"
            count[cat] += 1
            per_split[cat][r["split"]] += 1
            where[cat][r["split"]].add(short(r["instance_id"]))
    rows = []
    for cat, n in sorted(count.items(), key=lambda kv: (-kv[1], kv[0])):
        ws = where[cat]
        rows.append([cat, n, f"{per_split[cat]['train']} / {per_split[cat]['test']}",
                     f"{len(ws['train'])} / {len(ws['test'])}",
                     ", ".join(sorted(ws["train"])) + " (train); " + ", ".join(sorted(ws["test"]))])
    return table(["category", "problems", "train / test problems", "train / test workspaces", "workspaces"], rows)


def floors_table(cache_dir: str | Path | None = None) -> list[str]:
    from tide_dspy.data.sets import load_benchmark
    from tide_dspy.floors import FLOORS, floor_scores, split_rows

    rows = []
    for version in reversed(VERSIONS):
        instances = load_benchmark("workspace", version=version, data=HERE, cache_dir=cache_dir).instances
        for row in split_rows(instances, floor_scores(instances)):
            cells = [f"{row.means[f]:.2f} ± {row.half_widths[f]:.2f}" for f in FLOORS]
            rows.append([version, row.split, row.n, *cells, f"{row.ratio():.2f}x"])
    return table(["version", "split", "n", "Random", "First-listed", "LexicalJoin", "TF-IDF",
                  "LexicalJoin / Random"], rows)


def card_lines(floors: bool = False, cache_dir: str | Path | None = None) -> list[str]:
    """The card's tables and count lines, each section after an HTML comment naming it; `cache_dir`: where the
    floors' loads keep their Arrow cache (default: datasets' folder)."""
    v2, v1_ids = records("v2"), {r["instance_id"] for r in records("v1")}
    sections = [("versions", versions_table()), ("counts (v2)", counts_table(v2) + [""] + mix_lines(v2, v1_ids)),
                ("workspaces (v2)", workspace_table(v2)), ("problem classes (v2)", classes_table(v2))]
    if floors:
        sections.append(("chance floors", floors_table(cache_dir)))
    out = []
    for title, lines in sections:
        out += [f"<!-- {title} -->", *lines, ""]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--floors", action="store_true", help="also the chance floors (about 15 s)")
    print("\n".join(card_lines(parser.parse_args().floors)))


if __name__ == "__main__":
    main()
