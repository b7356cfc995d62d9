"""The scan: rate every artifact on its own, then let each round read the most suspect unfound ones in full.

A small model cannot pick a few problems out of tens of thousands of tokens in one pass, but it can judge one
function or one e-mail at a time. `Scanner` asks the setting's scan signature about each artifact; the prompt
puts the instructions and the templates first and the artifact last, so a prefix cache makes a scan cost about
one pass over the context. The ranking breaks ties with a seeded shuffle, never by position, so the scan cannot
smuggle the first-listed bias back in. `focus` turns the ranking into a round's shortlist: the top-N artifacts
that no earlier finding cites, shown first and in full under the first handles (the others compactly; every
handle stays citable). The scan prompt names an artifact by id, never by handle, since a handle tells its position.
"""

from __future__ import annotations

import logging
import math
import random
import re
import time
from dataclasses import dataclass

import dspy
from dspy.utils.exceptions import AdapterParseError
from pydantic import BaseModel

from tide_dspy.cost.usage import entries_since, usage_mark, usage_tokens
from tide_dspy.domains import ContextView, Setting, get_setting
from tide_dspy.schemas import Finding, Instance
from tide_dspy.util.fields import field_of
from tide_dspy.util.text import rate_line

log = logging.getLogger(__name__)

SCAN_MAX_TOKENS = 64  # a digit, a template id and one sentence
PROGRESS_SECONDS = 10.0  # a long scan says how far it is at most this often (and after its first and last call)
TOP_LOGPROBS = 10  # alternatives per step: enough to hold all ten digits where the model weighs them
# The rating comes first in the answer, so an answer cut off in its reason still holds it.
_RATING = re.compile(r"suspicion\W{0,12}(\d)")
_BEFORE_RATING = re.compile(r"suspicion\W{0,12}$")


class Suspect(BaseModel):
    """One artifact's scan result. A failed call scores -1 and keeps its error as the reason.

    `rating` is the digit the model wrote; `score` is the rating expected under the model's own probabilities of
    the ten digits where the backend reports them (see expected_rating), else the rating itself. A small model
    writes 0 for nearly everything; how much weight it gave the other digits still ranks the artifacts."""

    artifact_id: str
    handle: str
    score: float
    rating: int | None = None
    template_id: str = ""
    reason: str = ""


class ScanRecord(BaseModel):
    """What a scan cost and found, kept beside the round records."""

    suspects: list[Suspect]
    ranked: list[str] = []  # artifact ids, most suspect first (see rank)
    focus_size: int | None = None
    recall_at_focus: float | None = None  # share of the gold evidence among the first focus_size (see recall_at)
    lm_calls: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    failures: int = 0
    salvaged: int = 0  # ratings read from an answer that failed to parse as a whole (cut off in its reason)
    from_probabilities: int = 0  # scores computed from the digits' probabilities, not the written digit alone
    seconds: float | None = None

    def most_suspect(self, n: int) -> list[Suspect]:
        """The first n suspects of the ranking (`ranked`, which DiscoveryProgram.ranking sets)."""
        by_id = {s.artifact_id: s for s in self.suspects}
        return [by_id[i] for i in self.ranked[:n]]


@dataclass(frozen=True)
class Ranking:
    ids: tuple[str, ...]  # most suspect first

    def focus(self, found: list[Finding], size: int) -> list[str]:
        """The `size` most suspect artifacts that no finding cites yet."""
        cited = {e for f in found for e in f.evidence}
        return [i for i in self.ids if i not in cited][:size]


def rank(suspects: list[Suspect], seed: str) -> Ranking:
    """Highest score first; ties in a seeded random order (not in the order the context lists them)."""
    rng = random.Random(seed)
    keyed = [(-s.score, rng.random(), s.artifact_id) for s in suspects]
    return Ranking(tuple(i for _, _, i in sorted(keyed)))


def recall_at(ranked: list[str] | tuple[str, ...], instance: Instance, n: int) -> float | None:
    """Share of the gold problems' evidence ids among the top n of a ranking (None without gold evidence)."""
    gold = {e for p in instance.problems for e in p.evidence}
    return len(gold & set(ranked[:n])) / len(gold) if gold else None


def scan_and_rank(scanner: Scanner, instance: Instance, view: ContextView, guidance: str, order_seed,
                  focus_size: int, progress=None) -> tuple[Ranking, ScanRecord]:
    """Scan `instance` as `view` shows it and rank the result: the ranking, and the record with its ranked ids and
    its recall of gold evidence at `focus_size`. `progress(line)` hears how far the scan is as it goes."""
    record = scanner(instance, view, guidance, progress=progress)
    ranking = rank(record.suspects, f"{order_seed}:{instance.instance_id}")
    record.ranked, record.focus_size = list(ranking.ids), focus_size
    record.recall_at_focus = recall_at(record.ranked, instance, focus_size)
    return ranking, record


def expected_rating(logprobs) -> float | None:
    """The mean of the digits 0-9 under their probabilities at the rating's position in the answer.

    `logprobs` is OpenAI's `{"content": [{"token", "logprob", "top_logprobs": [...]}, ...]}`, as DSPy puts it on
    a prediction (dicts, or objects from some providers). The rating is the first digit token after the text
    `suspicion`; alternatives that are not a single digit are left out and the rest renormalized. None when the
    answer or its alternatives hold no digit."""
    text = ""
    for step in field_of(logprobs, "content") or []:
        token = field_of(step, "token", "")
        if _BEFORE_RATING.search(text) and token.strip(' "').isdigit():
            digits: dict[int, float] = {}
            for alt in field_of(step, "top_logprobs") or [step]:
                alt_token = field_of(alt, "token", "").strip(' "')
                if len(alt_token) == 1 and alt_token.isdigit():
                    digits[int(alt_token)] = digits.get(int(alt_token), 0.0) + math.exp(field_of(alt, "logprob"))
            total = sum(digits.values())
            return sum(d * p for d, p in digits.items()) / total if total > 0 else None
        text += token
    return None


class Scanner(dspy.Module):
    """One predictor, one call per artifact. Its instruction is optimizable like the round's."""

    max_tokens = SCAN_MAX_TOKENS  # the output each call asks for

    def __init__(self, setting: str | Setting):
        super().__init__()
        self.setting = get_setting(setting)
        self.rate = dspy.Predict(self.setting.scan_signature)

    def forward(self, instance: Instance, view: ContextView, guidance: str, progress=None) -> ScanRecord:
        """Rate each artifact of `view`; `progress(line)` (optional) hears `[scan] i/n artifacts, rate, ETA` after
        the first call, then at most every PROGRESS_SECONDS, and after the last."""
        setting = self.setting
        started = last_said = time.perf_counter()
        lm = self.rate.lm or dspy.settings.lm
        mark = usage_mark(lm)
        suspects, failures, salvaged, from_probabilities = [], 0, 0, 0
        config = {"max_tokens": SCAN_MAX_TOKENS}
        probabilities = {"logprobs": True, "top_logprobs": TOP_LOGPROBS}  # {} once the backend refuses them
        for n, (artifact, handle) in enumerate(zip(view.artifacts, view.handles)):
            now = time.perf_counter()
            if progress is not None and n and (n == 1 or now - last_said >= PROGRESS_SECONDS):
                progress(f"[scan] {rate_line(n, len(view.artifacts), now - started, 'artifacts')}")
                last_said = now
            # No handle in the prompt: a handle tells the position, and the rating must not depend on it (this
            # also lets shuffled views reuse the cached ratings).
            inputs = {"templates": guidance, "artifact": setting.render_artifact(artifact)}
            try:
                try:
                    out = self.rate(**inputs, config=config | probabilities)
                except Exception as exc:
                    if not (probabilities and "logprob" in str(exc).lower()):
                        raise
                    log.info("the backend gives no logprobs (%s); the scan uses the written ratings", exc)
                    probabilities = {}
                    out = self.rate(**inputs, config=config)
                expected = expected_rating(getattr(out, "logprobs", None))
                from_probabilities += expected is not None
                suspects.append(Suspect(artifact_id=artifact.id, handle=handle, rating=int(out.suspicion),
                                        score=round(expected, 4) if expected is not None else int(out.suspicion),
                                        template_id=str(out.template_id or "").strip(),
                                        reason=str(out.reason or "").strip()))
            except AdapterParseError as exc:
                rating = _RATING.search(exc.lm_response or "")
                if rating is None:
                    failures += 1
                    suspects.append(Suspect(artifact_id=artifact.id, handle=handle, score=-1,
                                            reason=f"unparseable: {str(exc)[:200]}"))
                else:
                    salvaged += 1
                    suspects.append(Suspect(artifact_id=artifact.id, handle=handle, score=int(rating.group(1)),
                                            rating=int(rating.group(1)),
                                            reason="(answer cut off after the rating)"))
            except Exception as exc:  # noqa: BLE001 - a failed rating ranks last and is counted, never fatal
                failures += 1
                log.warning("scan of %s failed: %s", artifact.id, exc)
                suspects.append(Suspect(artifact_id=artifact.id, handle=handle, score=-1,
                                        reason=f"{type(exc).__name__}: {str(exc)[:200]}"))
        if progress is not None and view.artifacts:
            total = len(view.artifacts)
            progress(f"[scan] {rate_line(total, total, time.perf_counter() - started, 'artifacts')}")
        entries = entries_since(lm, mark)
        tokens_in, tokens_out = usage_tokens(entries)
        return ScanRecord(suspects=suspects, lm_calls=len(entries), input_tokens=tokens_in, output_tokens=tokens_out,
                          failures=failures, salvaged=salvaged, from_probabilities=from_probabilities,
                          seconds=round(time.perf_counter() - started, 3))


class ScanOnly(dspy.Module):
    """A scanning program's scan without its rounds: the target an optimizer tunes against scan-recall.

    It shares the program's Scanner (the same predictor, the same guidance, the same artifact order), so what the
    optimizer measures is the program's own scan, and a compiled copy's scanner goes back into the program as is
    (`with_scanner_of`). Its prediction has the scan and no findings."""

    def __init__(self, program):
        super().__init__()
        if program.scanner is None:
            raise ValueError("scan-recall compiles a program's scan: build it with scan=True (tide compile --scan N)")
        self.scanner = program.scanner
        self.setting = program.setting
        self.guidance = program.scan_guidance()
        self.context_order_seed = program.context_order_seed
        self.focus_size = program.focus_size

    def scan_guidance(self) -> str:
        return self.guidance

    def call_plan(self) -> list[tuple[int, int]]:
        return []  # the scan alone: no round

    def view(self, instance: Instance) -> ContextView:
        """The artifacts in the order the program's scan reads them."""
        return ContextView.of(instance, self.context_order_seed)

    def forward(self, case: Instance, on_round=None, on_scan=None, on_progress=None) -> dspy.Prediction:
        _, record = scan_and_rank(self.scanner, case, self.view(case), self.guidance, self.context_order_seed,
                                  self.focus_size, on_progress)
        if on_scan:
            on_scan(record)
        return dspy.Prediction(findings=[], rounds=[], scan=record)

    def with_scanner_of(self, program):
        """A copy of `program` that scans with this target's (compiled) scanner; its rounds are unchanged."""
        compiled = program.deepcopy()
        compiled.scanner = self.scanner.deepcopy()
        return compiled
