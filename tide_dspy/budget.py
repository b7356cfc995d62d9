"""Know the cost before spending it: the LM calls a run will make, their tokens and price, whether each instance's
prompts fit the backbone's window, and a budget that stops a run cleanly.

An estimate renders the prompts the run would send (each round's grounded signature, formatted by the adapter the
run uses, with the templates and the growing `already_found` of later rounds; Multi's samples; the scan's calls;
the judge's calls) and counts their tokens with `util.tokens.count_tokens`. Nothing here calls a model. What the
model will write cannot be rendered, so the output side rests on the assumptions named below; docs/cost.md lists
them. Windows and prices come from `Backbone.rules` (backbones/providers.py), or from the caller (`--price`).
"""

from __future__ import annotations

import argparse
import math
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from tide_dspy.backbones.providers import Prices
from tide_dspy.schemas import Finding, GoldProblem, Instance
from tide_dspy.util.argtypes import positive_float, positive_int
from tide_dspy.util.tokens import count_tokens, tokenizer_name

# ---- assumptions (docs/cost.md) ----
MESSAGE_OVERHEAD_TOKENS = 4  # role and framing tokens a chat API adds per message
# What DSPy's native client asks for when the LM sets no max_tokens (Anthropic requires a value).
DEFAULT_REQUESTED_OUTPUT = 16_384
REASONING_TOKENS = 2_000  # thinking per call on a reasoning backbone (one whose rules take no temperature)
JUDGE_OUTPUT_TOKENS = 80  # a one- or two-sentence rationale and a score
FINDING_FRAME_TOKENS = 60  # a finding's evidence handles, template id, why and field names
FINDING_TOKENS_WITHOUT_GOLD = 300  # a finding's size where no gold problem shows how large a resolution is
MIN_CACHED_PREFIX = 1_024  # providers cache a repeated prefix only from about this many tokens on
PROPOSAL_PROMPT_TOKENS = 2_000  # an optimizer's instruction proposal (instructions, earlier candidates, scores)
PROPOSAL_OUTPUT_TOKENS = 400
DISTILL_OUTPUT_TOKENS = 250  # a template draft: a name, a pattern of a sentence or two, 4-6 evidence-flow steps
HINT_LEAKS = 12  # the specific tokens of its case that a distillation retry's hint names
# The field dspy.Refine appends to a retry's signature for the advice of the attempt before (dspy/predict/refine.py).
REFINE_HINT = ("hint_", "A hint to the module from an earlier run")
# Findings of earlier rounds in `already_found`, and the judge's prediction, are written with this stand-in.
STAND_IN_DESCRIPTION = ("The approval that the vendor renewal needs is still with a manager who left the team last "
                        "month, so nobody can sign it before the contract lapses and the service stops; the request "
                        "has to be rerouted to the acting approver now.")
# Providers that offer a longer window on request (what to send, where it is documented).
LONG_CONTEXT = {
    "anthropic": ("Claude Sonnet 4/4.5 take a 1M-token window with the beta header "
                  "`anthropic-beta: context-1m-2025-08-07` (long-context prices apply above 200k prompt tokens; "
                  "https://docs.claude.com/en/docs/build-with-claude/context-windows)"),
}
FREE = Prices(0.0, 0.0, 0.0, "runs on this machine: no charge")


# ---- prices ----

def parse_price(text: str) -> Prices:
    """`--price IN,OUT[,CACHED]` (USD per million prompt, output and cached-prompt tokens) as Prices."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) not in (2, 3) or any(v < 0 or not math.isfinite(v) for v in values):
        raise ValueError(f"--price {text!r}: expected IN,OUT or IN,OUT,CACHED in USD per million tokens, "
                         "e.g. --price 0.25,2.00 or --price 3,15,0.30")
    return Prices(values[0], values[1], values[2] if len(values) == 3 else None, "--price")


def price(text: str) -> Prices:
    """An argparse type: IN,OUT[,CACHED] in USD per million tokens (parse_price)."""
    try:
        return parse_price(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def backbone_prices(name: str | None) -> Prices | None:
    """The list prices of a backbone (by name or raw model string) from its rules; free for an embedded one."""
    from tide_dspy.backbones import resolve

    if not name:
        return None
    try:
        backbone = resolve(name)
    except ValueError:
        return None
    return FREE if backbone.kind == "local" else backbone.rules.prices


def rules_for(lm, name: str | None):
    """The provider rules of `lm` (those get_lm attached; an LM built elsewhere is sent as written), else of the
    backbone name or raw model string `name` (UNKNOWN when nothing is registered)."""
    from tide_dspy.backbones import resolve
    from tide_dspy.backbones.providers import UNKNOWN, rules_of

    if lm is not None:
        return rules_of(lm)
    try:
        return resolve(name).rules if name else UNKNOWN
    except ValueError:
        return UNKNOWN


def requested_output(lm) -> int:
    """The output tokens each call asks for: the LM's max_tokens, else what DSPy's client sends by default."""
    kwargs = getattr(lm, "kwargs", None) or {}
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if kwargs.get(key):
            return int(kwargs[key])
    engine_max = getattr(getattr(lm, "engine", None), "max_tokens", None)
    if isinstance(engine_max, int) and engine_max > 0:
        return engine_max
    return DEFAULT_REQUESTED_OUTPUT


@dataclass(frozen=True)
class Target:
    """One LM of a run (the backbone or the judge) as estimates and budgets see it: its name, prices, window,
    requested output and assumed thinking per call."""

    name: str | None
    lm: object = None
    prices: Prices | None = None
    window: int | None = None
    window_source: str = "unknown"
    max_prompt: int | None = None  # an input limit inside the window (OpenAI's 272k of gpt-5-mini's 400k)
    output: int = DEFAULT_REQUESTED_OUTPUT
    reasoning: int = 0
    provider: str = "unknown"

    @classmethod
    def of(cls, lm, name: str | None = None, *, prices: Prices | None = None, window: int | None = None,
           output: int | None = None) -> Target:
        """From the LM (the backbone get_lm built it for, its engine, its max_tokens), else from `name`; `prices`,
        `window` and `output` override (--price, --context-window)."""
        from tide_dspy.backbones import serializes_calls

        name = getattr(lm, "tide_backbone", None) or name or getattr(lm, "model", None)
        rules = rules_for(lm, name)
        n_ctx = getattr(getattr(lm, "engine", None), "n_ctx", None)
        if window:
            size, source = window, "--context-window"
        elif isinstance(n_ctx, int) and n_ctx > 0:
            size, source = n_ctx, "the embedded engine's n_ctx"
        elif rules.context_window:
            size, source = rules.context_window, f"{name}'s window"
        else:
            size, source = None, "unknown"
        priced = prices or (FREE if lm is not None and serializes_calls(lm) else backbone_prices(name))
        return cls(
            name=name,
            lm=lm,
            prices=priced,
            window=size,
            window_source=source,
            max_prompt=None if window else rules.max_prompt_tokens,
            output=output or (requested_output(lm) if lm is not None else DEFAULT_REQUESTED_OUTPUT),
            reasoning=0 if rules.accepts_temperature else REASONING_TOKENS,
            provider=rules.provider,
        )


def backbone_of(lm) -> str | None:
    """The backbone name an LM was built for (get_lm records it), else its model string."""
    if lm is None:
        return None
    return getattr(lm, "tide_backbone", None) or getattr(lm, "model", None)


# ---- windows ----

def over_window_reason(prompt: int, output: int, window: int, source: str, provider: str) -> str:
    """Why an instance is skipped: its largest prompt plus the requested output exceed the window."""
    reason = (f"over the window: the largest prompt is about {prompt:,} tokens and {output:,} output tokens are "
              f"requested, {prompt + output:,} in all, over the {window:,}-token window ({source})")
    long_context = LONG_CONTEXT.get(provider)
    return reason + (f"; {long_context}" if long_context else "")


# ---- counting rendered prompts ----

_SEGMENT = re.compile(r"(?=\[\[ ## )")  # DSPy's field markers; a BPE never merges across the newlines before one


def content_text(message: dict) -> str:
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def common_prefix_length(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class PromptCounter:
    """Tokens of rendered messages. Each field block is counted once and remembered, so a context that every
    round, sample and method repeats is tokenized once."""

    MAX_REMEMBERED = 200_000

    def __init__(self, count=count_tokens):
        self.count = count
        self._seen: dict[tuple[int, int], int] = {}

    def text(self, text: str) -> int:
        total = 0
        for segment in _SEGMENT.split(text):
            if not segment:
                continue
            key = (len(segment), hash(segment))
            n = self._seen.get(key)
            if n is None:
                if len(self._seen) > self.MAX_REMEMBERED:
                    self._seen.clear()
                n = self._seen[key] = self.count(segment)
            total += n
        return total

    def messages(self, messages: list[dict]) -> int:
        return sum(self.text(content_text(m)) + MESSAGE_OVERHEAD_TOKENS for m in messages)

    def shared_prefix(self, first: list[dict], later: list[dict]) -> int:
        """Tokens at the start of `later` that repeat `first` byte for byte (what a prompt cache can serve)."""
        total = 0
        for a, b in zip(first, later):
            ta, tb = content_text(a), content_text(b)
            if a.get("role") == b.get("role") and ta == tb:
                total += self.text(tb) + MESSAGE_OVERHEAD_TOKENS
                continue
            if a.get("role") == b.get("role"):
                total += self.text(tb[:common_prefix_length(ta, tb)])
            break
        return total


# ---- calls and their totals ----

@dataclass(frozen=True)
class Call:
    """One LM call of an estimate. `cached`: prompt tokens that repeat the first call of the same step."""

    role: str  # backbone | judge
    step: str  # round | scan | judge | proposal
    prompt: int
    output: int
    cached: int = 0


@dataclass
class Tally:
    """Summed calls and tokens. `times` may be fractional (an optimizer's passes over part of the data), so the
    sums are floats, rounded where they are shown."""

    calls: float = 0
    prompt: float = 0
    cached: float = 0
    output: float = 0

    def add(self, calls: Iterable[Call], times: float = 1) -> Tally:
        for c in calls:
            self.calls += times
            self.prompt += c.prompt * times
            self.cached += c.cached * times
            self.output += c.output * times
        return self

    def merge(self, other: Tally) -> Tally:
        self.calls += other.calls
        self.prompt += other.prompt
        self.cached += other.cached
        self.output += other.output
        return self

    def cost(self, prices: Prices | None, caching: bool = False) -> float | None:
        """USD at `prices`; with caching, the cached tokens at the cache-read price (where the map has one)."""
        if prices is None:
            return None
        return prices.cost_of(self.prompt, self.output, self.cached if caching else 0)


def calls_cost(calls: Iterable[Call], prices: dict[str, Prices | None]) -> float:
    """USD of calls by role (no caching); a role without a price counts 0."""
    total = 0.0
    for c in calls:
        p = prices.get(c.role)
        if p is not None:
            total += p.cost_of(c.prompt, c.output)
    return total


# ---- the estimator ----

def round_shapes(program) -> list[tuple[int, int]]:
    """(findings already found, findings asked for) of each round call the program makes when every round runs:
    TIDE's rounds grow `already_found` by k each; Multi's samples each start empty; Single asks once for all; a
    floor and a scan compiled alone (ScanOnly) make none."""
    from tide_dspy.discovery import TIDE, ChanceBaseline, MultiAgent, SingleAgent
    from tide_dspy.scan import ScanOnly

    if isinstance(program, (ChanceBaseline, ScanOnly)):
        return []
    T, k = program.max_rounds, program.per_round
    if isinstance(program, TIDE):
        return [((t - 1) * k, k) for t in range(1, T + 1)]
    if isinstance(program, MultiAgent):
        return [(0, k)] * T
    if isinstance(program, SingleAgent):
        return [(0, k)]
    raise TypeError(f"no call plan for {type(program).__name__}: expected TIDE, SingleAgent, MultiAgent or a floor")


def finding_tokens(instance: Instance, counter: PromptCounter) -> int:
    """The assumed output size of one finding: a description like the stand-in, the resolution as large as the
    instance's gold resolutions on average, and the frame."""
    from tide_dspy.domains import get_setting

    setting = get_setting(instance.setting)
    resolutions = [setting.render_resolution(p) for p in instance.problems if setting.resolution_of(p) is not None]
    if not resolutions:
        return FINDING_TOKENS_WITHOUT_GOLD
    mean = sum(counter.text(r) for r in resolutions) / len(resolutions)
    return round(counter.text(STAND_IN_DESCRIPTION) + mean + FINDING_FRAME_TOKENS)


@dataclass
class Estimator:
    """Renders and counts the calls of a run. `adapter`: the one the run formats prompts with (default: the
    configured one, else ChatAdapter). Outputs are capped at `max_output` per call; `reasoning` adds thinking
    tokens per call by role."""

    adapter: object = None
    max_output: dict[str, int] = field(default_factory=dict)
    reasoning: dict[str, int] = field(default_factory=dict)
    counter: PromptCounter = field(default_factory=PromptCounter)

    @classmethod
    def for_targets(cls, targets: dict[str, Target | None], adapter=None) -> Estimator:
        """Output caps and thinking tokens of each role's target (backbone, judge)."""
        present = {role: t for role, t in targets.items() if t is not None}
        return cls(adapter=adapter, max_output={role: t.output for role, t in present.items()},
                   reasoning={role: t.reasoning for role, t in present.items()})

    def _adapter(self):
        import dspy  # on use: the cost flags above load without DSPy, so `tide --help` stays fast

        return self.adapter or dspy.settings.adapter or dspy.ChatAdapter()

    def _output(self, role: str, visible: int) -> int:
        total = visible + self.reasoning.get(role, 0)
        cap = self.max_output.get(role)
        return min(total, cap) if cap else total

    def _calls(self, role: str, step: str, rendered: list[tuple[list[dict], int]]) -> list[Call]:
        """Calls of one step, each's cached share measured against the step's first prompt."""
        calls, first = [], None
        for messages, visible in rendered:
            prompt = self.counter.messages(messages)
            cached = 0
            if first is None:
                first = messages
            else:
                shared = self.counter.shared_prefix(first, messages)
                cached = shared if shared >= MIN_CACHED_PREFIX else 0
            calls.append(Call(role, step, prompt, self._output(role, visible), min(cached, prompt)))
        return calls

    def round_messages(self, program, instance: Instance) -> list[tuple[list[dict], int]]:
        """(messages, assumed visible output tokens) of each round call, when every round runs."""
        shapes = round_shapes(program)
        if not shapes:
            return []
        setting = program.setting
        focus = program.view(instance).ids[:program.focus_size] if program.scanner is not None else None
        view = program.view(instance, focus)
        per_finding = finding_tokens(instance, self.counter)
        adapter, out = self._adapter(), []
        for n_found, max_new in shapes:
            found = [Finding(description=STAND_IN_DESCRIPTION, evidence=view.ids[:setting.typical_evidence],
                             round=1) for _ in range(n_found)]
            inputs = setting.round_inputs(instance, view, program.guidance_text(), found, max_new, focus)
            signature = setting.grounded_signature(program.discover.signature, instance, view, max_new,
                                                   program.max_evidence)
            out.append((adapter.format(signature, program.discover.demos, inputs), max_new * per_finding))
        return out

    def scan_messages(self, program, instance: Instance) -> list[tuple[list[dict], int]]:
        from tide_dspy.scan import SCAN_MAX_TOKENS

        if program.scanner is None:
            return []
        setting, rate = program.setting, program.scanner.rate
        guidance = program.scan_guidance()
        adapter = self._adapter()
        return [(adapter.format(rate.signature, rate.demos,
                                {"templates": guidance, "artifact": setting.render_artifact(a)}), SCAN_MAX_TOKENS)
                for a in program.view(instance).artifacts]

    def program_calls(self, program, instance: Instance) -> list[Call]:
        """The backbone's calls on one instance: the scan (when the program scans) and every round."""
        return (self._calls("backbone", "scan", self.scan_messages(program, instance))
                + self._calls("backbone", "round", self.round_messages(program, instance)))

    def largest_prompt(self, program, instance: Instance) -> int:
        return max((c.prompt for c in self.program_calls(program, instance)), default=0)

    def judge_calls(self, instance: Instance, n_findings: int) -> list[Call]:
        """The LLM judge's calls on one instance: one pair per gold problem that a finding can match (all of them,
        up to the findings the program returns), rated for identification and, where the gold problem has a
        resolution, for resolution. An upper bound: a finding that matches no gold problem is never judged."""
        from tide_dspy.domains import get_setting
        from tide_dspy.signatures import JudgeIdentification, JudgeResolution

        setting, adapter = get_setting(instance.setting), self._adapter()
        identify, resolve = [], []
        gold: list[GoldProblem] = list(instance.problems)[:n_findings]
        for g in gold:
            identify.append((adapter.format(JudgeIdentification, [], {"reference": g.description,
                                                                       "prediction": STAND_IN_DESCRIPTION}),
                             JUDGE_OUTPUT_TOKENS))
            if setting.resolution_of(g) is not None:
                reference = setting.render_resolution(g)
                resolve.append((adapter.format(JudgeResolution, [], {"problem": g.description, "reference": reference,
                                                                     "prediction": reference}),
                                JUDGE_OUTPUT_TOKENS))
        return self._calls("judge", "judge", identify) + self._calls("judge", "judge", resolve)

    def instance_calls(self, program, instance: Instance, judged: bool) -> list[Call]:
        calls = self.program_calls(program, instance)
        if judged:
            calls += self.judge_calls(instance, sum(k for _, k in round_shapes(program)))
        return calls

    def proposal_calls(self, n: int, prompt: int = PROPOSAL_PROMPT_TOKENS) -> list[Call]:
        return [Call("backbone", "proposal", prompt, self._output("backbone", PROPOSAL_OUTPUT_TOKENS))] * n

    def distill_calls(self, setting, instance: Instance, problem: GoldProblem, attempts: int) -> list[Call]:
        """The backbone's calls distilling one solved case under dspy.Refine (tide_dspy.refinement): the first
        attempt, then `attempts - 1` retries whose signature carries the abstraction check's hint as Refine appends
        it. An upper bound: a case stops at the first draft that passes. The advice between attempts is the
        check's own feedback, not a model's, so it costs nothing."""
        case = setting.solved_case(instance, problem)
        adapter = self._adapter()
        first = self._calls("backbone", "distill", [(adapter.format(setting.distill_signature, [], case),
                                                     DISTILL_OUTPUT_TOKENS)])
        if attempts == 1:
            return first
        # The hint changes the signature's field list at the top of the prompt: the retries share their prefix
        # with one another, not with the first attempt.
        import dspy

        name, desc = REFINE_HINT
        hinted = setting.distill_signature.append(name, dspy.InputField(desc=desc))
        retry = adapter.format(hinted, [], {**case, name: stand_in_hint(case)})
        return first + self._calls("backbone", "distill", [(retry, DISTILL_OUTPUT_TOKENS)] * (attempts - 1))


def stand_in_hint(case: dict[str, str]) -> str:
    """A retry's hint as the abstraction check writes it, for a draft that copied the first HINT_LEAKS specific
    tokens of its case."""
    from tide_dspy.abstraction import AbstractionReport, Leak, case_text, tokens

    leaks: dict[str, Leak] = {}
    for kind, surface, key, _ in tokens(case_text(case)):
        if key and len(leaks) < HINT_LEAKS:
            leaks.setdefault(key, Leak(kind, surface, "pattern"))
    return AbstractionReport(list(leaks.values())).feedback()


# ---- an estimate: calls by step and role, priced ----

@dataclass
class Estimate:
    """Calls, tokens and USD per (label, role): a method, or a step of compile/tune. `skipped` holds the instances
    left out as over the window, with the reasons."""

    models: dict[str, str | None]  # role -> backbone name
    prices: dict[str, Prices | None]
    tallies: dict[tuple[str, str], Tally] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    instances: int = 0
    tokenizer: str = field(default_factory=tokenizer_name)

    @classmethod
    def for_targets(cls, targets: dict[str, Target | None]) -> Estimate:
        return cls(models={r: t.name for r, t in targets.items() if t is not None},
                   prices={r: t.prices for r, t in targets.items() if t is not None})

    def add(self, label: str, calls: Iterable[Call], times: float = 1) -> None:
        calls = list(calls)
        for role in ("backbone", "judge"):
            mine = [c for c in calls if c.role == role]
            if mine or role == "backbone":  # a method always has its backbone row, even a floor's zero
                self.tallies.setdefault((label, role), Tally()).add(mine, times)

    def cost(self, caching: bool = False) -> float | None:
        costs = [t.cost(self.prices.get(role), caching) for (_, role), t in self.tallies.items() if t.calls]
        return None if any(c is None for c in costs) else sum(costs)

    def totals(self) -> Tally:
        total = Tally()
        for t in self.tallies.values():
            total.merge(t)
        return total

    def table(self) -> str:
        """Markdown: one row per (label, role), then the total, the prices and the notes."""
        head = (
            "| what | role | model | calls | prompt tokens | cached prompt | output tokens | USD | USD with caching |"
        )
        lines = [head, "|---|---|---|---|---|---|---|---|---|"]
        for (label, role), t in self.tallies.items():
            prices = self.prices.get(role)
            lines.append(f"| {label} | {role} | {self.models.get(role) or '-'} | {_n(t.calls)} | {_n(t.prompt)} | "
                         f"{_n(t.cached)} | {_n(t.output)} | {money(t.cost(prices)) if t.calls else '$0'} | "
                         f"{money(t.cost(prices, caching=True)) if t.calls else '$0'} |")
        total = self.totals()
        lines.append(f"| **total** | | | {_n(total.calls)} | {_n(total.prompt)} | {_n(total.cached)} | "
                     f"{_n(total.output)} | **{money(self.cost())}** | **{money(self.cost(caching=True))}** |")
        lines.append("")
        for role in ("backbone", "judge"):
            if any(r == role and t.calls for (_, r), t in self.tallies.items()):
                lines.append(f"{role} {self.models.get(role)}: {describe_prices(self.prices.get(role))}")
        lines.append(f"tokens counted with {self.tokenizer}; outputs are assumed (docs/cost.md): every round runs "
                     "and fills its quota, no parse retries")
        if self.skipped:
            lines.append(f"skipped: {len(self.skipped)} (over the window), not in the totals:")
            lines += [f"  {i}: {why}" for i, why in self.skipped.items()]
        lines += self.notes
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "models": self.models, "tokenizer": self.tokenizer, "instances": self.instances,
            "prices": {r: (None if p is None else {"prompt": p.prompt, "completion": p.completion,
                                                   "cached_prompt": p.cached_prompt, "source": p.source})
                       for r, p in self.prices.items()},
            "rows": [{"what": label, "role": role, "calls": round(t.calls), "prompt_tokens": round(t.prompt),
                      "cached_prompt_tokens": round(t.cached), "output_tokens": round(t.output),
                      "usd": _round(t.cost(self.prices.get(role))),
                      "usd_with_caching": _round(t.cost(self.prices.get(role), caching=True))}
                     for (label, role), t in self.tallies.items()],
            "usd": _round(self.cost()), "usd_with_caching": _round(self.cost(caching=True)),
            "skipped": self.skipped, "notes": self.notes,
        }


def _n(value: float) -> str:
    return f"{round(value):,}"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def money(value: float | None) -> str:
    if value is None:
        return "n/a (no price: pass --price IN,OUT)"
    return f"${value:,.2f}" if value >= 0.995 or value == 0 else f"${value:.4f}"


def describe_prices(prices: Prices | None) -> str:
    if prices is None:
        return "no price in the map: pass --price IN,OUT (USD per million tokens)"
    cached = "no cache discount" if prices.cached_prompt is None else f"cached prompt ${prices.cached_prompt}/M"
    return (f"prompt ${prices.prompt}/M, output ${prices.completion}/M, {cached}"
            + (f" ({prices.source})" if prices.source else ""))


def estimate_runs(plans: dict[str, object], instances: list[Instance], estimator: Estimator,
                  targets: dict[str, Target | None], *, runs: float = 1,
                  estimate: Estimate | None = None) -> Estimate:
    """The estimate of running each program of `plans` (label -> program) on every instance, `runs` times, judged
    when `targets` has a judge. Instances whose largest prompt plus the requested output exceed the backbone's
    window are skipped (as the run skips them) and listed. Adds to `estimate` when given."""
    backbone, judge = targets["backbone"], targets.get("judge")
    if estimate is None:
        estimate = Estimate.for_targets(targets)
    estimate.instances += len(instances)
    for instance in instances:
        per_plan = {label: estimator.instance_calls(program, instance, judge is not None)
                    for label, program in plans.items()}
        if backbone.window is not None:
            largest = max((c.prompt for calls in per_plan.values() for c in calls if c.role == "backbone"), default=0)
            if largest + backbone.output > backbone.window:
                estimate.skipped[instance.instance_id] = over_window_reason(
                    largest, backbone.output, backbone.window, backbone.window_source, backbone.provider)
                continue
        for label, calls in per_plan.items():
            estimate.add(label, calls, times=runs)
    return estimate


# ---- optimizers: how many program runs and proposals a compile makes ----

@dataclass(frozen=True)
class OptimizerPlan:
    """A compile's work besides its before/after validation: passes of the program over the train part and over
    the validation part (fractions where it reads batches), and proposal calls (`proposal_prompt`: their prompt
    size when it is not PROPOSAL_PROMPT_TOKENS)."""

    train_passes: float
    val_passes: float
    proposals: int
    note: str
    proposal_prompt: int | None = None


def optimizer_plan(config: dict, init: dict, comp: dict, n_train: int, n_val: int, predictors: int,
                   round_prompt: int) -> OptimizerPlan:
    """How a DSPy optimizer spends calls, from its algorithm and the config's arguments: an approximation (an
    optimizer may stop early). Raises for an optimizer it has no rule for."""
    name = str(config["optimizer"]).rpartition(".")[2]
    if name == "COPRO":
        breadth, depth = int(init.get("breadth", 10)), int(init.get("depth", 3))
        return OptimizerPlan(breadth * depth * predictors, 0, (depth + 1) * predictors,
                             f"COPRO: {breadth} candidates x {depth} steps per predictor ({predictors}), each "
                             f"scored on the {n_train} train instances")
    if name == "MIPROv2":
        n = {"light": 6, "medium": 12, "heavy": 18}.get(init.get("auto"), int(init.get("num_candidates") or 6))
        trials = int(comp.get("num_trials") or max(2 * predictors * math.log2(max(n, 2)), 1.5 * n))
        return OptimizerPlan(0, trials + 1, n * predictors,
                             f"MIPROv2: {n} candidates per predictor, {trials} trials on the {n_val} validation "
                             "instances")
    if name == "GEPA":
        metric_calls = int(init.get("max_metric_calls") or 0)
        if not metric_calls:
            raise ValueError("GEPA without max_metric_calls has no fixed budget to estimate; set it with "
                             "--opt init.max_metric_calls=N")
        minibatch = int(init.get("reflection_minibatch_size", 3))
        return OptimizerPlan(metric_calls / max(n_train, 1), 0, math.ceil(metric_calls / max(minibatch, 1) / 2),
                             f"GEPA: {metric_calls} metric calls; each reflection reads {minibatch} examples",
                             proposal_prompt=minibatch * round_prompt)
    if name == "SIMBA":
        bsize = min(int(init.get("bsize", 32)), n_train)
        candidates, steps = int(init.get("num_candidates", 6)), int(init.get("max_steps", 8))
        return OptimizerPlan(steps * bsize * (candidates + 1) / max(n_train, 1), 0, steps * candidates,
                             f"SIMBA: {steps} steps x {candidates} candidates on batches of {bsize}")
    if name in ("BootstrapFewShot", "LabeledFewShot"):
        return OptimizerPlan(1.0 if name == "BootstrapFewShot" else 0.0, 0, 0,
                             f"{name}: at most one run per train instance")
    raise ValueError(f"no cost rule for optimizer {name}; the dry run knows COPRO, MIPROv2, GEPA, SIMBA and "
                     "BootstrapFewShot")


# ---- the budget of a running evaluation ----

def check_max_cost(max_cost: float | None) -> None:
    """--max-cost, the USD cap on LM spend of every command that takes it: None, or a finite number above 0 (nan
    and inf would switch the cap off)."""
    if max_cost is not None and not (max_cost > 0 and math.isfinite(max_cost)):
        raise ValueError(f"--max-cost must be a positive number of USD, got {max_cost}")


def add_max_cost_option(p: argparse.ArgumentParser, stops: str) -> None:
    """--max-cost USD, one option for every command that caps its LM spend; `stops` says where this command checks
    the cap and what it keeps when it stops."""
    p.add_argument("--max-cost", type=positive_float, default=None, metavar="USD",
                   help=f"a cap on the USD the run's LM calls spend (what the provider reports for a call, else "
                        f"its tokens at the prices; the embedded model costs nothing): {stops}")


@dataclass(frozen=True)
class Limits:
    """What a run may spend and what must fit. None: no budget; prices, window and output from the backbone."""

    max_cost: float | None = None
    prices: Prices | None = None
    judge_prices: Prices | None = None
    context_window: int | None = None
    output_tokens: int | None = None

    def __post_init__(self):
        check_max_cost(self.max_cost)
        if self.context_window is not None and self.context_window < 1:
            raise ValueError(f"--context-window must be at least 1 token, got {self.context_window}")

    @classmethod
    def from_namespace(cls, namespace: argparse.Namespace) -> Limits:
        """The limits of the options add_cost_options added; an option a command lacks is None."""
        return cls(max_cost=getattr(namespace, "max_cost", None), prices=getattr(namespace, "price", None),
                   judge_prices=getattr(namespace, "judge_price", None),
                   context_window=getattr(namespace, "context_window", None))


def add_cost_options(p: argparse.ArgumentParser, budget: bool = False, judge: bool = True) -> None:
    """--dry-run and --price (every command that calls a model), --judge-price where a judge runs; with `budget`,
    --max-cost and --context-window."""
    p.add_argument("--dry-run", action="store_true",
                   help="render the prompts the run would send, count their tokens, print the calls, prompt and "
                        "output tokens and USD per method and backbone (judge included), and exit without calling "
                        "a model")
    p.add_argument("--price", type=price, default=None, metavar="IN,OUT[,CACHED]",
                   help="the backbone's USD per million prompt and output tokens (and cached prompt tokens), for "
                        "estimates and budgets where the price map has none or you pay another price")
    if judge:
        p.add_argument("--judge-price", type=price, default=None, metavar="IN,OUT[,CACHED]",
                       help="the same for the judge backbone")
    if budget:
        add_max_cost_option(p, "no instance starts once the USD spent so far plus its estimated cost would pass "
                               "USD; finished rows are kept and --resume continues")
        p.add_argument("--context-window", type=positive_int, default=None, metavar="TOKENS",
                       help="the backbone's context window for the pre-check that skips instances which cannot fit "
                            "(default: the backbone's, e.g. 200000 for claude-sonnet-4.5)")


class RunGuard:
    """The window pre-check and the budget of one evaluation.

    `skip_reason(instance)` says why an instance cannot fit (None when it fits or the window is unknown).
    `admit(instance)` starts an instance only while the money spent so far (from the LMs' histories) plus the
    estimated cost of the instances in flight and of this one stays within `max_cost`; `release` ends it."""

    def __init__(self, limits: Limits, program, lm, judge_lm, marks: dict[str, str | None]):
        self.program, self.marks = program, marks
        self.targets = {
            "backbone": Target.of(lm, prices=limits.prices, window=limits.context_window,
                                  output=limits.output_tokens),
            "judge": Target.of(judge_lm, prices=limits.judge_prices) if judge_lm is not None else None,
        }
        self.estimator = Estimator.for_targets(self.targets)
        self.max_cost = limits.max_cost
        if self.max_cost is not None:
            missing = [f"the {role} {t.name}" for role, t in self.targets.items() if t is not None and t.prices is None]
            if missing:
                raise ValueError(f"--max-cost needs a price for {' and '.join(missing)}, and none is in the price "
                                 "map: pass --price IN,OUT (and --judge-price IN,OUT for the judge), USD per million "
                                 "tokens")
        self._lock = threading.Lock()
        self._reserved: dict[str, float] = {}
        self.stopped: str | None = None
        self.not_run: list[str] = []

    @property
    def window(self) -> int | None:
        return self.targets["backbone"].window

    @property
    def prices(self) -> dict[str, Prices | None]:
        return {role: t.prices if t is not None else None for role, t in self.targets.items()}

    def skip_reason(self, instance: Instance) -> str | None:
        backbone = self.targets["backbone"]
        if backbone.window is None:
            return None
        prompt = self.estimator.largest_prompt(self.program, instance)
        if backbone.max_prompt is not None and prompt > backbone.max_prompt:
            return (f"over the input limit: the largest prompt is about {prompt:,} tokens, over the "
                    f"{backbone.max_prompt:,} input tokens {backbone.name} accepts")
        if prompt + backbone.output <= backbone.window:
            return None
        return over_window_reason(prompt, backbone.output, backbone.window, backbone.window_source, backbone.provider)

    def spent(self) -> float:
        """USD spent since the marks: the LM histories' costs, else their tokens at the prices."""
        from tide_dspy.backbones.usage import entries_since, entry_cost

        total = 0.0
        for role, target in self.targets.items():
            if target is not None and target.lm is not None:
                total += sum(entry_cost(e, target.prices) for e in entries_since(target.lm, self.marks.get(role)))
        return total

    def estimated_cost(self, instance: Instance, judge_only: bool = False) -> float:
        calls = self.estimator.instance_calls(self.program, instance, self.targets["judge"] is not None)
        return calls_cost([c for c in calls if c.role == "judge" or not judge_only], self.prices)

    def admit(self, instance: Instance, judge_only: bool = False) -> bool:
        """Whether `instance` may start (reserving its estimated cost); `judge_only`: only its judging runs."""
        if self.max_cost is None:
            return True
        needed = self.estimated_cost(instance, judge_only)
        with self._lock:
            if self.stopped is None:
                spent = self.spent()
                if spent + sum(self._reserved.values()) + needed <= self.max_cost:
                    self._reserved[instance.instance_id] = needed
                    return True
                self.stopped = (f"stopped at the budget: ${spent:.4f} spent of --max-cost ${self.max_cost:g}, and "
                                f"the next instance ({instance.instance_id}) is estimated at ${needed:.4f}")
            self.not_run.append(instance.instance_id)
            return False

    def release(self, instance: Instance) -> None:
        with self._lock:
            self._reserved.pop(instance.instance_id, None)

    def summary(self) -> dict | None:
        if self.max_cost is None:
            return None
        return {"max_cost": self.max_cost, "spent": round(self.spent(), 6), "stopped": self.stopped,
                "not_run": list(self.not_run)}
