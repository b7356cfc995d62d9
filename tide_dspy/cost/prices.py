"""What a call costs and what fits: prices, the context window and the output a call asks for.

Prices, windows and output limits come from LiteLLM's model cost map as DSPy bundles it (the map DSPy prices its own
calls with, so an estimate and the cost a call reports agree); the provider rules (backbones.providers) add only what
the map lacks or states for another request; the caller overrides both (--price, --context-window).

One window model serves every command (the evaluation's pre-check, the dry run, discover's windows): the window is
--context-window, else the embedded engine's n_ctx, else the rules' window, else the map's input limit, else unknown;
a prompt fits when it and the requested output fit the window, and it fits the map's input limit. One output default:
what the LM asks for (`requested_output`), else DEFAULT_OUTPUT_TOKENS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

DEFAULT_OUTPUT_TOKENS = 16_384  # what a call asks for when its LM names no max_tokens (Anthropic requires one)
PLANNING_WINDOW = 32_768  # discover plans its windows with this when nothing says the LM's (Qwen2.5-Coder's n_ctx)
REASONING_TOKENS = 2_000  # thinking per call on a reasoning backbone (one whose rules take no temperature)
# Providers that offer a longer window on request (what to send, where it is documented).
LONG_CONTEXT = {
    "anthropic": ("Claude Sonnet 4/4.5 take a 1M-token window with the beta header "
                  "`anthropic-beta: context-1m-2025-08-07` (long-context prices apply above 200k prompt tokens; "
                  "https://docs.claude.com/en/docs/build-with-claude/context-windows)"),
}


@dataclass(frozen=True)
class Prices:
    """USD per million tokens, list prices."""

    prompt: float
    completion: float
    cached_prompt: float | None = None  # a cache read; None where the provider has no discount
    source: str = ""
    cache_write: float | None = None  # a cache write, where the provider charges one (Anthropic: 1.25 x prompt)

    def cost_of(self, prompt: float, completion: float, cached: float = 0, cache_write: float = 0) -> float:
        """USD of these tokens: `cached` (read from the provider's cache) and `cache_write` tokens are part of
        `prompt` and cost the cache-read and cache-write prices, where there are any, else the prompt price. The one
        pricing of an LM call, for run budgets, usage summaries and estimates alike."""
        plain = max(0, prompt - cached - cache_write)
        return (plain * self.prompt + completion * self.completion
                + cached * (self.cached_prompt if self.cached_prompt is not None else self.prompt)
                + cache_write * (self.cache_write if self.cache_write is not None else self.prompt)) / 1_000_000

    def describe(self) -> str:
        cached = "no cache discount" if self.cached_prompt is None else f"cached prompt ${self.cached_prompt:g}/M"
        return (f"prompt ${self.prompt:g}/M, output ${self.completion:g}/M, {cached}"
                + (f" ({self.source})" if self.source else ""))


FREE = Prices(0.0, 0.0, 0.0, "runs on this machine: no charge")


def map_entry(model: str | None) -> dict:
    """The cost map's entry for a "provider/model" string ({} when the map has none)."""
    from dspy.clients.model_metadata import model_info

    provider, _, name = (model or "").partition("/")
    return model_info(provider, name) if name else {}


def model_prices(model: str | None, tier: str | None = None) -> Prices | None:
    """The list prices of `model` in the cost map, or None. `tier` reads another price list of the same entry:
    "batches" (batch APIs), "flex", "priority"."""
    entry = map_entry(model)
    suffix = f"_{tier}" if tier else ""

    def per_million(key: str) -> float | None:
        value = entry.get(key + suffix)
        return value * 1e6 if isinstance(value, (int, float)) and math.isfinite(value) else None

    prompt, completion = per_million("input_cost_per_token"), per_million("output_cost_per_token")
    if prompt is None or completion is None:
        return None
    return Prices(prompt, completion, per_million("cache_read_input_token_cost"),
                  entry.get("source") or f"LiteLLM's model cost map ({model})",
                  per_million("cache_creation_input_token_cost"))


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


def requested_output(lm) -> int:
    """The output tokens each call of `lm` asks for: its max_tokens, else its engine's, else DEFAULT_OUTPUT_TOKENS."""
    kwargs = getattr(lm, "kwargs", None) or {}
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if kwargs.get(key):
            return int(kwargs[key])
    engine_max = getattr(getattr(lm, "engine", None), "max_tokens", None)
    return engine_max if isinstance(engine_max, int) and engine_max > 0 else DEFAULT_OUTPUT_TOKENS


def is_embedded(lm) -> bool:
    """The LM runs on this machine's embedded engine (its rules say so, or its engine has an n_ctx): no charge."""
    rules = getattr(lm, "tide_rules", None)
    return (rules is not None and rules.provider == "local") or isinstance(
        getattr(getattr(lm, "engine", None), "n_ctx", None), int)


def map_key(lm) -> str | None:
    """The cost map entry that describes `lm`: its rules' (where the model string is not the map's), else its model
    string; none for the embedded engine and a served model (no price list, and windows of their own)."""
    rules = getattr(lm, "tide_rules", None)
    if lm is None or is_embedded(lm) or (rules is not None and rules.provider == "openai-compatible"):
        return None
    return (rules.metadata if rules is not None and rules.metadata else None) or getattr(lm, "model", None)


def prices_of(lm) -> Prices | None:
    """What `lm`'s calls cost: nothing on this machine, else the cost map's list prices (None when unknown)."""
    return FREE if lm is not None and is_embedded(lm) else model_prices(map_key(lm))


@dataclass(frozen=True)
class Target:
    """One LM of a run (backbone, judge or proposer) as estimates and budgets see it: its name, prices, window,
    requested output and assumed thinking per call."""

    name: str | None
    lm: object = None
    prices: Prices | None = None
    window: int | None = None
    window_source: str = "unknown"
    max_prompt: int | None = None  # an input limit inside the window (OpenAI's 272k of gpt-5-mini's 400k)
    output: int = DEFAULT_OUTPUT_TOKENS
    reasoning: int = 0
    provider: str = "unknown"

    @classmethod
    def of(cls, lm, *, prices: Prices | None = None, window: int | None = None, output: int | None = None,
           like=None) -> Target:
        """From the LM: the backbone get_lm built it for (its rules), its engine, its max_tokens; `prices`,
        `window` and `output` override (--price, --context-window). An LM built elsewhere (a caller's own dspy.LM)
        is priced and sized by its model string in the cost map, or as `like` (an LM get_lm built for the backbone
        it stands in for, never called)."""
        sized = like if like is not None else lm
        rules = getattr(sized, "tide_rules", None)
        name = getattr(sized, "tide_backbone", None) or getattr(sized, "model", None)
        entry = map_entry(map_key(sized))
        n_ctx = getattr(getattr(sized, "engine", None), "n_ctx", None)
        max_input = entry.get("max_input_tokens")
        if window:
            size, source = window, "--context-window"
        elif isinstance(n_ctx, int) and n_ctx > 0:
            size, source = n_ctx, "the embedded engine's n_ctx"
        elif rules is not None and rules.context_window:
            size, source = rules.context_window, f"{name}'s window"
        elif isinstance(max_input, int):
            size, source = max_input, f"{name}'s input limit in LiteLLM's model cost map"
        else:
            size, source = None, "unknown"
        return cls(name=name, lm=lm, prices=prices or prices_of(sized), window=size, window_source=source,
                   max_prompt=max_input if isinstance(max_input, int) and size and max_input < size else None,
                   output=output or requested_output(sized),
                   reasoning=REASONING_TOKENS if rules is not None and not rules.accepts_temperature else 0,
                   provider=rules.provider if rules is not None else "unknown")

    def planning_window(self) -> tuple[int, str]:
        """(window, where it comes from) for planning discover's windows: the window, else PLANNING_WINDOW."""
        return (self.window, self.window_source) if self.window else (PLANNING_WINDOW, "default")

    def skip_reason(self, prompt: int) -> str | None:
        """Why a call with a prompt of `prompt` tokens cannot be sent (None when it fits or the window is unknown)."""
        if self.max_prompt is not None and prompt > self.max_prompt:
            return (f"over the input limit: the largest prompt is about {prompt:,} tokens, over the "
                    f"{self.max_prompt:,} input tokens {self.name} accepts")
        if self.window is None or prompt + self.output <= self.window:
            return None
        reason = (f"over the window: the largest prompt is about {prompt:,} tokens and {self.output:,} output tokens "
                  f"are requested, {prompt + self.output:,} in all, over the {self.window:,}-token window "
                  f"({self.window_source})")
        long_context = LONG_CONTEXT.get(self.provider)
        return reason + (f"; {long_context}" if long_context else "")


def money(value: float | None) -> str:
    if value is None:
        return "n/a (no price: pass --price IN,OUT)"
    return f"${value:,.2f}" if value >= 0.995 or value == 0 else f"${value:.4f}"


def describe_prices(prices: Prices | None) -> str:
    return "no price in the map: pass --price IN,OUT (USD per million tokens)" if prices is None else prices.describe()


@dataclass(frozen=True)
class Overrides:
    """What the caller states in place of the cost map: prices by role (--price, --judge-price) and the backbone's
    window and output (--context-window, an output size)."""

    prices: dict[str, Prices] = field(default_factory=dict)
    window: int | None = None
    output: int | None = None

    def __post_init__(self):
        if self.window is not None and self.window < 1:
            raise ValueError(f"--context-window must be at least 1 token, got {self.window}")

    def targets(self, lms: dict[str, object], like: dict[str, object] | None = None) -> dict[str, Target | None]:
        """role -> the Target of that role's LM (None where the run has none); `like`: role -> the LM that sizes
        it (Target.of)."""
        return {role: None if lm is None else Target.of(
            lm, prices=self.prices.get(role), window=self.window if role == "backbone" else None,
            output=self.output if role == "backbone" else None, like=(like or {}).get(role))
            for role, lm in lms.items()}
