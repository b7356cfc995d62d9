"""What each provider accepts: sampling parameters, window and output limits, structured-output dialect, prices.

One `ProviderRules` per backbone (`Backbone.rules`). Every request tide-dspy sends to a hosted backbone (rounds,
retries, Multi's samples, judges, distillation) is shaped by these rules, and every estimate before spending
(window pre-check, dry run, budget) reads them. Each rule names the page that documents it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Prices:
    """USD per million tokens, list prices."""

    prompt: float
    completion: float
    cached_prompt: float | None = None  # a cache read; None where the provider has no discount
    source: str = ""


@dataclass(frozen=True)
class ProviderRules:
    provider: str  # openai | anthropic | gemini | dashscope | openai-compatible | local | unknown
    context_window: int | None = None  # prompt + output tokens; None: unknown
    max_output_tokens: int | None = None
    # Reasoning models take only their default temperature: samples then differ by rollout_id and seed alone.
    accepts_temperature: bool = True
    schema_dialect: str = "openai-strict"  # how the grounded JSON schema must be shaped for this provider
    prices: Prices | None = None
    docs: tuple[str, ...] = field(default_factory=tuple)


UNKNOWN = ProviderRules("unknown", accepts_temperature=True, schema_dialect="conservative")

# The paper's four hosted backbones: the providers' published limits and list prices.
OPENAI_GPT5_MINI = ProviderRules(
    "openai", context_window=400_000, max_output_tokens=128_000, accepts_temperature=False,
    schema_dialect="openai-strict", prices=Prices(0.25, 2.00, 0.025, "https://platform.openai.com/docs/pricing"),
    docs=("https://platform.openai.com/docs/guides/reasoning",
          "https://platform.openai.com/docs/guides/structured-outputs#supported-schemas"))
ANTHROPIC_SONNET_45 = ProviderRules(
    "anthropic", context_window=200_000, max_output_tokens=64_000, schema_dialect="anthropic",
    prices=Prices(3.00, 15.00, 0.30, "https://docs.claude.com/en/docs/about-claude/pricing"),
    docs=("https://docs.claude.com/en/docs/build-with-claude/structured-outputs",
          "https://docs.claude.com/en/docs/build-with-claude/context-windows"))
GEMINI_35_FLASH = ProviderRules(
    "gemini", context_window=1_048_576, max_output_tokens=65_536, accepts_temperature=False,
    schema_dialect="gemini", prices=Prices(1.50, 9.00, None, "https://ai.google.dev/gemini-api/docs/pricing"),
    docs=("https://ai.google.dev/gemini-api/docs/gemini-3", "https://ai.google.dev/gemini-api/docs/structured-output"))
DASHSCOPE_QWEN_36_FLASH = ProviderRules(
    "dashscope", context_window=1_000_000, max_output_tokens=65_536, schema_dialect="json-object",
    prices=Prices(0.1875, 1.125, None, "OpenRouter's listing of qwen/qwen3.6-flash in DSPy's price snapshot"),
    docs=("https://www.alibabacloud.com/help/en/model-studio/compatibility-of-openai-with-dashscope",))
