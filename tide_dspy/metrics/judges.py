"""Judges for the identification and resolution components: an LLM judge (the paper's) and a lexical proxy.

Both are called as `judge(gold, finding, setting)` and return a dspy.Prediction with `identification`,
`resolution` (in [0, 1], None when not judged), their rationales and `failures`. Every judge has a `label`
that goes into each score and report, so proxy numbers are never mistaken for LLM-judged ones.
"""

from __future__ import annotations

import json
import logging

import dspy
from rapidfuzz import fuzz

from tide_dspy.domains import Setting, get_setting
from tide_dspy.metrics.scoring import NO_JUDGE_LABEL
from tide_dspy.retry import call_with_retries
from tide_dspy.schemas import JUDGE_RUBRICS, ChosenAction, Finding, GoldProblem
from tide_dspy.signatures import (
    JudgeActionParameters,
    JudgeIdentification,
    JudgePatch,
    JudgeResolution,
    SecondaryVerdict,
    Verdict,
)

logger = logging.getLogger(__name__)

LIKERT_MIN, LIKERT_MAX = 1, 5
PROXY_LABEL = "proxy-lexical"
DEFAULT_RUBRIC = "probe"
# PROBE's three grades (signatures.Judgment) as scores.
JUDGMENT_SCORES = {"correct": 1.0, "partially_correct": 0.5, "incorrect": 0.0}
# With --judge-runs N > 1 every repeat is a fresh sample at this temperature, with its own rollout id (so DSPy's
# cache never answers it); a provider that takes only its default temperature samples at that default.
JUDGE_RUN_TEMPERATURE = 1.0


def normalise_likert(score: int | float) -> tuple[float, bool]:
    """(s - 1) / 4 after clamping s into 1..5; the flag says whether clamping was needed."""
    clamped = min(max(score, LIKERT_MIN), LIKERT_MAX)
    return (clamped - LIKERT_MIN) / (LIKERT_MAX - LIKERT_MIN), clamped != score


def detail_fields(signature: type[dspy.Signature]) -> tuple[list[str], list[str]]:
    """(essential, secondary) detail fields of a PROBE details signature, told apart by their verdict types."""
    essential = [n for n, f in signature.output_fields.items() if f.annotation == Verdict]
    secondary = [n for n, f in signature.output_fields.items() if f.annotation == SecondaryVerdict]
    return essential, secondary


def probe_score(verdicts: dict[str, str], essential: list[str], secondary: list[str]) -> tuple[float, str]:
    """PROBE's identification score from per-detail verdicts: 0 when an essential detail is not correct, 0.5 when
    the essentials are correct but a secondary detail is wrong or missing, 1.0 when all are correct (a secondary
    detail the reference does not state cannot be got wrong). The note names the details that cost the score."""
    wrong = [n for n in essential if verdicts.get(n) != "correct"]
    if wrong:
        return 0.0, f"essential detail(s) not right: {', '.join(wrong)}"
    slips = [n for n in secondary if verdicts.get(n) in ("incorrect", "missing")]
    if slips:
        return 0.5, f"essentials right; secondary detail(s) wrong or missing: {', '.join(slips)}"
    return 1.0, "every detail right"


def _resolution_gate(gold: GoldProblem, finding: Finding, setting: Setting) -> tuple[float | None, str] | None:
    """The verdict when there is nothing to judge, or None when the judge must look."""
    what = setting.resolution_kind
    if setting.resolution_of(gold) is None:
        return None, f"not judged: the gold problem has no reference {what}"
    if setting.resolution_of(finding) is None:
        return 0.0, f"the finding has no {what}"
    return None


def action_gate(gold: GoldProblem, finding: Finding) -> tuple[float, str] | None:
    """PROBE's action check, in code: a finding whose action id is not the gold action's scores 0 on resolution
    (its parameters are not judged); None when the ids match."""
    if finding.action.action_id != gold.action.action_id:
        return 0.0, f"different action ({finding.action.action_id!r}, gold {gold.action.action_id!r})"
    return None


def _verdict(identification, identification_rationale, resolution, resolution_rationale, failures=0,
             identification_runs=None, resolution_runs=None) -> dspy.Prediction:
    return dspy.Prediction(
        identification=identification,
        identification_rationale=identification_rationale,
        resolution=resolution,
        resolution_rationale=resolution_rationale,
        failures=failures,
        identification_runs=identification_runs,
        resolution_runs=resolution_runs,
    )


class LLMJudge(dspy.Module):
    """The paper's judge: an LM rates each matched pair's description and resolution, on its own LM
    (`dspy.context(lm=self.lm)`), never the backbone.

    `rubric` "probe" (the default, the paper's): identification is 1 / 0.5 / 0 from the judge's per-detail verdicts
    (probe_score); workspace resolution is 0 unless the action id is the gold action's (checked in code), else the
    judge's grade of the parameters, 1 / 0.5 / 0 (the step score is the minimum of the two); repository resolution
    is the judge's grade of the patch against the gold patch, on the same three grades. "likert": one 1-5 rating of
    each, mapped to (s - 1) / 4, with the action judged by the LM too.

    `runs` > 1 judges each pair that many times, each a fresh sample (JUDGE_RUN_TEMPERATURE, its own rollout id),
    and scores the mean; the verdict keeps each run's score, so the judge's spread can be reported. A rating that
    still fails after `max_attempts` is recorded as None with the error in the rationale and counted in
    `failures`."""

    def __init__(self, lm, max_attempts: int = 2, rubric: str = DEFAULT_RUBRIC, runs: int = 1):
        super().__init__()
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if rubric not in JUDGE_RUBRICS:
            raise ValueError(f"rubric must be one of {JUDGE_RUBRICS}, got {rubric!r}")
        if runs < 1:
            raise ValueError(f"runs must be at least 1, got {runs}")
        self.lm = lm
        self.max_attempts = max_attempts
        self.rubric = rubric
        self.runs = runs
        model = getattr(lm, "model", type(lm).__name__)
        self.label = f"llm:{model} ({rubric}" + (f", {runs} runs)" if runs > 1 else ")")
        self.predictors: dict[type[dspy.Signature], dspy.Predict] = {}

    def predictor(self, signature: type[dspy.Signature]) -> dspy.Predict:
        """The one predictor of each judge signature this judge asks."""
        if signature not in self.predictors:
            self.predictors[signature] = dspy.Predict(signature)
        return self.predictors[signature]

    def _rate(self, predictor: dspy.Predict, score, run: int | None, **inputs) -> tuple[float | None, str, bool]:
        """One judgement: `score(prediction) -> (value, note)` on the predictor's answer; `run` None is the plain
        call, else the fresh sample of that repeat."""
        def rate(config: dict):
            out = predictor(**inputs, config=config)
            return out, *score(out)

        # A retry is a fresh sample (tide_dspy.retry), never the same cached bad answer. Malformed output or a
        # failing judge LM is recorded, never fatal to scoring.
        temperature = None if run is None else JUDGE_RUN_TEMPERATURE
        tried = call_with_retries(rate, self.max_attempts, lm=self.lm, rollout=run, temperature=temperature)
        if tried.ok:
            out, value, note = tried.value
            return value, " ".join(p for p in (note, str(out.rationale or "")) if p), False
        error = tried.errors[-1]
        logger.warning("judge %s failed after %d attempts: %s", self.label, self.max_attempts, error[:300])
        return None, f"judge failed after {self.max_attempts} attempts: {error[:500]}", True

    def _repeat(self, predictor: dspy.Predict, score, **inputs) -> tuple[float | None, str, int, list | None]:
        """The judgement `runs` times: (mean of the runs that succeeded, the first run's rationale, failures,
        each run's value or None with one run)."""
        if self.runs == 1:
            value, why, failed = self._rate(predictor, score, None, **inputs)
            return value, why, int(failed), None
        rated = [self._rate(predictor, score, run, **inputs) for run in range(1, self.runs + 1)]
        values = [v for v, _, _ in rated]
        known = [v for v in values if v is not None]
        mean = sum(known) / len(known) if known else None
        return mean, rated[0][1], sum(failed for _, _, failed in rated), values

    @staticmethod
    def _likert(out) -> tuple[float, str]:
        value, clamped = normalise_likert(int(out.score))
        return value, f"[score {out.score} clamped to {LIKERT_MIN}..{LIKERT_MAX}]" if clamped else ""

    @staticmethod
    def _details(signature):
        essential, secondary = detail_fields(signature)

        def score(out) -> tuple[float, str]:
            value, note = probe_score({n: out[n] for n in essential + secondary}, essential, secondary)
            return value, f"[{note}]"
        return score

    @staticmethod
    def _judgment(out) -> tuple[float, str]:
        return JUDGMENT_SCORES[out.judgment], f"[{out.judgment}]"

    def _identification(self, gold: GoldProblem, finding: Finding, setting: Setting):
        inputs = dict(reference=gold.description, prediction=finding.description)
        if self.rubric == "likert":
            return self._repeat(self.predictor(JudgeIdentification), self._likert, **inputs)
        signature = setting.identification_details
        return self._repeat(self.predictor(signature), self._details(signature), **inputs)

    def _resolution(self, gold: GoldProblem, finding: Finding, setting: Setting):
        gate = _resolution_gate(gold, finding, setting)
        if gate is not None:
            return gate[0], gate[1], 0, None
        if self.rubric == "likert":
            return self._repeat(self.predictor(JudgeResolution), self._likert, problem=gold.description,
                                reference=setting.render_resolution(gold),
                                prediction=setting.render_resolution(finding))
        if setting.resolution_kind == "patch":
            return self._repeat(self.predictor(JudgePatch), self._judgment, problem=gold.description,
                                reference=gold.patch,
                                prediction=finding.patch)
        gate = action_gate(gold, finding)
        if gate is not None:
            return gate[0], gate[1], 0, None
        params, why, failures, runs = self._repeat(
            self.predictor(JudgeActionParameters), self._judgment, problem=gold.description,
            action=f"{gold.action.action_id} [{gold.action.type or finding.action.type}]",
            reference=json.dumps(gold.action.parameters, ensure_ascii=False, sort_keys=True),
            prediction=json.dumps(finding.action.parameters, ensure_ascii=False, sort_keys=True))
        # The step score is the minimum of the action check (1 here: the ids match) and the parameters' grade.
        step = None if params is None else min(1.0, params)
        return step, f"same action; parameters: {why}", failures, runs

    def forward(self, gold: GoldProblem, finding: Finding, setting: str | Setting) -> dspy.Prediction:
        setting = get_setting(setting)
        # trace=None keeps judge calls out of the program's trace (GEPA and bootstrapping read it).
        with dspy.context(lm=self.lm, trace=None):
            ident, ident_why, ident_failures, ident_runs = self._identification(gold, finding, setting)
            resol, resol_why, resol_failures, resol_runs = self._resolution(gold, finding, setting)
        return _verdict(ident, ident_why, resol, resol_why, ident_failures + resol_failures, ident_runs, resol_runs)


def changed_lines(patch: str) -> list[str]:
    """The added and removed lines of a unified diff, sign kept, surrounding whitespace dropped."""
    return [
        line[0] + line[1:].strip()
        for line in (patch or "").splitlines()
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---")) and line[1:].strip()
    ]


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


class ProxyJudge:
    """A lexical stand-in for the LLM judge, for runs without a judge model. Its scores are labelled
    'proxy-lexical' everywhere and its rationales say they are a proxy; they are not the paper's metric."""

    label = PROXY_LABEL

    def __call__(self, gold: GoldProblem, finding: Finding, setting: str | Setting) -> dspy.Prediction:
        setting = get_setting(setting)
        ident = fuzz.token_set_ratio(gold.description, finding.description) / 100
        ident_why = f"{PROXY_LABEL} proxy: token-set similarity of the descriptions = {ident:.2f}"
        gate = _resolution_gate(gold, finding, setting)
        if gate is not None:
            resol, resol_why = gate
        else:
            similarity = {"action": self._action_similarity, "patch": self._patch_similarity}[setting.resolution_kind]
            resol, resol_why = similarity(setting.resolution_of(gold), setting.resolution_of(finding))
        return _verdict(ident, ident_why, resol, f"{PROXY_LABEL} proxy: {resol_why}")

    @staticmethod
    def _action_similarity(gold: ChosenAction, pred: ChosenAction) -> tuple[float, str]:
        if gold.action_id != pred.action_id:
            return 0.0, f"different action ({pred.action_id!r}, gold {gold.action_id!r}) = 0.00"
        if not gold.parameters:
            return 1.0, "same action, no gold parameters = 1.00"
        sims = [
            fuzz.token_set_ratio(_text(v), _text(pred.parameters[k])) / 100 if k in pred.parameters else 0.0
            for k, v in gold.parameters.items()
        ]
        value = sum(sims) / len(sims)
        return value, f"same action, mean parameter similarity = {value:.2f}"

    @staticmethod
    def _patch_similarity(gold: str, pred: str) -> tuple[float | None, str]:
        gold_lines, pred_lines = changed_lines(gold), changed_lines(pred)
        if not gold_lines:
            return None, "not judged: the gold patch changes no lines"
        value = fuzz.ratio("\n".join(gold_lines), "\n".join(pred_lines)) / 100
        return value, f"similarity of the changed lines of the patches = {value:.2f}"


def make_judge(spec, *, rubric: str | None = None, runs: int | None = None, **lm_options):
    """"none" (or None) -> no judge, "proxy" -> ProxyJudge, a dspy LM -> LLMJudge on it, any other string ->
    LLMJudge on `tide_dspy.backbones.get_lm(spec, **lm_options)`. A judge object is returned as is.

    An LLM judge rates on `rubric` ("probe" by default) `runs` times (default 1). A `backbones.JudgeSpec` (what
    the CLI passes) brings its own rubric, runs and LM options (retries, timeout, the judge's address) and, for a
    hosted judge, the one preflight call before any rating."""
    rubric = rubric or getattr(spec, "rubric", None) or DEFAULT_RUBRIC
    runs = runs or getattr(spec, "runs", None) or 1
    if runs > 1 and (spec is None or spec in (NO_JUDGE_LABEL, "proxy")):
        raise ValueError(f"--judge-runs {runs} needs an LLM judge (--judge MODEL): the {spec or 'none'} judge "
                         "gives the same score every time")
    if spec is None or spec == NO_JUDGE_LABEL:
        return None
    if spec == "proxy":
        return ProxyJudge()
    if isinstance(spec, dspy.BaseLM):
        return LLMJudge(spec, rubric=rubric, runs=runs)
    if isinstance(spec, str):
        from tide_dspy.backbones import get_lm  # imported only when a model is asked for

        lm = get_lm(str(spec), **{**getattr(spec, "lm_options", {}), **lm_options})
        if getattr(spec, "check", False):
            from tide_dspy.backbones.preflight import require_ready

            require_ready(lm, "--judge")
        return LLMJudge(lm, rubric=rubric, runs=runs)
    if callable(spec) and hasattr(spec, "label"):
        return spec
    raise TypeError(f"judge spec must be 'none', 'proxy', a backbone name or a dspy LM, not {type(spec).__name__}")
