"""The dry-run estimate: the LM calls a run will make, their tokens and their price, before any call.

An estimate renders the prompts the run would send (each round's grounded signature, formatted by the adapter the
run uses, with the templates and the growing `already_found` of later rounds; Multi's samples; the scan's calls;
the judge's calls; an optimizer's proposals) and counts their tokens with `util.tokens.count_tokens`. Nothing here
calls a model. What the model will write cannot be rendered, so the output side rests on the assumptions named
below; docs/cost.md lists them. Which round calls a program makes is the program's own `call_plan()`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from tide_dspy.cost.prices import Prices, Target, describe_prices, money
from tide_dspy.schemas import Finding, GoldProblem, Instance
from tide_dspy.util.tokens import count_tokens, tokenizer_name

# ---- assumptions (docs/cost.md) ----
MESSAGE_OVERHEAD_TOKENS = 4  # role and framing tokens a chat API adds per message
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
ROLES = ("backbone", "judge", "proposer")

_SEGMENT = re.compile(r"(?=\[\[ ## )")  # DSPy's field markers; a BPE never merges across the newlines before one


def content_text(message: dict) -> str:
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


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
                total += self.text(tb[:_common_prefix(ta, tb)])
            break
        return total


def _common_prefix(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ---- calls and their totals ----

@dataclass(frozen=True)
class Call:
    """One LM call of an estimate. `cached`: prompt tokens that repeat the first call of the same step."""

    role: str  # backbone | judge | proposer
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
    return sum(prices[c.role].cost_of(c.prompt, c.output) for c in calls if prices.get(c.role) is not None)


def finding_tokens(setting, instance: Instance, counter: PromptCounter) -> int:
    """The assumed output size of one finding: a description like the stand-in, the resolution as large as the
    instance's gold resolutions on average, and the frame."""
    resolutions = [setting.render_resolution(p) for p in instance.problems if setting.resolution_of(p) is not None]
    if not resolutions:
        return FINDING_TOKENS_WITHOUT_GOLD
    mean = sum(counter.text(r) for r in resolutions) / len(resolutions)
    return round(counter.text(STAND_IN_DESCRIPTION) + mean + FINDING_FRAME_TOKENS)


# ---- the estimator ----

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
        """Output caps and thinking tokens of each role's target (backbone, judge, proposer)."""
        present = {role: t for role, t in targets.items() if t is not None}
        return cls(adapter=adapter, max_output={role: t.output for role, t in present.items()},
                   reasoning={role: t.reasoning for role, t in present.items()})

    def _adapter(self):
        import dspy  # on use: the cost flags load without DSPy, so `tide --help` stays fast

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
        plan = program.call_plan()
        if not plan:
            return []
        setting = program.setting
        focus = program.view(instance).ids[:program.focus_size] if program.scanner is not None else None
        view = program.view(instance, focus)
        per_finding = finding_tokens(setting, instance, self.counter)
        adapter, out = self._adapter(), []
        for n_found, max_new in plan:
            found = [Finding(description=STAND_IN_DESCRIPTION, evidence=view.ids[:setting.typical_evidence],
                             round=1) for _ in range(n_found)]
            inputs = setting.round_inputs(instance, view, program.guidance_text(), found, max_new, focus)
            signature = setting.grounded_signature(program.discover.signature, instance, view, max_new,
                                                   program.max_evidence)
            out.append((adapter.format(signature, program.discover.demos, inputs), max_new * per_finding))
        return out

    def scan_messages(self, program, instance: Instance) -> list[tuple[list[dict], int]]:
        if program.scanner is None:
            return []
        setting, rate = program.setting, program.scanner.rate
        guidance = program.scan_guidance()
        adapter = self._adapter()
        return [(adapter.format(rate.signature, rate.demos,
                                {"templates": guidance, "artifact": setting.render_artifact(a)}),
                 program.scanner.max_tokens) for a in program.view(instance).artifacts]

    def program_calls(self, program, instance: Instance) -> list[Call]:
        """The backbone's calls on one instance: the scan (when the program scans) and every round."""
        return (self._calls("backbone", "scan", self.scan_messages(program, instance))
                + self._calls("backbone", "round", self.round_messages(program, instance)))

    def largest_prompt(self, program, instance: Instance) -> int:
        return max((c.prompt for c in self.program_calls(program, instance)), default=0)

    def judge_calls(self, setting, instance: Instance, n_findings: int) -> list[Call]:
        """The LLM judge's calls on one instance: one pair per gold problem that a finding can match (all of them,
        up to the findings the program returns), rated for identification and, where the gold problem has a
        resolution, for resolution. An upper bound: a finding that matches no gold problem is never judged."""
        from tide_dspy.signatures import JudgeIdentification, JudgeResolution

        adapter = self._adapter()
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
            calls += self.judge_calls(program.setting, instance, sum(k for _, k in program.call_plan()))
        return calls

    def proposal_calls(self, n: int, prompt: int = PROPOSAL_PROMPT_TOKENS, role: str = "proposer") -> list[Call]:
        """An optimizer's `n` proposal calls, made by `role` (the proposer, or the backbone when it proposes)."""
        return [Call(role, "proposal", prompt, self._output(role, PROPOSAL_OUTPUT_TOKENS))] * n

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
        for role in ROLES:
            mine = [c for c in calls if c.role == role]
            # A method always has its backbone row, even a floor's zero; a proposal row is the proposer's alone.
            if mine or (role == "backbone" and all(c.role != "proposer" for c in calls)):
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
        lines = ["| what | role | model | calls | prompt tokens | cached prompt | output tokens | USD | USD with "
                 "caching |", "|---|---|---|---|---|---|---|---|---|"]
        for (label, role), t in self.tallies.items():
            prices = self.prices.get(role)
            lines.append(f"| {label} | {role} | {self.models.get(role) or '-'} | {_n(t.calls)} | {_n(t.prompt)} | "
                         f"{_n(t.cached)} | {_n(t.output)} | {money(t.cost(prices)) if t.calls else '$0'} | "
                         f"{money(t.cost(prices, caching=True)) if t.calls else '$0'} |")
        total = self.totals()
        lines.append(f"| **total** | | | {_n(total.calls)} | {_n(total.prompt)} | {_n(total.cached)} | "
                     f"{_n(total.output)} | **{money(self.cost())}** | **{money(self.cost(caching=True))}** |")
        lines.append("")
        for role in ROLES:
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


def estimate_runs(plans: dict[str, object], instances: list[Instance], estimator: Estimator,
                  targets: dict[str, Target | None], *, runs: float = 1,
                  estimate: Estimate | None = None) -> Estimate:
    """The estimate of running each program of `plans` (label -> program) on every instance, `runs` times, judged
    when `targets` has a judge. Instances whose largest prompt and the requested output do not fit the backbone's
    window are skipped (as the run skips them) and listed. Adds to `estimate` when given."""
    backbone, judge = targets["backbone"], targets.get("judge")
    if estimate is None:
        estimate = Estimate.for_targets(targets)
    estimate.instances += len(instances)
    for instance in instances:
        per_plan = {label: estimator.instance_calls(program, instance, judge is not None)
                    for label, program in plans.items()}
        largest = max((c.prompt for calls in per_plan.values() for c in calls if c.role == "backbone"), default=0)
        reason = backbone.skip_reason(largest)
        if reason is not None:
            estimate.skipped[instance.instance_id] = reason
            continue
        for label, calls in per_plan.items():
            estimate.add(label, calls, times=runs)
    return estimate
