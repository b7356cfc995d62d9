"""The TIDE score as DSPy metrics: a float metric for dspy.Evaluate and optimizers, and a GEPA metric with feedback."""

from __future__ import annotations

from tide_dspy.metrics.judges import make_judge
from tide_dspy.metrics.scoring import (
    COMPONENTS,
    JUDGED_COMPONENTS,
    NO_JUDGE_LABEL,
    InstanceScore,
    as_findings,
    as_gold_problems,
    score_instance,
)
from tide_dspy.schemas import Instance
from tide_dspy.util.fields import field_of

METRIC_COMPONENTS = (*COMPONENTS, "mean")
METRIC_KINDS = ("f1", "coverage")
SNIPPET_CHARS = 240


def _gold_and_setting(example):
    """The gold problems and setting of a dspy.Example holding `case` (an Instance) or `gold`."""
    instance = field_of(example, "case")
    if instance is not None:
        instance = instance if isinstance(instance, Instance) else Instance.model_validate(instance)
        return as_gold_problems(instance), instance.setting
    gold = field_of(example, "gold")
    if gold is None:
        raise ValueError("the example has neither `case` (an Instance) nor `gold` (a list of gold problems)")
    return as_gold_problems(gold), field_of(example, "setting")


def _check(component: str, kind: str, judge) -> None:
    if component not in METRIC_COMPONENTS:
        raise ValueError(f"component {component!r} is not one of {list(METRIC_COMPONENTS)}")
    if kind not in METRIC_KINDS:
        raise ValueError(f"kind {kind!r} is not one of {list(METRIC_KINDS)}")
    if judge is None and component != "retrieval":
        raise ValueError(
            f"component {component!r} needs a judge: pass judge='proxy', a judge model name, or an LLMJudge"
        )


def component_value(score: InstanceScore, component: str = "retrieval", kind: str = "f1") -> float:
    """One number from an InstanceScore: a component's F1 or coverage, or the mean of the three."""
    table = score.f1 if kind == "f1" else score.coverage
    if component == "mean":
        return sum(table[c] for c in COMPONENTS) / len(COMPONENTS)
    return table[component]


def _score(example, pred, judge, overlap) -> tuple[InstanceScore, list, list]:
    gold, setting = _gold_and_setting(example)
    findings = as_findings(field_of(pred, "findings") or [])
    return score_instance(gold, findings, judge=judge, overlap=overlap, setting=setting), gold, findings


def tide_metric(component: str = "retrieval", kind: str = "f1", judge=None, overlap: str = "f1"):
    """A DSPy metric `(example, pred, trace=None) -> float` on `example.case` and `pred.findings`.

    `component`: retrieval | identification | resolution | mean (of the three); `kind`: f1 | coverage.
    `judge`: None, "proxy", a model name, or a judge object; the judged components require one."""
    judge = make_judge(judge) if isinstance(judge, str) else judge
    _check(component, kind, judge)

    def metric(example, pred, trace=None) -> float:
        score, _, _ = _score(example, pred, judge, overlap)
        return component_value(score, component, kind)

    metric.__name__ = f"tide_{component}_{kind}"
    return metric


def scan_recall_metric(example, pred, trace=None) -> float:
    """The share of the gold evidence among the scan's first focus_size suspects (`pred.scan`, a ScanRecord).

    It rewards ranking, not citing, so it gives an optimizer signal where the findings' F1 is still 0."""
    scan = field_of(pred, "scan")
    recall = field_of(scan, "recall_at_focus") if scan is not None else None
    if recall is None:
        raise ValueError("scan-recall needs a scanning program (scan=True) on an instance with gold evidence")
    return float(recall)


def scan_feedback_metric(example, pred, trace=None, pred_name=None, pred_trace=None):
    """scan_recall_metric with GEPA's feedback: where each gold artifact ranked, and what the scan ranked above the
    ones it missed, each with its rating and the model's reason."""
    import dspy

    score = scan_recall_metric(example, pred, trace)
    scan, instance = field_of(pred, "scan"), field_of(example, "case")
    gold = [e for p in instance.problems for e in p.evidence]
    suspects = {s.artifact_id: s for s in scan.suspects}
    ranked, focus = list(scan.ranked), scan.focus_size

    def line(artifact_id: str) -> str:
        s = suspects[artifact_id]
        return f"{artifact_id} ranked {ranked.index(artifact_id) + 1} (rated {s.score:.1f}: {_snippet(s.reason)})"

    found = [g for g in dict.fromkeys(gold) if g in ranked[:focus]]
    missed = [g for g in dict.fromkeys(gold) if g in ranked and g not in found]
    lines = [f"Scan recall@{focus} {score:.2f}: {len(found)} of {len(set(gold))} gold artifacts are among the {focus} "
             f"ranked most suspect of {len(ranked)}."]
    lines += [f"Found: {line(g)}" for g in found[:3]] + [f"Missed: {line(g)}" for g in missed[:3]]
    if missed:
        above = [a for a in ranked[: ranked.index(missed[0])] if a not in gold][:3]
        lines += [f"Ranked above the missed ones, not gold: {line(a)}" for a in above]
    return dspy.Prediction(score=score, feedback="\n".join(lines))


def _snippet(text: str) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 3] + "..."


def feedback_text(score: InstanceScore, gold, findings, component: str = "retrieval", kind: str = "f1") -> str:
    """What a reflecting optimizer needs: the score, the missed gold problems, the spurious and duplicate
    findings, and for matched pairs the wrong evidence and the judge's rationale when it was not full marks."""
    value = component_value(score, component, kind)
    covered = score.n_gold - len(score.unmatched_gold)
    lines = [
        f"Score {value:.2f} ({kind} of {component}; judge: {score.judge_label}). "
        f"{covered} of {score.n_gold} gold problems found with {score.n_findings} findings."
    ]
    for i in score.unmatched_gold:
        g = gold[i]
        lines.append(
            f"Missed gold problem {g.problem_id} (evidence {', '.join(g.evidence)}): {_snippet(g.description)}"
        )
    for j in score.spurious_findings:
        f = findings[j]
        lines.append(
            f"Spurious finding #{j + 1} (evidence {', '.join(f.evidence) or 'none'}) matches no gold problem: "
            f"{_snippet(f.description)}"
        )
    credited = {p.gold_index: p.finding_index for p in score.pairs if "precision" in p.used_for}
    for j in score.duplicate_findings:
        i = score.finding_best[j]
        lines.append(
            f"Finding #{j + 1} repeats gold problem {gold[i].problem_id}, already credited to finding "
            f"#{credited[i] + 1}; it counts 0 for precision."
        )
    for p in score.pairs:
        if "coverage" not in p.used_for:
            continue
        g, f = gold[p.gold_index], findings[p.finding_index]
        notes = []
        if p.retrieval < 1:
            missing, extra = sorted(set(g.evidence) - set(f.evidence)), sorted(set(f.evidence) - set(g.evidence))
            notes.append(
                f"retrieval {p.retrieval:.2f}, missing evidence {missing or '-'}, extra evidence {extra or '-'}"
            )
        for c in JUDGED_COMPONENTS:
            judged = getattr(p, c)
            if score.judge_label != NO_JUDGE_LABEL and (judged is None or judged < 1):
                shown = "not judged" if judged is None else f"{judged:.2f}"
                notes.append(f"{c} {shown}: {_snippet(getattr(p, c + '_rationale'))}")
        if notes:
            lines.append(f"Gold problem {p.problem_id}, matched by finding #{p.finding_index + 1}: " + "; ".join(notes))
    return "\n".join(lines)


def tide_feedback_metric(component: str = "retrieval", kind: str = "f1", judge=None, overlap: str = "f1"):
    """A GEPA metric `(gold, pred, trace=None, pred_name=None, pred_trace=None) -> dspy.Prediction(score, feedback)`.

    The feedback is program-level (the same for every predictor): missed gold problems, spurious findings."""
    import dspy

    judge = make_judge(judge) if isinstance(judge, str) else judge
    _check(component, kind, judge)

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None) -> dspy.Prediction:
        score, problems, findings = _score(gold, pred, judge, overlap)
        return dspy.Prediction(
            score=component_value(score, component, kind),
            feedback=feedback_text(score, problems, findings, component, kind),
        )

    metric.__name__ = f"tide_feedback_{component}_{kind}"
    return metric
