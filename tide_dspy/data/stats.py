"""Per-split counts of a set of instances, as printed by `tide data stats`."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean

from tide_dspy.schemas import Instance

COLUMNS = ("split", "instances", "problems", "artifacts", "evidence", "artifacts/instance", "problems/instance",
           "evidence/problem")


def _spread(values: Sequence[int]) -> str:
    """'mean (min-max)', or '-' when there is nothing to count."""
    if not values:
        return "-"
    return f"{mean(values):.1f} ({min(values)}-{max(values)})"


def stats_row(label: str, instances: Sequence[Instance]) -> dict[str, str | int]:
    problems = [p for inst in instances for p in inst.problems]
    return {
        "split": label,
        "instances": len(instances),
        "problems": len(problems),
        "artifacts": sum(len(inst.artifacts) for inst in instances),
        "evidence": sum(len(p.evidence) for p in problems),
        "artifacts/instance": _spread([len(inst.artifacts) for inst in instances]),
        "problems/instance": _spread([len(inst.problems) for inst in instances]),
        "evidence/problem": _spread([len(p.evidence) for p in problems]),
    }


def dataset_stats(instances: Sequence[Instance]) -> list[dict[str, str | int]]:
    """One row per split (in first-seen order; instances without a split count as 'none'), then 'total'."""
    splits: dict[str, list[Instance]] = {}
    for inst in instances:
        splits.setdefault(inst.split or "none", []).append(inst)
    rows = [stats_row(name, group) for name, group in splits.items()]
    return rows + [stats_row("total", instances)] if len(splits) != 1 else rows


def format_stats_table(rows: Sequence[dict[str, str | int]]) -> str:
    """A plain fixed-width text table with a header line."""
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in COLUMNS}
    cells = [list(COLUMNS), ["-" * widths[c] for c in COLUMNS], *([str(r[c]) for c in COLUMNS] for r in rows)]
    return "\n".join("  ".join(v.ljust(widths[c]) for c, v in zip(COLUMNS, row)).rstrip() for row in cells)
