"""Pure functions over evaluation rows (the per-instance JSONL that `tide_dspy.evaluation` writes).

A row holds the findings with the round (or independent call) that produced each, so the score after any
budget k <= T is the score of the findings of rounds <= k: one run of T rounds gives every smaller budget.
That holds exactly for TIDE (round k never depends on later rounds) and for Multi-Agent (a pool of the
first k calls).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from statistics import mean, pstdev

from tide_dspy.metrics import COMPONENTS, score_instance
from tide_dspy.schemas import Finding, Instance


def row_findings(row: dict) -> list[Finding]:
    return [Finding.model_validate(f) for f in row.get("findings") or []]


def score_at_budget(row: dict, instance: Instance, k: int, judge=None):
    """The instance score of the findings produced within the first k rounds/calls."""
    findings = [f for f in row_findings(row) if f.round <= k]
    return score_instance(instance.problems, findings, judge=judge, setting=instance.setting)


def mean_std(values: Iterable[float | None]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    return mean(vals), (pstdev(vals) if len(vals) > 1 else 0.0)


def budget_curve(rows: list[dict], instances: dict[str, Instance], budgets: Iterable[int], component="retrieval",
                 judge=None) -> dict[int, dict[str, float | None]]:
    """Macro coverage, precision and F1 of `component` at each budget k."""
    curve = {}
    for k in budgets:
        scores = [score_at_budget(r, instances[r["instance_id"]], k, judge) for r in rows if not r.get("error")]
        curve[k] = {
            kind: mean_std(getattr(s, kind)[component] for s in scores)[0]
            for kind in ("coverage", "precision", "f1")
        }
    return curve


def steps_new_vs_rediscovered(rows: list[dict]) -> dict[int, dict[str, float]]:
    """Mean new and re-discovered findings at each step, over instances (a stopped run adds zeros)."""
    horizon = max((len(r.get("rounds") or []) for r in rows), default=0)
    out = {}
    for t in range(1, horizon + 1):
        new, redisc = [], []
        for r in rows:
            rounds = r.get("rounds") or []
            rec = rounds[t - 1] if t <= len(rounds) else {"new": 0, "rediscovered": 0}
            new.append(rec["new"])
            redisc.append(rec["rediscovered"])
        out[t] = {"new": mean(new) if new else 0.0, "rediscovered": mean(redisc) if redisc else 0.0}
    return out


def template_citations(rows: list[dict]) -> Counter:
    """How often each template id is cited by findings; novel (empty) citations count as 'novel'."""
    return Counter((f.get("used_template_id") or "novel") for r in rows for f in r.get("findings") or [])


def per_instance_counts(rows: list[dict], instances: dict[str, Instance]) -> list[dict]:
    """Discovered findings per instance and retrieval coverage, beside the number of gold problems."""
    out = []
    for r in rows:
        if r.get("error"):
            continue
        inst = instances[r["instance_id"]]
        score = r.get("score") or {}
        out.append({
            "instance_id": r["instance_id"],
            "gold_problems": len(inst.problems),
            "findings": len(r.get("findings") or []),
            "retrieval_coverage": (score.get("coverage") or {}).get("retrieval"),
        })
    return out


def output_hygiene(rows: list[dict]) -> dict[str, float | int]:
    """What the model's answers were made of: findings, how many kept a valid evidence id, ids dropped or resolved
    from an alias, unparseable answers, failed rounds, LM calls and seconds. Explains a score of zero."""
    rounds = [rec for r in rows for rec in r.get("rounds") or []]
    findings = [f for r in rows for f in r.get("findings") or []]
    return {
        "instances": len(rows),
        "errors": sum(1 for r in rows if r.get("error")),
        "findings": len(findings),
        "with_valid_evidence": sum(1 for f in findings if f.get("evidence")),
        "dropped_ids": sum(rec.get("dropped_evidence", 0) for rec in rounds),
        "aliased_ids": sum(rec.get("aliased_evidence", 0) for rec in rounds),
        "bad_actions": sum(1 for f in findings
                           if {"action_not_in_library", "missing_parameters"} & set(f.get("flags") or [])),
        "parse_failures": sum(rec.get("parse_failures", 0) for rec in rounds),
        "failed_rounds": sum(1 for rec in rounds if rec.get("failed")),
        "lm_calls": sum(rec.get("lm_calls", 0) for rec in rounds),
        "seconds": round(sum(r.get("seconds", 0) for r in rows), 1),
    }


def cited_position(rows: list[dict], instances: dict[str, Instance], order_seed: int | None = None) -> float | None:
    """Mean position of the cited artifacts in the order shown, from 0 (first listed) to 1 (last): about 0.5 for
    citations that ignore position, near 0 for a method that cites what it read first."""
    from tide_dspy.domains import ContextView

    positions = []
    for r in rows:
        ids = ContextView.of(instances[r["instance_id"]], order_seed).ids
        where = {i: n / max(1, len(ids) - 1) for n, i in enumerate(ids)}
        positions += [where[e] for f in r.get("findings") or [] for e in f.get("evidence") or [] if e in where]
    return round(mean(positions), 3) if positions else None


def scan_recall(rows: list[dict]) -> float | None:
    """Mean share of gold evidence among the artifacts a scan put in focus (None for runs without a scan)."""
    values = [r["scan"]["recall_at_focus"] for r in rows if (r.get("scan") or {}).get("recall_at_focus") is not None]
    return round(mean(values), 3) if values else None


def summarize_runs(aggregates: list[dict]) -> dict[str, dict[str, tuple[float | None, float | None]]]:
    """Mean and spread over repeated runs of each coverage/F1 component."""
    return {
        kind: {c: mean_std(a[kind].get(c) for a in aggregates) for c in COMPONENTS}
        for kind in ("coverage", "f1")
    }
