"""What each provider accepts: sampling parameters, structured-output dialect, prompt caching, request options.

One `ProviderRules` per backbone (`Backbone.rules`). Every request tide-dspy sends to a hosted backbone (rounds,
retries, Multi's samples, judges, distillation) is shaped by these rules. Prices, windows and output limits come from
LiteLLM's model cost map (tide_dspy.cost.prices); a rule here adds only what that map lacks or states for another
request (`context_window`, `metadata`). Each rule names the page that documents it.

Where they apply: `ProviderLM` (backbones.calls) shapes every call's sampling parameters with `sampling`;
`tide_dspy.retry.sampling_config` asks the same rules before it writes a per-call config; and the round's output
schema is written in the provider's dialect (`sanitize_schema`, through `Setting.grounded_signature`).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field, replace
from typing import Any

from tide_dspy.backbones.batch_rules import ANTHROPIC_BATCH, DASHSCOPE_BATCH, GEMINI_BATCH, OPENAI_BATCH, BatchRules

logger = logging.getLogger(__name__)


# How the round's JSON schema must be written for a provider (sanitize_schema):
# - "full": as tide-dspy writes it (the embedded engine and openai-compatible servers compile every keyword);
# - "openai-strict": OpenAI's strict structured outputs: no `default`, at most 1,000 enum values;
# - "anthropic": Claude's structured outputs: no `default`, no length, numeric or array bounds (beyond minItems 0
#   or 1): each moves into the field's description;
# - "gemini": responseJsonSchema takes the keywords tide-dspy uses; `default` is dropped;
# - "json-object": the provider is asked for any JSON object, the schema is in the prompt only; `default` dropped;
# - "conservative": for a model nobody has checked: the strictest of the above.
SCHEMA_DIALECTS = ("full", "openai-strict", "anthropic", "gemini", "json-object", "conservative")


@dataclass(frozen=True)
class ProviderRules:
    provider: str  # openai | anthropic | gemini | dashscope | openai-compatible | local | unknown
    # Prompt + output tokens, where the cost map's input limit is not the window a plain request gets.
    context_window: int | None = None
    # The cost map's entry for this model ("provider/model"), where the model string is not its key.
    metadata: str | None = None
    # Reasoning models take only their default temperature: samples then differ by rollout_id and seed alone.
    accepts_temperature: bool = True
    schema_dialect: str = "openai-strict"  # how the grounded JSON schema must be shaped for this provider
    docs: tuple[str, ...] = field(default_factory=tuple)
    accepts_seed: bool = True
    max_temperature: float = 2.0
    max_enum_values: int | None = None  # enum values in one schema, all enums together
    # "explicit": the prefix is cached only where a request marks it (Anthropic's cache_control); "implicit": the
    # provider caches repeated prefixes by itself; "none".
    prompt_cache: str = "implicit"
    request_options: dict = field(default_factory=dict)  # sent with every request (e.g. DashScope's thinking switch)
    json_fallback: bool = True  # DSPy's JSON-adapter retry of an unparsed answer (a structured-output request)
    batch: BatchRules | None = None  # the provider's batch API (backbones.batch_rules); None: no batch API

    def __post_init__(self):
        if self.schema_dialect not in SCHEMA_DIALECTS:
            raise ValueError(f"schema_dialect {self.schema_dialect!r}: choose one of {', '.join(SCHEMA_DIALECTS)}")

    def sampling(self, options: dict) -> dict:
        """`options` (an LM's kwargs or one call's config) without what this provider refuses: a temperature where
        only the default is taken, a seed where there is none, a temperature above the provider's range (clamped)."""
        shaped = dict(options)
        if not self.accepts_temperature:
            shaped.pop("temperature", None)
        elif isinstance(shaped.get("temperature"), (int, float)) and shaped["temperature"] > self.max_temperature:
            shaped["temperature"] = self.max_temperature
        if not self.accepts_seed:
            shaped.pop("seed", None)
        return shaped


UNKNOWN = ProviderRules("unknown", accepts_temperature=False, accepts_seed=False, schema_dialect="conservative",
                        max_enum_values=500, prompt_cache="none")

# The backbone a command runs on unless told otherwise: the embedded Qwen2.5-Coder 1.5B (backbones.registry names
# it). Here, beside the rules, so that the command line's options read it without loading the registry.
DEFAULT_BACKBONE = "local"

# The embedded engine and openai-compatible servers compile the full schema (llama.cpp grammars, vLLM guided
# decoding); their windows are the engine's n_ctx / the server's own, and no list price applies.
LOCAL = ProviderRules("local", schema_dialect="full", prompt_cache="none")
OPENAI_COMPATIBLE = ProviderRules("openai-compatible", schema_dialect="full", prompt_cache="none")

# The paper's four hosted backbones.
OPENAI_GPT5_MINI = ProviderRules(
    # https://platform.openai.com/docs/models/gpt-5-mini: a 400,000-token window, of which at most 272,000 input
    # (the map's input limit) and 128,000 output: the map has the two limits, not the window they share.
    # https://platform.openai.com/docs/guides/reasoning: reasoning models take only the default temperature (1).
    # https://platform.openai.com/docs/guides/structured-outputs#supported-schemas: no `default`; 1,000 enum values.
    "openai", context_window=400_000,
    accepts_temperature=False, schema_dialect="openai-strict", max_enum_values=1000, batch=OPENAI_BATCH,
    docs=("https://platform.openai.com/docs/models/gpt-5-mini", "https://platform.openai.com/docs/guides/reasoning",
          "https://platform.openai.com/docs/guides/structured-outputs#supported-schemas",
          "https://platform.openai.com/docs/guides/prompt-caching"))
ANTHROPIC_SONNET_45 = ProviderRules(
    # https://docs.claude.com/en/docs/about-claude/models/overview: a 200K window; the map's 1M input limit is the
    # beta window, which needs a header tide-dspy does not send (cost.prices.LONG_CONTEXT).
    # https://docs.claude.com/en/api/messages: temperature 0..1, no seed field, max_tokens required.
    # https://docs.claude.com/en/docs/build-with-claude/structured-outputs#json-schema-limitations: no length,
    # numeric or array bounds beyond minItems 0/1.
    # https://docs.claude.com/en/docs/build-with-claude/prompt-caching: caches only up to cache_control marks;
    # reads cost 0.1x and writes 1.25x the input price (the map's cache prices).
    "anthropic", context_window=200_000, schema_dialect="anthropic", accepts_seed=False,
    max_temperature=1.0, prompt_cache="explicit", batch=ANTHROPIC_BATCH,
    docs=("https://docs.claude.com/en/docs/build-with-claude/structured-outputs",
          "https://docs.claude.com/en/docs/build-with-claude/context-windows",
          "https://docs.claude.com/en/docs/build-with-claude/prompt-caching"))
GEMINI_35_FLASH = ProviderRules(
    # https://ai.google.dev/gemini-api/docs/models: 1,048,576 input and 65,536 output tokens; the window is taken
    # as the map's input limit, prompt and output together: the safe reading for a pre-check.
    # https://ai.google.dev/gemini-api/docs/gemini-3: keep temperature at its default of 1.0.
    "gemini", accepts_temperature=False, schema_dialect="gemini", batch=GEMINI_BATCH,
    docs=("https://ai.google.dev/gemini-api/docs/gemini-3", "https://ai.google.dev/gemini-api/docs/structured-output",
          "https://ai.google.dev/gemini-api/docs/caching"))
DASHSCOPE_QWEN_36_FLASH = ProviderRules(
    # https://www.alibabacloud.com/help/en/model-studio/compatibility-of-openai-with-dashscope: OpenAI's chat
    # format; JSON mode needs "json" in the prompt. https://www.alibabacloud.com/help/en/model-studio/deep-thinking:
    # a non-streaming call must send enable_thinking false where thinking is on by default, so it is always sent.
    # The map has no dashscope entry: the limits (1M window, 65,536 output) and price are OpenRouter's listing.
    "dashscope", metadata="openrouter/qwen/qwen3.6-flash", schema_dialect="json-object",
    request_options={"extra_body": {"enable_thinking": False}}, batch=DASHSCOPE_BATCH,
    docs=("https://www.alibabacloud.com/help/en/model-studio/compatibility-of-openai-with-dashscope",
          "https://www.alibabacloud.com/help/en/model-studio/deep-thinking"))

# Rules for hosted model strings, so a raw string of a registered model gets its backbone's rules.
KNOWN_MODELS: dict[str, ProviderRules] = {
    "openai/gpt-5-mini": OPENAI_GPT5_MINI,
    "anthropic/claude-sonnet-4-5": ANTHROPIC_SONNET_45,
    "gemini/gemini-3.5-flash": GEMINI_35_FLASH,
    "dashscope/qwen3.6-flash": DASHSCOPE_QWEN_36_FLASH,
}


def rules_for_model(model: str) -> ProviderRules:
    """The rules of a hosted model string; an unknown one gets conservative rules (no temperature, no seed, the
    strictest schema; its window and price are the cost map's, where it has them) and a warning that says so."""
    if model in KNOWN_MODELS:
        return KNOWN_MODELS[model]
    provider = model.split("/", 1)[0] if "/" in model else "unknown"
    logger.warning("%s is not a registered backbone: tide-dspy sends it conservative requests (no temperature, no "
                   "seed, a schema without bounds or defaults)", model)
    return replace(UNKNOWN, provider=provider)


def rules_of(lm) -> ProviderRules:
    """The rules an LM was built with (`get_lm` attaches them); an LM built elsewhere (DummyLM, a caller's own
    dspy.LM) keeps every parameter and schema keyword as written."""
    return getattr(lm, "tide_rules", None) or LOCAL


# ---- the JSON-schema dialects ----

# https://docs.claude.com/en/docs/build-with-claude/structured-outputs#json-schema-limitations
_BOUNDS = {
    "minLength": "at least {} characters", "maxLength": "at most {} characters",
    "minimum": "at least {}", "maximum": "at most {}", "exclusiveMinimum": "more than {}",
    "exclusiveMaximum": "less than {}", "multipleOf": "a multiple of {}",
    "minItems": "at least {} items", "maxItems": "at most {} items", "uniqueItems": "no repeated items",
    "minProperties": "at least {} properties", "maxProperties": "at most {} properties",
}


_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")  # name -> schema, not schemas


def _described(node: dict, notes: list[str]) -> None:
    if notes:
        text = "; ".join(notes)
        node["description"] = f"{node['description']} ({text})" if node.get("description") else text


def _visit(node: Any, dialect: str) -> None:
    if isinstance(node, list):
        for item in node:
            _visit(item, dialect)
        return
    if not isinstance(node, dict):
        return
    for key, value in list(node.items()):
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            for child in value.values():
                _visit(child, dialect)
        elif isinstance(value, (dict, list)):
            _visit(value, dialect)
    node.pop("default", None)
    if dialect in ("anthropic", "conservative"):
        notes = []
        for key, phrase in _BOUNDS.items():
            if key not in node or (key == "minItems" and node[key] in (0, 1)):
                continue
            value = node.pop(key)
            notes.append("not empty" if (key, value) == ("minLength", 1) else
                         phrase.format(value) if "{}" in phrase else phrase)
        _described(node, notes)


def _enums(node: Any, found: list[dict]) -> list[dict]:
    if isinstance(node, dict):
        if isinstance(node.get("enum"), list):
            found.append(node)
        for key, value in node.items():
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                for child in value.values():
                    _enums(child, found)
            elif isinstance(value, (dict, list)):
                _enums(value, found)
    elif isinstance(node, list):
        for item in node:
            _enums(item, found)
    return found


def _cap_enums(schema: dict, limit: int) -> None:
    """Above `limit` enum values in all, the largest enums become plain strings, largest first; the description
    keeps the instruction. Hygiene still drops a value the instance lacks."""
    enums = sorted(_enums(schema, []), key=lambda n: len(n["enum"]), reverse=True)
    total = sum(len(n["enum"]) for n in enums)
    for node in enums:
        if total <= limit:
            break
        total -= len(node.pop("enum"))
        _described(node, ["one of the handles shown in the context"])


def sanitize_schema(schema: dict, dialect: str, max_enum_values: int | None = None) -> dict:
    """`schema` written in a provider's dialect (see SCHEMA_DIALECTS); a copy, the argument is left as it was."""
    if dialect not in SCHEMA_DIALECTS:
        raise ValueError(f"schema dialect {dialect!r}: choose one of {', '.join(SCHEMA_DIALECTS)}")
    if dialect == "full":
        return schema
    out = copy.deepcopy(schema)
    sanitize_in_place(out, dialect, max_enum_values)
    return out


def sanitize_in_place(schema: dict, dialect: str, max_enum_values: int | None = None) -> None:
    """sanitize_schema, changing `schema` itself (for pydantic's json_schema_extra hooks)."""
    if dialect == "full":
        return
    _visit(schema, dialect)
    if max_enum_values is not None:
        _cap_enums(schema, max_enum_values)
