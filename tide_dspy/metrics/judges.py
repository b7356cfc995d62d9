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
from tide_dspy.schemas import ChosenAction, Finding, GoldProblem
from tide_dspy.signatures import JudgeIdentification, JudgeResolution

logger = logging.getLogger(__name__)

LIKERT_MIN, LIKERT_MAX = 1, 5
PROXY_LABEL = "proxy-lexical"


def normalise_likert(score: int | float) -> tuple[float, bool]:
    """(s - 1) / 4 after clamping s into 1..5; the flag says whether clamping was needed."""
    clamped = min(max(score, LIKERT_MIN), LIKERT_MAX)
    return (clamped - LIKERT_MIN) / (LIKERT_MAX - LIKERT_MIN), clamped != score


def _resolution_gate(gold: GoldProblem, finding: Finding, setting: Setting) -> tuple[float | None, str] | None:
    """The verdict when there is nothing to judge, or None when the judge must look."""
    what = setting.resolution_kind
    if setting.resolution_of(gold) is None:
        return None, f"not judged: the gold problem has no reference {what}"
    if setting.resolution_of(finding) is None:
        return 0.0, f"the finding has no {what}"
    return None


def _verdict(identification, identification_rationale, resolution, resolution_rationale, failures=0) -> dspy.Prediction:
    return dspy.Prediction(
        identification=identification,
        identification_rationale=identification_rationale,
        resolution=resolution,
        resolution_rationale=resolution_rationale,
        failures=failures,
    )


class LLMJudge(dspy.Module):
    """The paper's judge: an LM rates description and resolution on a 1-5 rubric, normalised to [0, 1].

    It runs on its own LM (`dspy.context(lm=self.lm)`), never the backbone. A rating that still fails after
    `max_attempts` is recorded as None with the error in the rationale and counted in `failures`."""

    def __init__(self, lm, max_attempts: int = 2):
        super().__init__()
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.lm = lm
        self.max_attempts = max_attempts
        self.label = f"llm:{getattr(lm, 'model', type(lm).__name__)}"
        self.identify = dspy.Predict(JudgeIdentification)
        self.resolve = dspy.Predict(JudgeResolution)

    def _rate(self, predictor: dspy.Predict, **inputs) -> tuple[float | None, str, bool]:
        def rate(config: dict):
            out = predictor(**inputs, config=config)
            return out, *normalise_likert(int(out.score))

        # A retry is a fresh sample (tide_dspy.retry), never the same cached bad answer. Malformed output or a
        # failing judge LM is recorded, never fatal to scoring.
        tried = call_with_retries(rate, self.max_attempts, lm=self.lm)
        if tried.ok:
            out, value, clamped = tried.value
            note = f"[score {out.score} clamped to {LIKERT_MIN}..{LIKERT_MAX}] " if clamped else ""
            return value, note + str(out.rationale or ""), False
        error = tried.errors[-1]
        logger.warning("judge %s failed after %d attempts: %s", self.label, self.max_attempts, error[:300])
        return None, f"judge failed after {self.max_attempts} attempts: {error[:500]}", True

    def forward(self, gold: GoldProblem, finding: Finding, setting: str | Setting) -> dspy.Prediction:
        setting = get_setting(setting)
        # trace=None keeps judge calls out of the program's trace (GEPA and bootstrapping read it).
        with dspy.context(lm=self.lm, trace=None):
            ident, ident_why, ident_failed = self._rate(
                self.identify, reference=gold.description, prediction=finding.description
            )
            gate = _resolution_gate(gold, finding, setting)
            if gate is not None:
                (resol, resol_why), resol_failed = gate, False
            else:
                resol, resol_why, resol_failed = self._rate(
                    self.resolve,
                    problem=gold.description,
                    reference=setting.render_resolution(gold),
                    prediction=setting.render_resolution(finding),
                )
        return _verdict(ident, ident_why, resol, resol_why, int(ident_failed) + int(resol_failed))


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


def make_judge(spec, **lm_options):
    """"none" (or None) -> no judge, "proxy" -> ProxyJudge, a dspy LM -> LLMJudge on it, any other string ->
    LLMJudge on `tide_dspy.backbones.get_lm(spec, **lm_options)`. A judge object is returned as is.

    A `backbones.JudgeSpec` (what the CLI passes) brings its own LM options (retries, timeout, the judge's
    address) and, for a hosted judge, the one preflight call before any rating."""
    if spec is None or spec == NO_JUDGE_LABEL:
        return None
    if spec == "proxy":
        return ProxyJudge()
    if isinstance(spec, dspy.BaseLM):
        return LLMJudge(spec)
    if isinstance(spec, str):
        from tide_dspy.backbones import get_lm  # imported only when a model is asked for

        lm = get_lm(str(spec), **{**getattr(spec, "lm_options", {}), **lm_options})
        if getattr(spec, "check", False):
            from tide_dspy.backbones.preflight import require_ready

            require_ready(lm, "--judge")
        return LLMJudge(lm)
    if callable(spec) and hasattr(spec, "label"):
        return spec
    raise TypeError(f"judge spec must be 'none', 'proxy', a backbone name or a dspy LM, not {type(spec).__name__}")
