"""TIDE and its baselines. All share one interface: `forward(case) -> Prediction(findings, rounds)`.

The cumulative state is threaded explicitly: round t gets `state` (rounds < t) as an input and the loop
builds the next state with `state.extend(...)`. Nothing is kept on `self` between calls.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field

import dspy
from dspy.utils.exceptions import AdapterParseError
from rapidfuzz import fuzz

from tide_dspy import tracing
from tide_dspy.backbones.providers import rules_of
from tide_dspy.cost.prices import prices_of
from tide_dspy.cost.usage import entries_since, entries_usage, usage_mark, usage_tokens
from tide_dspy.domains import NO_GUIDANCE, ContextView, Setting, get_setting, render_templates
from tide_dspy.lexical import linked_groups, tfidf_weights
from tide_dspy.retry import call_with_retries, describe_error
from tide_dspy.scan import Ranking, Scanner, ScanRecord, scan_and_rank
from tide_dspy.schemas import STOP_RULES, Finding, Instance, RoundRecord, Template

log = logging.getLogger(__name__)

GUIDANCE_KINDS = ("templates", "none", "demos")
# A round's retry samples at 0.7, below the 1.0 of the other repeated calls (retry.RETRY_TEMPERATURE, DSPy's BestOfN).
ROUND_RETRY_TEMPERATURE = 0.7
ERROR_CHARS = 300  # of an error message kept in a round record
DROPPED_IDS_KEPT = 20  # per round record


def is_same_finding(a: Finding, b: Finding, threshold: float) -> bool:
    """Same evidence and a similar description. Findings without evidence compare on description alone."""
    similar = fuzz.token_set_ratio(a.description, b.description) >= threshold
    if a.evidence or b.evidence:
        return set(a.evidence) == set(b.evidence) and similar
    return similar


@dataclass(frozen=True)
class DiscoveryState:
    """What has been found so far. Immutable: `extend` returns a new state."""

    findings: tuple[Finding, ...] = ()

    def extend(self, candidates: list[Finding], threshold: float) -> tuple[DiscoveryState, int, int]:
        """Add the candidates that are new; return (state, n_new, n_rediscovered)."""
        kept = list(self.findings)
        new = rediscovered = 0
        for c in candidates:
            if any(is_same_finding(c, k, threshold) for k in kept):
                rediscovered += 1
            else:
                kept.append(c)
                new += 1
        return DiscoveryState(tuple(kept)), new, rediscovered


@dataclass
class CallOutcome:
    drafts: list = field(default_factory=list)
    lm_calls: int = 0
    cache_hits: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    parse_failures: int = 0
    salvaged: int = 0
    error: str | None = None
    aborted: bool = False


class DiscoveryProgram(dspy.Module):
    """Shared machinery: one round predictor, guidance rendering, bounded retries and hygiene."""

    def __init__(
        self,
        setting: str | Setting,
        templates: list[Template] | None = None,
        demos: list[str] | None = None,
        guidance: str = "templates",
        max_rounds: int | None = None,
        per_round: int | None = None,
        max_attempts: int = 3,
        dedup_threshold: float = 80.0,
        max_evidence: int | None = None,
        context_order_seed: int | None = None,
        scan: bool = False,
        scan_templates: list[Template] | None = None,
        focus_size: int = 8,
        template_names: bool = False,
    ):
        super().__init__()
        if guidance not in GUIDANCE_KINDS:
            raise ValueError(f"guidance must be one of {GUIDANCE_KINDS}, got {guidance!r}")
        if guidance == "demos" and not demos:
            raise ValueError(
                "guidance='demos' needs solved examples: pass demos=[...] (see tide_dspy.templates.solved_demos)"
            )
        self.setting = get_setting(setting)
        # The loop shape (T rounds of k findings) defaults to the setting's.
        max_rounds = self.setting.rounds if max_rounds is None else max_rounds
        per_round = self.setting.per_round if per_round is None else per_round
        if max_rounds < 1 or per_round < 1:
            raise ValueError(f"max_rounds and per_round must be >= 1, got {max_rounds} and {per_round}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts (calls per round, the first included) must be >= 1, got {max_attempts}")
        if max_evidence is not None and max_evidence < 1:
            raise ValueError(f"max_evidence must be >= 1 (or None for the setting's default), got {max_evidence}")
        self.templates = list(templates or [])
        self.demos = list(demos or [])
        self.guidance = guidance
        self.max_rounds = max_rounds
        self.per_round = per_round
        self.max_attempts = max_attempts
        self.dedup_threshold = dedup_threshold
        self.max_evidence = max_evidence or self.setting.max_evidence
        self.context_order_seed = context_order_seed
        self.focus_size = focus_size
        # The paper shows a template's pattern and evidence flow only; True also shows its name.
        self.template_names = template_names
        self.discover = dspy.Predict(self.setting.round_signature)
        # scan=True: rate every artifact first; each round reads the `focus_size` most suspect unfound ones in full.
        self.scanner = Scanner(self.setting) if scan else None
        # The templates the scan rates against when the rounds themselves use none (a baseline compared with
        # TIDE on the same scan); by default the program's own.
        self.scan_templates = list(scan_templates or [])

    def call_plan(self) -> list[tuple[int, int]]:
        """(findings already found, findings asked for) of each round call when every round runs: what an estimate
        renders (tide_dspy.cost.estimate)."""
        raise NotImplementedError

    def use_scan(self, focus_size: int) -> None:
        """Turn the scan on (or resize its focus) in a built or loaded program; its compiled round is kept."""
        if focus_size < 1:
            raise ValueError(f"focus_size must be >= 1, got {focus_size}")
        if self.scanner is None:
            self.scanner = Scanner(self.setting)
        self.focus_size = focus_size

    # ---- config carried inside the saved JSON state ----
    def config(self) -> dict:
        return dict(
            kind=type(self).__name__,
            setting=self.setting.name,
            guidance=self.guidance,
            max_rounds=self.max_rounds,
            per_round=self.per_round,
            max_attempts=self.max_attempts,
            dedup_threshold=self.dedup_threshold,
            max_evidence=self.max_evidence,
            context_order_seed=self.context_order_seed,
            template_names=self.template_names,
            templates=[t.model_dump() for t in self.templates],
            demos=self.demos,
            # Only a scanning program records its scan settings: a program without a scan has no scan keys in its
            # config, so its saved programs and the resume checks of its runs do not depend on the scan's options.
            **({"scan": True, "focus_size": self.focus_size} if self.scanner is not None else {}),
            **({"scan_templates": [t.model_dump() for t in self.scan_templates]}
               if self.scanner is not None and self.scan_templates else {}),
        )

    @classmethod
    def from_config(cls, config: dict) -> DiscoveryProgram | ChanceFloor:
        """The program a saved config describes (a chance floor's too)."""
        config = dict(config)
        kind = config.pop("kind", cls.__name__)
        target = PROGRAM_KINDS.get(kind)
        if target is None:
            raise ValueError(f"unknown program kind {kind!r} in saved config; expected one of {sorted(PROGRAM_KINDS)}")
        if issubclass(target, ChanceFloor):
            return target(**config)
        config["templates"] = [Template.model_validate(t) for t in config.get("templates", [])]
        if "scan_templates" in config:
            config["scan_templates"] = [Template.model_validate(t) for t in config["scan_templates"]]
        return target(**config)

    def dump_state(self, json_mode=True):
        state = super().dump_state(json_mode=json_mode)
        state["tide_config"] = self.config()
        return state

    def guidance_text(self) -> str:
        if self.guidance == "templates":
            return render_templates(self.templates, self.template_names)
        if self.guidance == "demos":
            return "\n\n".join(self.demos)
        return NO_GUIDANCE

    def view(self, instance: Instance, focus: list[str] | None = None) -> ContextView:
        """The artifacts in the order this program shows them, with their handles; a round's focus first, so the
        first handles and enum values (which a small model picks most) are the shortlist's."""
        return ContextView.of(instance, self.context_order_seed, first=focus or ())

    def scan_guidance(self) -> str:
        """The rendered templates the scan rates each artifact against (the scan's own, else the program's)."""
        return render_templates(self.scan_templates or self.templates, self.template_names)

    def ranking(self, instance: Instance, on_scan=None, on_progress=None) -> tuple[Ranking | None, ScanRecord | None]:
        """The scan's ranking of the instance's artifacts (None, None without scan); `on_scan(record)` hears of it
        before any round runs, `on_progress(line)` how far the scan is as it goes."""
        if self.scanner is None:
            return None, None
        warn_hosted_scan(self.scanner.rate.lm or dspy.settings.lm, len(instance.artifacts))
        with tracing.scope(instance_id=instance.instance_id, role="scan"):
            ranking, record = scan_and_rank(self.scanner, instance, self.view(instance), self.scan_guidance(),
                                            self.context_order_seed, self.focus_size, on_progress)
        if on_scan:
            on_scan(record)
        return ranking, record

    def focus(self, ranking: Ranking | None, found) -> list[str] | None:
        return ranking.focus(list(found), self.focus_size) if ranking is not None else None

    def call_round(self, instance: Instance, view: ContextView, found: list[Finding], max_new: int,
                   rollout: int | None = None, temperature: float | None = None,
                   focus: list[str] | None = None) -> CallOutcome:
        """One predictor call with a bounded retry on unparseable output.

        The call's signature is the predictor's own (instructions and demos as compiled) with its findings grounded
        in this instance (domains.Setting.grounded_signature). Unparseable output is retried; any other failure
        (context window, auth, provider) is recorded without a retry and marks the outcome `aborted`. Never raises
        for what the LM does."""
        inputs = self.setting.round_inputs(instance, view, self.guidance_text(), found, max_new, focus)
        out = CallOutcome()
        lm = self.discover.lm or dspy.settings.lm
        if lm is None:
            raise RuntimeError("no LM configured: use dspy.context(lm=...) or tide_dspy.backbones.get_lm(...)")
        rules = rules_of(lm)
        signature = self.setting.grounded_signature(self.discover.signature, instance, view, max_new, self.max_evidence,
                                                    rules.schema_dialect, rules.max_enum_values)
        mark = usage_mark(lm)

        def attempt(config: dict) -> list:
            try:
                pred = self.discover(**inputs, signature=signature, config=config)
            except AdapterParseError as exc:
                out.parse_failures += 1
                # An answer cut off at max_tokens, or with one malformed item, still holds complete findings:
                # keep those rather than ask again (at temperature 0 a retry costs as much and often ends the same).
                complete = self.setting.complete_drafts(exc.lm_response)
                if not complete:
                    raise
                out.salvaged = len(complete)
                return complete[:max_new]
            return list(pred.findings or [])[:max_new]

        def unparseable(i: int, error: str) -> None:
            log.warning("round output unparseable (attempt %d/%d): %s", i + 1, self.max_attempts, error)

        try:
            # Each retry is a fresh sample (tide_dspy.retry): it must not replay the output that failed to parse.
            tried = call_with_retries(attempt, self.max_attempts, lm=lm, rollout=rollout, temperature=temperature,
                                      retry_temperature=ROUND_RETRY_TEMPERATURE, retry_on=AdapterParseError,
                                      error_chars=ERROR_CHARS, on_failure=unparseable)
            out.drafts, out.error = (tried.value, None) if tried.ok else ([], tried.errors[-1])
        except Exception as exc:  # noqa: BLE001 - recorded in the round; the caller decides to stop
            out.error = describe_error(exc, ERROR_CHARS)
            out.aborted = True
            log.warning("round failed, not retried: %s", out.error)
        entries = entries_since(lm, mark)
        out.lm_calls = len(entries)
        out.input_tokens, out.output_tokens = usage_tokens(entries)
        billed = [e for e in entries if not tracing.is_cache_hit(e)]
        out.cache_hits = len(entries) - len(billed)
        out.cost_usd = entries_usage(billed, getattr(lm, "model", ""), prices_of(lm))["cost_usd"]
        return out

    def run_round(self, instance: Instance, state: DiscoveryState, round_no: int, max_new: int,
                  rollout: int | None = None, temperature: float | None = None,
                  focus: list[str] | None = None) -> tuple[DiscoveryState, RoundRecord]:
        t0 = time.perf_counter()
        view = self.view(instance, focus)
        with tracing.scope(instance_id=instance.instance_id, round=round_no, role="round"):
            out = self.call_round(instance, view, list(state.findings), max_new, rollout, temperature, focus)
        cleaned = [self.setting.clean(d, instance, round_no, view) for d in out.drafts]
        findings, hygiene = [f for f, _ in cleaned], [h for _, h in cleaned]
        dropped = [i for h in hygiene for i in h.dropped_ids]
        next_state, new, rediscovered = state.extend(findings, self.dedup_threshold)
        record = RoundRecord(
            round=round_no, new=new, rediscovered=rediscovered, lm_calls=out.lm_calls, cache_hits=out.cache_hits,
            input_tokens=out.input_tokens, output_tokens=out.output_tokens, cost_usd=out.cost_usd,
            parse_failures=out.parse_failures, salvaged=out.salvaged,
            dropped_evidence=len(dropped), dropped_ids=dropped[:DROPPED_IDS_KEPT],
            aliased_evidence=sum(h.aliased for h in hygiene), flagged=sum(bool(h.flags) for h in hygiene),
            failed=out.error is not None, aborted=out.aborted, error=out.error,
            seconds=round(time.perf_counter() - t0, 3),
        )
        return next_state, record


HOSTED_SCAN = ("this program scans first: %d call(s) on %s, one per artifact, before its rounds. The shipped scan "
               "was measured on the embedded model; on a hosted backbone it costs a call per artifact. To run the "
               "rounds alone: --no-scan, or program.scanner = None from Python")


def warn_hosted_scan(lm, artifacts: int) -> None:
    """Say, before a scan starts, what it costs on a hosted backbone (one call per artifact): a program compiled
    with a scan for the embedded model, run on a paid one, would otherwise make them without a word."""
    rules = rules_of(lm)
    if rules.provider not in ("local", "openai-compatible"):
        log.warning(HOSTED_SCAN, artifacts, getattr(lm, "tide_backbone", None) or getattr(lm, "model", "the LM"))


class TIDE(DiscoveryProgram):
    """Iterative discovery: round t sees what rounds < t found and adds up to `per_round` new findings.

    guidance="templates" is TIDE; "none" is the Iter-only ablation; "demos" is Iter + Demos. The loop ends after
    `max_rounds`, on a round whose LM call aborted, and (`stop_on`, STOP_RULES) on a round that returned no finding
    ("empty", the paper's rule) or on one that added nothing new ("no-new"). A round whose output could not be
    parsed ends nothing.
    """

    def __init__(self, setting: str | Setting, stop_on: str = "empty", **kwargs):
        super().__init__(setting, **kwargs)
        if stop_on not in STOP_RULES:
            raise ValueError(f"stop_on must be one of {STOP_RULES}, got {stop_on!r}")
        self.stop_on = stop_on

    def config(self) -> dict:
        return {**super().config(), "stop_on": self.stop_on}

    def stops_after(self, record: RoundRecord) -> bool:
        """Whether the loop ends after this round (see the class docstring)."""
        if record.aborted:
            return True
        if record.failed:
            return False
        returned = record.new + record.rediscovered
        return returned == 0 if self.stop_on == "empty" else record.new == 0

    def call_plan(self) -> list[tuple[int, int]]:
        """Round t is told of the (t - 1) x k findings before it."""
        return [((t - 1) * self.per_round, self.per_round) for t in range(1, self.max_rounds + 1)]

    def forward(self, case: Instance, on_round=None, on_scan=None, on_progress=None) -> dspy.Prediction:
        ranking, scan = self.ranking(case, on_scan, on_progress)
        state, rounds = DiscoveryState(), []
        for t in range(1, self.max_rounds + 1):
            # After a failed round the state is unchanged, so the plain call would resend the failed prompt and
            # replay its cached answer: the next round is a fresh rollout instead.
            fresh = bool(rounds) and rounds[-1].failed
            state, record = self.run_round(case, state, t, self.per_round, rollout=t if fresh else None,
                                           focus=self.focus(ranking, state.findings))
            rounds.append(record)
            if on_round:
                on_round(record)
            if self.stops_after(record):
                break
        return dspy.Prediction(findings=list(state.findings), rounds=rounds, scan=scan)


class SingleAgent(DiscoveryProgram):
    """One call that returns every finding at once: at most `max_findings`, by default TIDE's budget of T·k
    (`max_rounds` x `per_round`, else the setting's; tide_dspy.methods says why). Its config records the one call
    as max_rounds=1 and per_round=max_findings, which builds the same program again."""

    def __init__(self, setting: str | Setting, max_findings: int | None = None, **kwargs):
        shape = get_setting(setting)
        rounds, per_round = kwargs.pop("max_rounds", None), kwargs.pop("per_round", None)
        budget = (rounds or shape.rounds) * (per_round or shape.per_round)
        super().__init__(setting, max_rounds=1, per_round=max_findings or budget, **kwargs)

    def call_plan(self) -> list[tuple[int, int]]:
        return [(0, self.per_round)]

    def forward(self, case: Instance, on_round=None, on_scan=None, on_progress=None) -> dspy.Prediction:
        ranking, scan = self.ranking(case, on_scan, on_progress)
        state, record = self.run_round(case, DiscoveryState(), 1, self.per_round, focus=self.focus(ranking, []))
        if on_round:
            on_round(record)
        return dspy.Prediction(findings=list(state.findings), rounds=[record], scan=scan)


class MultiAgent(DiscoveryProgram):
    """`max_rounds` independent calls with no shared state; their findings are pooled.

    The pool keeps every call's findings, re-found ones included, as the paper scores Multi-Agent (the metric
    credits one finding per gold problem, so a duplicate counts against precision); `dedup_pool=True` (our
    departure, `--multi-dedup`) merges repeats before scoring. Either way each call's record counts its new and
    re-found findings against the calls before it.

    Each call is a separate sample (own rollout id and seed, and `temperature`), so the calls are not cache copies.
    A provider that takes only its default temperature (a reasoning model, Gemini 3: backbones.providers) is sent
    none: its samples differ by rollout id and seed."""

    def __init__(self, setting: str | Setting, temperature: float = 0.7, dedup_pool: bool = False, **kwargs):
        super().__init__(setting, **kwargs)
        self.temperature = temperature
        self.dedup_pool = dedup_pool

    def config(self) -> dict:
        return {**super().config(), "temperature": self.temperature, "dedup_pool": self.dedup_pool}

    def call_plan(self) -> list[tuple[int, int]]:
        """Every sample starts from nothing found."""
        return [(0, self.per_round)] * self.max_rounds

    def forward(self, case: Instance, on_round=None, on_scan=None, on_progress=None) -> dspy.Prediction:
        ranking, scan = self.ranking(case, on_scan, on_progress)
        pooled, every, rounds = DiscoveryState(), [], []
        for t in range(1, self.max_rounds + 1):
            # Every call starts from the empty state; only the pooling sees earlier calls.
            call_state, record = self.run_round(case, DiscoveryState(), t, self.per_round, rollout=t,
                                                temperature=self.temperature, focus=self.focus(ranking, []))
            pooled, record.new, record.rediscovered = pooled.extend(list(call_state.findings), self.dedup_threshold)
            every += call_state.findings
            rounds.append(record)
            if on_round:
                on_round(record)
            if record.aborted:
                break
        findings = list(pooled.findings) if self.dedup_pool else every
        return dspy.Prediction(findings=findings, rounds=rounds, scan=scan)


class ChanceFloor(dspy.Module):
    """A chance floor: `n_findings` findings of `evidence_size` artifacts each, picked without a model.

    It holds no predictor: nothing of it is saved as DSPy state, hashed as an instruction or shown to an optimizer;
    its config (`tide_config`) is all there is of it. Findings are spread over rounds of `per_round`, so budget and
    per-round curves re-score them as they do TIDE's. The description says what the finding is; where an action
    resolves a problem, the finding takes the library's first action."""

    scanner = None  # it reads no scan
    guidance = "none"  # nor a template library, nor solved examples
    templates: tuple = ()
    demos: tuple = ()

    def __init__(self, setting: str | Setting, n_findings: int | None = None, evidence_size: int | None = None,
                 seed: int = 0, max_rounds: int | None = None, per_round: int | None = None,
                 context_order_seed: int | None = None):
        super().__init__()
        self.setting = get_setting(setting)
        self.max_rounds = self.setting.rounds if max_rounds is None else max_rounds
        self.per_round = self.setting.per_round if per_round is None else per_round
        if self.max_rounds < 1 or self.per_round < 1:
            raise ValueError(f"max_rounds and per_round must be >= 1, got {self.max_rounds} and {self.per_round}")
        self.n_findings = n_findings or self.max_rounds * self.per_round
        self.evidence_size = evidence_size or self.setting.typical_evidence
        self.seed = seed
        self.context_order_seed = context_order_seed

    def config(self) -> dict:
        return dict(kind=type(self).__name__, setting=self.setting.name, max_rounds=self.max_rounds,
                    per_round=self.per_round, context_order_seed=self.context_order_seed, n_findings=self.n_findings,
                    evidence_size=self.evidence_size, seed=self.seed)

    def dump_state(self, json_mode=True):
        return {"tide_config": self.config()}

    def view(self, instance: Instance, focus: list[str] | None = None) -> ContextView:
        return ContextView.of(instance, self.context_order_seed)

    def call_plan(self) -> list[tuple[int, int]]:
        return []  # no model call

    def picks(self, instance: Instance, view: ContextView) -> list[list[str]]:
        raise NotImplementedError

    def chance_resolution(self, instance: Instance) -> dict:
        """The resolution every pick carries: the library's first action where an action resolves a problem
        (no patch is guessed: a chance floor writes no code)."""
        action = next(iter(instance.actions), None)
        if self.setting.resolution_kind == "action" and action is not None:
            return {"action": {"action_id": action.id, "type": action.type}}
        return {}

    def forward(self, case: Instance, on_round=None) -> dspy.Prediction:
        view = self.view(case)
        resolution = self.chance_resolution(case)
        findings = [
            Finding(description=f"{type(self).__name__} pick {i + 1}", evidence=ids, round=i // self.per_round + 1,
                    **resolution)
            for i, ids in enumerate(self.picks(case, view)[: self.n_findings])
        ]
        rounds = []
        for t in range(1, max((f.round for f in findings), default=0) + 1):
            rounds.append(RoundRecord(round=t, new=sum(f.round == t for f in findings)))
            if on_round:
                on_round(rounds[-1])
        return dspy.Prediction(findings=findings, rounds=rounds)


class RandomBaseline(ChanceFloor):
    """Each finding cites `evidence_size` artifacts drawn at random (seeded by `seed` and the instance)."""

    def picks(self, instance: Instance, view: ContextView) -> list[list[str]]:
        ids = view.ids
        rng = random.Random(f"{self.seed}:{instance.instance_id}")
        return [rng.sample(ids, min(self.evidence_size, len(ids))) for _ in range(self.n_findings)]


class FirstListed(ChanceFloor):
    """Cites the artifacts in the order the program shows them: the first `evidence_size`, then the next ones."""

    def picks(self, instance: Instance, view: ContextView) -> list[list[str]]:
        ids, m = view.ids, self.evidence_size
        return [ids[i:i + m] for i in range(0, len(ids), m)]


class LexicalJoin(ChanceFloor):
    """Reads the artifacts but calls no model: each finding cites a group of `evidence_size` artifacts that share
    rare tokens (ids, names, figures, dates; in code the names, calls and identifiers), the most cohesive groups
    first (tide_dspy.lexical). What string matching alone finds, so an LM method is read against it too."""

    def picks(self, instance: Instance, view: ContextView) -> list[list[str]]:
        texts = {a.id: self.setting.render_artifact(a) for a in view.artifacts}
        return linked_groups(texts, self.evidence_size, self.n_findings)


class TfidfSimilarity(ChanceFloor):
    """LexicalJoin's grouping under the textbook similarity: each finding cites a group of `evidence_size`
    artifacts whose TF-IDF vectors are the most alike (tide_dspy.lexical.tfidf_weights). The floor of a retriever
    that reads words without understanding them."""

    def picks(self, instance: Instance, view: ContextView) -> list[list[str]]:
        texts = {a.id: self.setting.render_artifact(a) for a in view.artifacts}
        return linked_groups(texts, self.evidence_size, self.n_findings, weigh=tfidf_weights)


PROGRAM_KINDS: dict[str, type[DiscoveryProgram] | type[ChanceFloor]] = {
    "TIDE": TIDE,
    "SingleAgent": SingleAgent,
    "MultiAgent": MultiAgent,
    "RandomBaseline": RandomBaseline,
    "FirstListed": FirstListed,
    "LexicalJoin": LexicalJoin,
    "TfidfSimilarity": TfidfSimilarity,
}
