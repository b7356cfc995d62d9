"""The TIDE score as pure functions: evidence overlap, retrieval-only matching, coverage, precision and F1.

Matching (SPEC "Scoring"): each gold problem is paired with the finding of highest retrieval, each finding
with the gold problem of highest retrieval. When several findings pick the same gold problem, only the one
with the highest retrieval is credited on the precision side; the others count 0. Ties go to the earlier
finding (and, for a finding, to the earlier gold problem). Retrieval 0 means unmatched: 0 on every component.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, ValidationError

from tide_dspy.domains import Setting, get_setting, setting_of_gold
from tide_dspy.schemas import Finding, GoldProblem, Instance
from tide_dspy.util.diffs import looks_like_diff

COMPONENTS = ("retrieval", "identification", "resolution")
JUDGED_COMPONENTS = ("identification", "resolution")
OVERLAP_KINDS = ("f1", "jaccard", "recall")
NO_JUDGE_LABEL = "none"

OverlapKind = Literal["f1", "jaccard", "recall"]
Component = Literal["retrieval", "identification", "resolution"]


class Judge(Protocol):
    """What `score_instance` needs from a judge (LLMJudge, ProxyJudge, or a test stub).

    The call returns an object with `identification` and `resolution` (floats in [0, 1], or None when that
    judgement failed), `identification_rationale`, `resolution_rationale` and `failures` (failed judgements)."""

    label: str

    def __call__(self, gold: GoldProblem, finding: Finding, setting: Setting) -> Any: ...


def retrieval_overlap(pred_ids, gold_ids, kind: OverlapKind = "f1") -> float:
    """Overlap of a finding's evidence ids with a gold problem's: set F1 (default), Jaccard or recall.

    Either set empty scores 0."""
    if kind not in OVERLAP_KINDS:
        raise ValueError(f"overlap kind {kind!r} is not one of {list(OVERLAP_KINDS)}")
    for name, ids in (("pred_ids", pred_ids), ("gold_ids", gold_ids)):
        if isinstance(ids, str):
            raise TypeError(f"{name} must be a collection of artifact ids, not the string {ids!r}")
    pred, gold = set(pred_ids), set(gold_ids)
    if not pred or not gold:
        return 0.0
    hits = len(pred & gold)
    if kind == "recall":
        return hits / len(gold)
    if kind == "jaccard":
        return hits / len(pred | gold)
    return 2 * hits / (len(pred) + len(gold))


# ---- inputs ----


def _resolution_fields(item: dict) -> dict:
    """A plain dict may give `action` as a string: a unified diff is a patch, anything else an action id."""
    action = item.get("action")
    if not isinstance(action, str):
        return item
    rest = {k: v for k, v in item.items() if k != "action"}
    if looks_like_diff(action):
        return {**rest, "patch": action}
    return {**rest, "action": {"action_id": action}}


def as_gold_problems(gold) -> list[GoldProblem]:
    """Gold problems from GoldProblem objects, plain dicts (evidence/description/action or patch), or an Instance."""
    if isinstance(gold, Instance):
        return list(gold.problems)
    problems = []
    for i, g in enumerate(gold):
        if isinstance(g, GoldProblem):
            problems.append(g)
            continue
        if not isinstance(g, dict):
            raise TypeError(f"gold[{i}]: expected a GoldProblem or a dict, got {type(g).__name__}")
        try:
            problems.append(GoldProblem.model_validate({"problem_id": f"gold-{i + 1}", **_resolution_fields(g)}))
        except ValidationError as e:
            raise ValueError(
                f"gold[{i}]: not a gold problem (needs description, evidence, action or patch): {e}"
            ) from None
    return problems


def as_findings(findings) -> list[Finding]:
    """Findings from Finding objects or plain dicts (evidence/description/action or patch)."""
    out = []
    for j, f in enumerate(findings or []):
        if isinstance(f, Finding):
            out.append(f)
            continue
        if not isinstance(f, dict):
            raise TypeError(f"findings[{j}]: expected a Finding or a dict, got {type(f).__name__}")
        if "evidence" not in f:
            raise ValueError(f"findings[{j}]: missing 'evidence' (the list of artifact ids the finding cites)")
        try:
            out.append(Finding.model_validate(_resolution_fields(f)))
        except ValidationError as e:
            raise ValueError(
                f"findings[{j}]: not a finding (needs description, evidence, action or patch): {e}"
            ) from None
    return out


def setting_of(setting: str | Setting | None, gold: list[GoldProblem]) -> Setting:
    """The Setting of a name or a Setting, or (when None) of the gold (domains.setting_of_gold)."""
    return setting_of_gold(gold) if setting is None else get_setting(setting)


# ---- matching ----


@dataclass(frozen=True)
class Matching:
    """Retrieval-only matching. `retrieval[i][j]` is gold i against finding j."""

    retrieval: list[list[float]]
    gold_best: list[int | None]  # best finding per gold, None when nothing overlaps
    finding_best: list[int | None]  # best gold per finding, None when it overlaps no gold
    credited: dict[int, int]  # finding -> gold, for the findings credited on the precision side

    @property
    def duplicates(self) -> list[int]:
        """Findings that picked a gold problem already credited to a better (or earlier) finding."""
        return [j for j, i in enumerate(self.finding_best) if i is not None and j not in self.credited]


def _first_best(values: list[float]) -> int | None:
    """Index of the first maximum, or None when no value is above 0."""
    best = None
    for k, v in enumerate(values):
        if v > 0 and (best is None or v > values[best]):
            best = k
    return best


def match(gold: list[GoldProblem], findings: list[Finding], overlap: OverlapKind = "f1") -> Matching:
    r = [[retrieval_overlap(f.evidence, g.evidence, overlap) for f in findings] for g in gold]
    gold_best = [_first_best(row) for row in r]
    finding_best = [_first_best([row[j] for row in r]) for j in range(len(findings))]
    winner: dict[int, int] = {}  # gold -> credited finding
    for j, i in enumerate(finding_best):
        if i is not None and (i not in winner or r[i][j] > r[i][winner[i]]):
            winner[i] = j
    return Matching(r, gold_best, finding_best, {j: i for i, j in winner.items()})


# ---- scores ----


class PairRecord(BaseModel):
    """One matched (gold, finding) pair with its component scores. `used_for` says on which side it counts."""

    gold_index: int
    finding_index: int
    problem_id: str
    retrieval: float
    identification: float | None = None
    resolution: float | None = None
    identification_rationale: str = ""
    resolution_rationale: str = ""
    used_for: list[Literal["coverage", "precision"]] = Field(default_factory=list)
    # With a judge that rates each pair several times (--judge-runs): each run's score; the component is their mean.
    identification_runs: list[float | None] | None = None
    resolution_runs: list[float | None] | None = None

    def value(self, component: str, run: int | None = None) -> float:
        """The component's score (of one judge run, when `run` is given and the pair has runs). A failed judgement
        (None) counts 0, so a judge failure can never raise a score."""
        runs = getattr(self, f"{component}_runs", None) if run is not None else None
        return (runs[run] if runs else getattr(self, component)) or 0.0


class InstanceScore(BaseModel):
    """Coverage, precision and F1 per component. Judged components are None when no judge was used."""

    coverage: dict[str, float | None]
    precision: dict[str, float | None]
    f1: dict[str, float | None]
    pairs: list[PairRecord] = Field(default_factory=list)
    judge_label: str = NO_JUDGE_LABEL
    judge_failures: int = 0
    n_gold: int = 0
    n_findings: int = 0
    unmatched_gold: list[int] = Field(default_factory=list)
    spurious_findings: list[int] = Field(default_factory=list)
    duplicate_findings: list[int] = Field(default_factory=list)
    finding_best: list[int | None] = Field(default_factory=list)  # per finding, the gold index it matched
    # With several judge runs: the standard deviation over runs of each judged component's coverage and F1
    # ({"coverage": {component: sd}, "f1": {...}}), each run scoring every pair with that run's judgement.
    judge_spread: dict[str, dict[str, float]] | None = None


def harmonic_mean(a: float, b: float) -> float:
    return 2 * a * b / (a + b) if a + b > 0 else 0.0


def rates_pairs_at_once(judge) -> bool:
    """Whether `judge` rates an instance's pairs all at once: a judge whose LM sends its calls in provider batches
    (tide_dspy.batch), where each call rated in turn would wait for a batch of its own."""
    return getattr(getattr(judge, "lm", None), "tide_batch", None) is not None


def _verdicts(judge, keys, gold, findings, setting) -> dict[tuple[int, int], Any]:
    """The judge's verdict on each key, in turn, or all at once (rates_pairs_at_once), each in a copy of the
    caller's context so the judge's LM settings hold there too."""
    if judge is None:
        return {}
    if not rates_pairs_at_once(judge) or len(keys) < 2:
        return {(i, j): judge(gold[i], findings[j], setting) for i, j in keys}
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(keys), thread_name_prefix="tide-judge") as pool:
        futures = {(i, j): pool.submit(contextvars.copy_context().run, judge, gold[i], findings[j], setting)
                   for i, j in keys}
        return {key: future.result() for key, future in futures.items()}


def _judge_pairs(keys, gold, findings, matching, judge, setting) -> tuple[dict[tuple[int, int], PairRecord], int]:
    """One PairRecord per distinct (gold, finding) key; the judge is called once per key."""
    pairs, failures = {}, 0
    verdicts = _verdicts(judge, list(dict.fromkeys(keys)), gold, findings, setting)
    for i, j in keys:
        if (i, j) in pairs:
            continue
        record = PairRecord(
            gold_index=i, finding_index=j, problem_id=gold[i].problem_id, retrieval=matching.retrieval[i][j]
        )
        if judge is not None:
            verdict = verdicts[(i, j)]
            record.identification = getattr(verdict, "identification", None)
            record.resolution = getattr(verdict, "resolution", None)
            record.identification_rationale = getattr(verdict, "identification_rationale", "") or ""
            record.resolution_rationale = getattr(verdict, "resolution_rationale", "") or ""
            record.identification_runs = getattr(verdict, "identification_runs", None)
            record.resolution_runs = getattr(verdict, "resolution_runs", None)
            failures += int(getattr(verdict, "failures", 0) or 0)
        pairs[(i, j)] = record
    return pairs, failures


def score_instance(
    gold, findings, judge: Judge | None = None, overlap: OverlapKind = "f1", setting=None
) -> InstanceScore:
    """Score one instance's findings against its gold problems (see the module docstring for the matching)."""
    gold = as_gold_problems(gold)
    findings = as_findings(findings)
    setting = setting_of(setting, gold)
    matching = match(gold, findings, overlap)

    coverage_keys = [(i, j) for i, j in enumerate(matching.gold_best) if j is not None]
    precision_keys = sorted((i, j) for j, i in matching.credited.items())
    pairs, failures = _judge_pairs(coverage_keys + precision_keys, gold, findings, matching, judge, setting)
    for key in coverage_keys:
        pairs[key].used_for.append("coverage")
    for key in precision_keys:
        pairs[key].used_for.append("precision")

    components = COMPONENTS if judge is not None else ("retrieval",)
    coverage: dict[str, float | None] = dict.fromkeys(COMPONENTS)
    precision: dict[str, float | None] = dict.fromkeys(COMPONENTS)
    f1: dict[str, float | None] = dict.fromkeys(COMPONENTS)
    for c in components:
        coverage[c], precision[c], f1[c] = _component(pairs, coverage_keys, precision_keys, c, len(gold),
                                                      len(findings))

    return InstanceScore(
        coverage=coverage,
        precision=precision,
        f1=f1,
        pairs=list(pairs.values()),
        judge_label=judge.label if judge is not None else NO_JUDGE_LABEL,
        judge_failures=failures,
        n_gold=len(gold),
        n_findings=len(findings),
        unmatched_gold=[i for i, j in enumerate(matching.gold_best) if j is None],
        spurious_findings=[j for j, i in enumerate(matching.finding_best) if i is None],
        duplicate_findings=matching.duplicates,
        finding_best=matching.finding_best,
        judge_spread=_judge_spread(pairs, coverage_keys, precision_keys, len(gold), len(findings)),
    )


def _component(pairs, coverage_keys, precision_keys, c: str, n_gold: int, n_findings: int,
               run: int | None = None) -> tuple[float, float, float]:
    """(coverage, precision, F1) of component c over the pairs (of one judge run, when `run` is given)."""
    coverage = sum(pairs[k].value(c, run) for k in coverage_keys) / n_gold if n_gold else 0.0
    precision = sum(pairs[k].value(c, run) for k in precision_keys) / n_findings if n_findings else 0.0
    return coverage, precision, harmonic_mean(coverage, precision)


def _judge_spread(pairs, coverage_keys, precision_keys, n_gold: int, n_findings: int) -> dict | None:
    """The standard deviation over judge runs of each judged component's coverage and F1 (None with one run)."""
    runs = max((len(getattr(p, f"{c}_runs") or []) for p in pairs.values() for c in JUDGED_COMPONENTS), default=0)
    if runs < 2:
        return None
    spread: dict[str, dict[str, float]] = {"coverage": {}, "f1": {}}
    for c in JUDGED_COMPONENTS:
        per_run = [_component(pairs, coverage_keys, precision_keys, c, n_gold, n_findings, r) for r in range(runs)]
        spread["coverage"][c] = statistics.stdev(cov for cov, _, _ in per_run)
        spread["f1"][c] = statistics.stdev(f for _, _, f in per_run)
    return spread


def aggregate(scores) -> dict:
    """Macro-average over instances. A component that is None (unjudged) in any instance stays None."""
    scores = [s if isinstance(s, InstanceScore) else InstanceScore.model_validate(s) for s in scores]
    labels = sorted({s.judge_label for s in scores})
    if len(labels) > 1:
        raise ValueError(f"cannot average scores from different judges {labels}; rescore with one judge")
    out: dict[str, Any] = {}
    for part in ("coverage", "precision", "f1"):
        out[part] = {}
        for c in COMPONENTS:
            values = [getattr(s, part)[c] for s in scores]
            out[part][c] = None if not values or None in values else sum(values) / len(values)
    out["n_instances"] = len(scores)
    out["judge"] = labels[0] if labels else NO_JUDGE_LABEL
    out["judge_failures"] = sum(s.judge_failures for s in scores)
    spreads = [s.judge_spread for s in scores if s.judge_spread]
    out["judge_spread"] = {part: {c: sum(sp[part][c] for sp in spreads) / len(spreads) for c in JUDGED_COMPONENTS}
                           for part in ("coverage", "f1")} if spreads else None
    return out
