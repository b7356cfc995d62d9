"""What run.py's tables say about each method beyond its mean: the 95% interval over instances, TIDE against each
baseline (difference, interval, paired test, effect size), and the calls, tokens and dollars behind each found
problem. The statistics are tide_dspy.metrics.stats; this module turns raw evaluation rows into table records,
Markdown cells and footnotes.

Raw rows are one per instance and run (`OUT/raw/<method>/run<r>.jsonl`); every number here is read from them.
"""

from __future__ import annotations

from tide_dspy.metrics import COMPONENTS
from tide_dspy.metrics.stats import (
    ALPHA,
    INTERVAL_NAME,
    TEST_NAME,
    compare,
    instance_means,
    mean_interval,
    min_sign_flip_p,
)

KINDS = ("coverage", "f1")
TARGET = "tide"  # the method every other is compared with


def instance_values(rows: list[dict], component: str, kind: str) -> dict[str, float]:
    """{instance id: the mean over runs of the rows' `kind` of `component`} (unjudged components: {})."""
    return instance_means((r["instance_id"], ((r.get("score") or {}).get(kind) or {}).get(component)) for r in rows)


def pct(value: float | None) -> float | None:
    return None if value is None else round(100 * value, 2)


def interval_fields(rows: list[dict]) -> dict:
    """Per component and kind: the mean over instances (runs averaged first) and its interval, in percent."""
    fields = {}
    for c in COMPONENTS:
        for kind in KINDS:
            interval = mean_interval(instance_values(rows, c, kind).values())
            fields[f"{c}_{kind}"] = pct(interval.mean)
            fields[f"{c}_{kind}_ci_low"] = pct(interval.low)
            fields[f"{c}_{kind}_ci_high"] = pct(interval.high)
    return fields


def comparison_records(raw: dict[str, list[dict]], target: str = TARGET) -> list[dict]:
    """`target` against every other method of `raw` on each component's coverage and F1: one record per
    (baseline, metric), differences in percentage points."""
    if target not in raw:
        return []
    records = []
    for baseline in raw:
        if baseline == target:
            continue
        for c in COMPONENTS:
            for kind in KINDS:
                result = compare(instance_values(raw[target], c, kind), instance_values(raw[baseline], c, kind))
                if result is None:
                    continue
                records.append({
                    "method": target, "baseline": baseline, "metric": f"{c}_{kind}", "n": result.n,
                    "diff": pct(result.diff), "ci_low": pct(result.low), "ci_high": pct(result.high),
                    "p": round(result.p, 4), "effect_size_dz": None if result.effect_size is None
                    else round(result.effect_size, 3), "min_p": round(result.min_p, 4), "test": TEST_NAME,
                    "note": result.note})
    return records


def rate_fields(scored: list[tuple[str, dict]], component: str, parts=("coverage", "precision", "f1")) -> dict:
    """For a curve's point: each part of `component` as a rate in [0, 1], the mean over instances of each
    instance's mean over runs, and its interval (`<part>_ci_low`, `<part>_ci_high`). `scored`: (instance id,
    score as an InstanceScore's dict) per row."""
    fields = {}
    for part in parts:
        interval = mean_interval(instance_means((i, (s.get(part) or {}).get(component)) for i, s in scored).values())
        for key, value in ((part, interval.mean), (f"{part}_ci_low", interval.low), (f"{part}_ci_high", interval.high)):
            fields[key] = None if value is None else round(value, 4)
    return fields


def cost_fields(rows: list[dict]) -> dict:
    """The backbone calls, tokens and dollars behind the rows (rounds and scan), in all and per matched gold
    problem. Dollars are None when no call was priced (a local backbone); cache hits cost nothing."""
    rounds = [rd for r in rows for rd in r.get("rounds") or []]
    scans = [r["scan"] for r in rows if r.get("scan")]
    calls = sum(rd.get("lm_calls", 0) for rd in rounds) + sum(s.get("lm_calls", 0) for s in scans)

    def total(key: str, records) -> int | None:
        known = [x[key] for x in records if x.get(key) is not None]
        return sum(known) if known else None

    tokens_in = total("input_tokens", [*rounds, *scans])
    tokens_out = total("output_tokens", [*rounds, *scans])
    costs = [rd["cost_usd"] for rd in rounds if rd.get("cost_usd") is not None]
    usd = round(sum(costs), 6) if costs else None
    # A gold problem is found when some finding overlaps its evidence (retrieval matching pairs them).
    matched = sum(r["score"]["n_gold"] - len(r["score"]["unmatched_gold"]) for r in rows if r.get("score"))
    return {"lm_calls": calls, "input_tokens": tokens_in, "output_tokens": tokens_out, "cost_usd": usd,
            "matched_gold": matched,
            "calls_per_matched": round(calls / matched, 2) if matched else None,
            "usd_per_matched": round(usd / matched, 6) if matched and usd is not None else None}


def cell(record: dict, key: str) -> str:
    """`mean [low, high]` in percent, `mean` without an interval, `n/a` when not scored."""
    mean = record.get(key)
    if mean is None:
        return "n/a"
    low, high = record.get(f"{key}_ci_low"), record.get(f"{key}_ci_high")
    return f"{mean:.2f}" if low is None else f"{mean:.2f} [{low:.2f}, {high:.2f}]"


def method_table(records: list[dict]) -> list[str]:
    """Markdown: one row per method, coverage and F1 of each component with their intervals."""
    head = " | ".join(f"{c} {'cov' if kind == 'coverage' else 'F1'}" for c in COMPONENTS for kind in KINDS)
    lines = [f"| method | {head} |", "|---|" + "---|" * (len(COMPONENTS) * len(KINDS))]
    for r in records:
        lines.append(f"| {r['method']} | " + " | ".join(cell(r, f"{c}_{kind}") for c in COMPONENTS for kind in KINDS)
                     + " |")
    return lines


def comparison_table(comparisons: list[dict], kind: str = "f1") -> list[str]:
    """Markdown: one row per baseline, TIDE's difference in each component's `kind` with its interval, p and
    d_z."""
    if not comparisons:
        return []
    by = {(c["baseline"], c["metric"]): c for c in comparisons}
    baselines = list(dict.fromkeys(c["baseline"] for c in comparisons))
    target = comparisons[0]["method"]
    label = "cov" if kind == "coverage" else "F1"
    lines = [f"{target} against each baseline, {label} difference in points [95% CI], p, d_z:", "",
             f"| baseline | {' | '.join(f'{c} {label}' for c in COMPONENTS)} |",
             "|---|" + "---|" * len(COMPONENTS)]
    for b in baselines:
        cells = []
        for c in COMPONENTS:
            r = by.get((b, f"{c}_{kind}"))
            if r is None:
                cells.append("n/a")
                continue
            ci = "" if r["ci_low"] is None else f" [{r['ci_low']:+.2f}, {r['ci_high']:+.2f}]"
            dz = "-" if r["effect_size_dz"] is None else f"{r['effect_size_dz']:.2f}"
            cells.append(f"{r['diff']:+.2f}{ci}, p {r['p']:.3g}, d_z {dz}")
        lines.append(f"| {b} | {' | '.join(cells)} |")
    return lines


def cost_table(records: list[dict]) -> list[str]:
    """Markdown: each method's backbone calls, tokens and dollars, and per matched gold problem."""
    def money(v) -> str:
        return "-" if v is None else f"${v:.4f}"

    lines = ["| method | LM calls | tokens in / out | cost | matched gold | calls per matched | cost per matched |",
             "|---|---|---|---|---|---|---|"]
    for r in records:
        tokens = f"{r['input_tokens'] if r['input_tokens'] is not None else '-'} / " \
                 f"{r['output_tokens'] if r['output_tokens'] is not None else '-'}"
        per_call = "-" if r["calls_per_matched"] is None else f"{r['calls_per_matched']:.2f}"
        lines.append(f"| {r['method']} | {r['lm_calls']} | {tokens} | {money(r['cost_usd'])} | {r['matched_gold']} "
                     f"| {per_call} | {money(r['usd_per_matched'])} |")
    return lines


def footnotes(comparisons: list[dict], runs: int) -> list[str]:
    """What the intervals and the test are, and where p < 0.05 is out of reach."""
    notes = [f"Intervals: {INTERVAL_NAME}. Each cell is the mean over instances of the mean over {runs} run(s)."]
    if comparisons:
        notes.append(f"Test: {TEST_NAME}, on the per-instance means; d_z = mean difference / SD of the "
                     "differences. Differences are in percentage points.")
        for n in sorted({c["n"] for c in comparisons}):
            best = min_sign_flip_p(n)
            if best >= ALPHA:
                notes.append(f"With n={n} instances the smallest p this test can give is {best:.3g} (2/2^n, larger "
                             f"when differences tie at 0), so p < {ALPHA} is out of reach: more instances are needed.")
    return notes
