"""Distillation under `dspy.Refine`, with the abstraction check as the reward and as the retry hint.

`dspy.Refine` (DSPy 3.4) reruns a module with new rollout ids at temperature 1.0 until the reward reaches the
threshold, and between attempts asks an LM (its `OfferFeedback` signature) for advice, which it passes to the next
attempt as a `hint_` input. That LM sees only the score, not why it is low, and on the embedded backbones it would
cost a long call per retry. Here the `OfferFeedback` call is answered by `CheckAdviceEngine` instead: no model, the
check's own feedback, which names every leaked token. Everything else (rollout ids, temperature, the bound, picking
the best attempt, the hint) is DSPy's.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, field

import dspy
from dspy.lm15 import Message, Response, TextPart, Usage, response_to_events
from dspy.predict.refine import OfferFeedback

from tide_dspy.abstraction import AbstractionReport, case_text, check
from tide_dspy.backbones import lm_context
from tide_dspy.schemas import TemplateDraft

ADVICE_MODEL = "tide/abstraction-check"
# Refine hands OfferFeedback these inputs JSON-encoded, and DSPy warns on every retry that they are not floats/lists.
_REFINE_TYPE_NOISE = ("'target_threshold'", "'reward_value'", "'module_names'")


class _RefineTypeNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("Type mismatch") and any(f in message for f in _REFINE_TYPE_NOISE))


@contextmanager
def _quiet_refine_types():
    logger, noise = logging.getLogger("dspy.predict.predict"), _RefineTypeNoise()
    logger.addFilter(noise)
    try:
        yield
    finally:
        logger.removeFilter(noise)


def usable(draft: TemplateDraft | None) -> str | None:
    """Why a draft cannot become a template, or None when it can."""
    if draft is None:
        return "no template in the output"
    if not draft.name.strip() or not draft.pattern.strip():
        return "empty name or pattern"
    if not [s for s in draft.evidence_flow if s.strip()]:
        return "empty evidence flow"
    return None


def check_draft(draft: TemplateDraft, case: dict[str, str], instructions: str = "") -> AbstractionReport:
    """The draft against its case; copying the distill instruction's example counts as a copied passage too."""
    return check(draft.name.strip(), draft.pattern.strip(), [s.strip() for s in draft.evidence_flow if s.strip()],
                 source=case_text(case), not_copied_from=(instructions,))


@dataclass
class AbstractionReward:
    """Refine's reward: the check's score of the drafted template against its solved case (0 when unusable).

    Keeps the last attempt's verdict so that the advice for the next attempt can name what was wrong.
    """

    setting: object  # tide_dspy.domains.Setting
    last_feedback: str = ""
    scores: list[float] = field(default_factory=list)

    def __call__(self, inputs: dict, prediction) -> float:
        draft = getattr(prediction, "template", None) if prediction is not None else None
        error = usable(draft)
        if error is not None:
            self.last_feedback = f"The last answer had {error}: write a name, a pattern and an evidence flow."
            score = 0.0
        else:
            report = check_draft(draft, self.setting.solved_case(inputs["case_instance"], inputs["problem"]),
                                 self.setting.distill_signature.instructions)
            self.last_feedback, score = report.feedback(), report.score
        self.scores.append(score)
        return score


class CheckAdviceEngine:
    """A DSPy engine that answers Refine's `OfferFeedback` with the abstraction check's feedback, in the format of
    the adapter in use, so the next attempt's `hint_` names the leaked tokens."""

    def __init__(self, reward: AbstractionReward, predictor_names: list[str]):
        self.reward = reward
        self.predictor_names = predictor_names

    def complete(self, request) -> Response:
        advice = {name: self.reward.last_feedback for name in self.predictor_names}
        outputs = {"discussion": "The abstraction check found specific details of the solved case.", "advice": advice}
        adapter = dspy.settings.adapter or dspy.ChatAdapter()
        text = adapter.format_assistant_message_content(OfferFeedback, outputs)
        return Response(id=None, model=ADVICE_MODEL, message=Message.assistant([TextPart(text)]),
                        finish_reason="stop", usage=Usage(input_tokens=0, output_tokens=0))

    def stream(self, request):
        return response_to_events(self.complete(request))

    def close(self) -> None:
        pass


@dataclass
class Refined:
    """One case's outcome: the best draft and its check, or why there is none; attempts made and their calls."""

    draft: TemplateDraft | None
    report: AbstractionReport | None
    error: str | None
    scores: list[float]
    history: list[dict]

    @property
    def passed(self) -> bool:
        return self.report is not None and self.report.passed


def refine_template(distiller: dspy.Module, instance, problem, *, max_attempts: int, lm=None) -> Refined:
    """Distill one solved case with up to `max_attempts` tries under dspy.Refine (threshold: fully abstract).

    Never raises for what the LM writes: an attempt that fails to parse is one of the attempts, and a case whose
    every attempt fails is returned with the error.
    """
    module = distiller.deepcopy()
    backbone = lm or distiller.get_lm() or dspy.settings.lm
    if backbone is None:
        raise ValueError("no LM: pass lm= or configure one with dspy.context(lm=...)")
    module.set_lm(backbone)
    reward = AbstractionReward(distiller.setting)
    refine = dspy.Refine(module=module, N=max_attempts, reward_fn=reward, threshold=1.0)
    advice_lm = dspy.LM(ADVICE_MODEL, engine=CheckAdviceEngine(reward, [n for n, _ in module.named_predictors()]),
                        cache=False)
    try:
        # The backbone's adapter (lm_context) also formats the advice, so the hint reads as that adapter writes.
        with lm_context(backbone), dspy.context(lm=advice_lm), _quiet_refine_types():
            prediction = refine(case_instance=instance, problem=problem)
    except Exception as exc:  # noqa: BLE001 - adapter/LM failures are recorded, never fatal
        prediction, error = None, f"{type(exc).__name__}: {str(exc)[:300]}"
    else:
        error = None
    history = [e for e in refine.history if e.get("model") != ADVICE_MODEL]
    draft = getattr(prediction, "template", None) if prediction is not None else None
    error = usable(draft) if error is None else error
    if error is not None:
        return Refined(None, None, error, reward.scores, history)
    report = check_draft(draft, distiller.setting.solved_case(instance, problem),
                         distiller.setting.distill_signature.instructions)
    return Refined(draft, report, None, reward.scores, history)
