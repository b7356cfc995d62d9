"""The chance floors of a benchmark set, per split: what `tide data check` prints and the data cards report.

Each floor runs on every instance at its setting's defaults (T*k findings, the setting's typical evidence size)
and is scored by retrieval F1 as an evaluation scores it; a split's row is the mean over its instances with a 95%
t-interval. No floor calls a model: Random and First-listed read nothing, LexicalJoin and TF-IDF read the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean, stdev

from tide_dspy.metrics.scoring import score_instance
from tide_dspy.programs import build_program
from tide_dspy.schemas import Instance

FLOORS = ("random", "first-listed", "lexical-join", "tfidf")  # methods of tide_dspy.programs.METHODS


def floor_scores(instances: Sequence[Instance], floors: Sequence[str] = FLOORS) -> dict[str, dict[str, float]]:
    """instance_id -> floor -> retrieval F1 (percent)."""
    out: dict[str, dict[str, float]] = {}
    for instance in instances:
        row = out.setdefault(instance.instance_id, {})
        for name in floors:
            findings = build_program(name, instance.setting)(instance).findings
            row[name] = 100 * score_instance(instance.problems, findings).f1["retrieval"]
    return out


@dataclass(frozen=True)
class FloorRow:
    split: str
    n: int
    means: dict[str, float]
    half_widths: dict[str, float | None]  # of the 95% t-interval; None for a single instance

    def ratio(self, floor: str = "lexical-join", base: str = "random") -> float | None:
        """One floor's mean over another's (LexicalJoin over Random: how much string matching alone finds)."""
        return self.means[floor] / self.means[base] if self.means.get(base) else None


def split_rows(instances: Sequence[Instance], scores: dict[str, dict[str, float]],
               floors: Sequence[str] = FLOORS) -> list[FloorRow]:
    """One row per split, in first-seen order."""
    from scipy.stats import t

    by_split: dict[str, list[str]] = {}
    for instance in instances:
        by_split.setdefault(instance.split or "none", []).append(instance.instance_id)
    rows = []
    for split, ids in by_split.items():
        values = {f: [scores[i][f] for i in ids] for f in floors}
        n = len(ids)
        rows.append(FloorRow(
            split=split, n=n, means={f: mean(v) for f, v in values.items()},
            half_widths={f: float(t.ppf(0.975, n - 1) * stdev(v) / n ** 0.5) if n > 1 else None
                         for f, v in values.items()}))
    return rows


def format_floors(rows: Sequence[FloorRow], floors: Sequence[str] = FLOORS) -> str:
    """A fixed-width table: retrieval F1 of each floor per split, mean ± the 95% interval's half-width."""
    head = f"{'split':6} {'n':>3} " + " ".join(f"{f:>15}" for f in floors) + "  lexical/random"
    lines = [head, "-" * len(head)]
    for row in rows:
        cells = [f"{row.means[f]:6.2f} ± {row.half_widths[f]:5.2f}" if row.half_widths[f] is not None
                 else f"{row.means[f]:6.2f}        " for f in floors]
        ratio = row.ratio()
        lines.append(f"{row.split:6} {row.n:>3} " + " ".join(f"{c:>15}" for c in cells)
                     + (f"  {ratio:.2f}x" if ratio is not None else "  -"))
    return "\n".join(lines)
