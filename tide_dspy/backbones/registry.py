"""Named backbones and how to build a `dspy.LM` for each.

Settings come from arguments, else the TIDE_* variables (util.settings: TIDE_TEMPERATURE, TIDE_MAX_TOKENS,
TIDE_NUM_RETRIES, TIDE_TIMEOUT; for an openai-compatible server TIDE_API_BASE, TIDE_SERVED_MODEL, TIDE_SERVER_SCHEMA,
TIDE_SERVER_TIMEOUT; for the embedded engine TIDE_N_CTX, TIDE_NUM_THREADS, TIDE_CONSTRAINED, TIDE_FAST_GRAMMAR,
TIDE_REQUIRE_ITEMS), else the backbone's defaults and its provider's rules (backbones.providers). API keys are read
only from the environment by the provider client (OPENAI_API_KEY, ANTHROPIC_API_KEY, ...; TIDE_API_KEY for an
openai-compatible server) and never pass through tide-dspy's own arguments. TIDE_API_BASE applies to
openai-compatible only: a hosted backbone sends to another address only when one is passed explicitly (--api-base),
so a provider key never reaches a server left in the environment.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import dspy

from tide_dspy.backbones.calls import DEFAULT_RETRIES, ProviderLM, Served
from tide_dspy.backbones.llamacpp import DEFAULT_MAX_TOKENS, DEFAULT_N_CTX, LlamaCppEngine
from tide_dspy.backbones.providers import (
    ANTHROPIC_SONNET_45,
    DASHSCOPE_QWEN_36_FLASH,
    DEFAULT_BACKBONE,
    GEMINI_35_FLASH,
    LOCAL,
    OPENAI_COMPATIBLE,
    OPENAI_GPT5_MINI,
    UNKNOWN,
    ProviderRules,
    rules_for_model,
)
from tide_dspy.cost.prices import DEFAULT_OUTPUT_TOKENS, map_entry
from tide_dspy.util.hashing import short_sha256
from tide_dspy.util.secrets import scrub_secrets, scrub_text
from tide_dspy.util.settings import settings

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backbone:
    name: str
    kind: str  # "local" | "hosted" | "openai-compatible"
    model: str = ""  # DSPy/LiteLLM model string (hosted) or LOCAL_MODELS key (local)
    key_env: str = ""  # where the provider client reads the key
    verified: bool = True  # model string found in LiteLLM's model map shipped with this environment
    defaults: dict = field(default_factory=dict)
    note: str = ""
    # `tide discover` scans first with this focus size unless told otherwise (--scan N / --no-scan); set only
    # where the scan was measured to rank gold evidence above both chance floors (experiments/README.md).
    discover_scan: int | None = None
    rules: ProviderRules = UNKNOWN  # what the provider accepts and charges (backbones.providers)


BACKBONES: dict[str, Backbone] = {b.name: b for b in (
    Backbone("local", "local", "qwen2.5-coder-1.5b-instruct", note="Qwen2.5-Coder 1.5B, llama.cpp in-process",
             rules=LOCAL),
    Backbone("local-small", "local", "qwen2.5-coder-0.5b-instruct", note="Qwen2.5-Coder 0.5B, llama.cpp in-process",
             rules=LOCAL),
    Backbone("gpt-5-mini", "hosted", "openai/gpt-5-mini", "OPENAI_API_KEY", rules=OPENAI_GPT5_MINI),
    Backbone("claude-sonnet-4.5", "hosted", "anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY",
             rules=ANTHROPIC_SONNET_45),
    Backbone("gemini-3.5-flash", "hosted", "gemini/gemini-3.5-flash", "GEMINI_API_KEY", rules=GEMINI_35_FLASH),
    Backbone("qwen-3.6-flash", "hosted", "dashscope/qwen3.6-flash", "DASHSCOPE_API_KEY", verified=False,
             note="Alibaba Model Studio id assumed; not in LiteLLM's model map here, so unverified",
             rules=DASHSCOPE_QWEN_36_FLASH),
    # DSPy's LiteLLM client, with the output schema in the server's dialect (backbones.calls.Served).
    Backbone("openai-compatible", "openai-compatible", "openai-compatible", "TIDE_API_KEY", rules=OPENAI_COMPATIBLE,
             note="vLLM or `python -m llama_cpp.server`; needs --api-base / TIDE_API_BASE"),
)}

# Where DSPy's clients read a provider's key and (when set, sending the call through LiteLLM) its address.
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY",
           "dashscope": "DASHSCOPE_API_KEY"}
BASE_ENV = {"openai": ("OPENAI_API_BASE", "OPENAI_BASE_URL"), "anthropic": ("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"),
            "gemini": ("GEMINI_API_BASE", "GEMINI_BASE_URL"), "dashscope": ("DASHSCOPE_API_BASE", "DASHSCOPE_BASE_URL")}



def _first(*values):
    """The first value that is set: an argument, then its TIDE_* variable (util.settings), then a default."""
    return next((v for v in values if v is not None), None)


def default_threads() -> int:
    try:
        return max(1, min(len(os.sched_getaffinity(0)), 8))
    except AttributeError:  # not on Linux
        return max(1, min(os.cpu_count() or 1, 8))


def resolve(name: str | None) -> Backbone:
    """The registered backbone for `name`; a raw DSPy model string ("provider/model") becomes an ad-hoc one, with
    its registered model's rules, or conservative rules and a warning."""
    name = name or DEFAULT_BACKBONE
    if name in BACKBONES:
        return BACKBONES[name]
    if "/" in name:
        provider = name.split("/", 1)[0]
        return Backbone(name, "hosted", name, KEY_ENV.get(provider, f"{provider.upper()}_API_KEY"), verified=False,
                        note="raw DSPy model string", rules=rules_for_model(name))
    raise ValueError(f"unknown backbone {name!r}: choose one of {', '.join(BACKBONES)}, "
                     "or pass a DSPy model string such as 'openai/gpt-4o-mini'")


def provider_address(backbone: Backbone, api_base: str | None) -> tuple[str | None, str]:
    """Where a hosted backbone's calls go, and why: an explicit api_base, else the provider's own base variable
    (which DSPy's clients read, through LiteLLM), else the provider's public endpoint (None)."""
    if api_base:
        return api_base, "--api-base"
    for name in BASE_ENV.get(backbone.rules.provider, ()):
        if os.environ.get(name):
            return os.environ[name], f"${name}, through LiteLLM"
    return None, "the provider's own endpoint"


def _positive(value: float | None, what: str) -> float | None:
    if value is not None and not (value > 0 and value != float("inf")):
        raise ValueError(f"{what} must be a positive number of seconds, got {value}")
    return value


def get_lm(name: str = DEFAULT_BACKBONE, *, api_base: str | None = None, temperature: float | None = None,
           max_tokens: int | None = None, num_threads: int | None = None, num_retries: int | None = None,
           timeout: float | None = None, **kw) -> dspy.LM:
    """A `dspy.LM` for a backbone name or raw DSPy model string.

    Every backbone's LM is a `ProviderLM` (backbones.calls): each call is shaped by the provider's rules and retried
    (`num_retries`, default 8, TIDE_NUM_RETRIES; `timeout` seconds per request, TIDE_TIMEOUT). Extra keywords: n_ctx,
    constrained, require_items, fast_grammar, seed (local); model (the served model name) and server_schema
    (json_schema | llama.cpp | off: the dialect of the output schema, see backbones.calls.Served) for
    openai-compatible; anything else goes to `dspy.LM` (e.g. cache=False). Keys are refused: set them in the
    environment.
    """
    secret_args = sorted(k for k in kw if re.search(r"api_?key|token$|secret|password", k, re.I))
    if secret_args:
        raise ValueError(f"get_lm does not take credentials ({', '.join(secret_args)}); set the provider's "
                         "environment variable instead (e.g. OPENAI_API_KEY, or TIDE_API_KEY for openai-compatible)")
    backbone = resolve(name)
    if not backbone.verified and backbone.note != "raw DSPy model string":
        logger.warning("%s: the model id %s is unverified (%s); `tide check %s` makes one cheap call to find out",
                       backbone.name, backbone.model, backbone.note, backbone.name)
    env = settings()
    server_schema = kw.pop("server_schema", None)  # only openai-compatible servers take it
    if backbone.kind == "openai-compatible":
        api_base = _first(api_base, env.api_base)
    elif backbone.kind == "hosted" and not api_base and env.api_base:
        logger.warning("TIDE_API_BASE is set but applies to openai-compatible servers only: %s sends to %s, with "
                       "%s", backbone.name, provider_address(backbone, None)[1], backbone.key_env or "its key")
    if api_base and urlsplit(api_base).password:
        raise ValueError("api_base must not carry credentials (user:password@host); "
                         f"put the server's key in {BACKBONES['openai-compatible'].key_env} instead")
    rules = backbone.rules
    temperature = _first(temperature, env.temperature, backbone.defaults.get("temperature"))
    if temperature is not None and not rules.accepts_temperature:
        logger.warning("%s takes only its default temperature: temperature %s is not sent (samples differ by "
                       "rollout id and seed)", backbone.name, temperature)
        temperature = None
    most = map_entry(rules.metadata or backbone.model).get("max_output_tokens") if backbone.kind == "hosted" else None
    # A hosted backbone asks for the one output default (within what the model writes), so the budget and window
    # checks know what each call may cost; the embedded and served engines keep their own.
    default = min(DEFAULT_OUTPUT_TOKENS, most or DEFAULT_OUTPUT_TOKENS) if backbone.kind == "hosted" else None
    max_tokens = _first(max_tokens, env.max_tokens, backbone.defaults.get("max_tokens", default))
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens} (from --max-tokens or TIDE_MAX_TOKENS)")
    if max_tokens is not None and isinstance(most, int) and max_tokens > most:
        raise ValueError(f"max_tokens {max_tokens} is more than {backbone.name} writes ({most}); "
                         "pass a smaller --max-tokens")
    timeout = _positive(_first(timeout, env.timeout), "timeout (--timeout / TIDE_TIMEOUT)")
    num_retries = _first(num_retries, env.num_retries, DEFAULT_RETRIES)

    if backbone.kind == "local":
        engine = LlamaCppEngine(
            backbone.model,
            n_ctx=_first(kw.pop("n_ctx", None), env.n_ctx, DEFAULT_N_CTX),
            n_threads=_first(num_threads, env.num_threads, default_threads()),
            max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
            temperature=0.0 if temperature is None else temperature,
            seed=kw.pop("seed", 0),
            constrained=_first(kw.pop("constrained", None), env.constrained),
            require_items=_first(kw.pop("require_items", None), env.require_items),
            fast_grammar=_first(kw.pop("fast_grammar", None), env.fast_grammar),
        )
        # The model name is part of DSPy's cache key: outputs decoded under another grammar must not be replayed.
        model = engine.spec.dspy_model + ("-require-items" if engine.require_items else "")
        lm = ProviderLM(model, engine=engine, rules=rules, num_retries=num_retries, temperature=engine.temperature,
                        max_tokens=engine.max_tokens, **kw)
    elif backbone.kind == "openai-compatible":
        if not api_base:
            raise ValueError("backbone 'openai-compatible' needs a server address: pass --api-base / api_base= "
                             "or set TIDE_API_BASE (e.g. http://localhost:8000/v1)")
        if urlsplit(api_base).scheme not in ("http", "https"):
            raise ValueError(f"api_base {api_base!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1")
        served = Served(api_base, kw.pop("model", None) or env.served_model,
                        _first(server_schema, env.server_schema, "json_schema"))
        # Through DSPy's LiteLLM client (it sends max_tokens, which llama.cpp's server reads, and the response
        # format as written); the model it names is the one the server lists, read before the first call.
        quiet_litellm()
        lm = ProviderLM(f"openai/{served.model or 'default'}", engine="litellm", rules=rules, served=served,
                        num_retries=num_retries, temperature=temperature, max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
                        api_base=api_base, timeout=timeout or env.server_timeout, **kw)
    else:
        lm = hosted_lm(backbone, api_base=api_base, temperature=temperature, max_tokens=max_tokens,
                       timeout=timeout, num_retries=num_retries, **kw)
    lm.tide_backbone = backbone.name
    lm.tide_rules = rules
    return lm


def hosted_lm(backbone: Backbone, *, api_base: str | None, temperature: float | None, max_tokens: int | None,
              timeout: float | None, num_retries: int, **kw) -> ProviderLM:
    """A hosted backbone's LM: its provider's rules, its address (said aloud when it is not the provider's own),
    and which of DSPy's clients carries it (native lm15 or LiteLLM)."""
    from tide_dspy.backbones.cache_marks import uses_native_client

    address, source = provider_address(backbone, api_base)
    if address:
        logger.warning("%s sends its requests to %s (%s)%s", backbone.name, scrub_text(address), source,
                       f", with {backbone.key_env}" if backbone.key_env else "")
    options = {**backbone.rules.request_options, **kw}
    if api_base:
        options["api_base"] = api_base
    if timeout is not None:
        options["timeout"] = timeout
    # DSPy's cache key leaves the address out: the cache identity puts it back, so answers cached from a simulator,
    # a gateway or another provider address are never replayed for this one.
    identity = f"{backbone.model}@{short_sha256(address or 'provider-endpoint', length=10)}"
    lm = ProviderLM(backbone.model, rules=backbone.rules, num_retries=num_retries, temperature=temperature,
                    max_tokens=max_tokens, cache_identity=identity, **options)
    lm.tide_native_client = uses_native_client(lm)  # where prompt-cache marks go (backbones.cache_marks)
    if not lm.tide_native_client:
        quiet_litellm()
    return lm


def quiet_litellm() -> None:
    """Keep LiteLLM's own log at ERROR: it writes raw requests and responses (a gateway's echo of a key among them)
    through a handler of its own, past the scrubbing of tide-dspy's log (cli.main.SafeFormatter)."""
    dspy.disable_litellm_logging()


def sized_as(lm, backbone: str | None):
    """The LM whose rules, window and prices describe `lm`: None when get_lm built it (it carries them), else an LM
    get_lm builds for `backbone` and never calls: a caller's own LM standing in for the backbone a run names."""
    if lm is None or getattr(lm, "tide_rules", None) is not None or not backbone:
        return None
    try:
        return get_lm(backbone)
    except ValueError:  # an unknown name or a served backbone without an address: sized by its own model string
        return None


def describe_lm(lm) -> dict:
    """Secret-free parameters of an LM, for logs, MLflow params and saved configs."""
    state = lm.dump_state() if hasattr(lm, "dump_state") else {"model": getattr(lm, "model", repr(lm))}
    engine = state.pop("engine", None)
    info = {"backbone": getattr(lm, "tide_backbone", None), **state}
    if isinstance(engine, dict):
        info["engine"] = engine.get("class")
        info.update({f"engine_{k}": v for k, v in (engine.get("state") or {}).items()})
    elif isinstance(engine, str):
        info["engine"] = engine
    served = getattr(lm, "tide_served", None)
    if served is not None:
        info["server_schema"] = served.schema_format
    info = scrub_secrets(info)
    return {k: v for k, v in info.items() if v not in (None, {}, []) and not k.startswith("_")}


def serializes_calls(lm) -> bool:
    """True when the LM runs on the embedded engine, whose calls take turns on one model per process."""
    return isinstance(getattr(lm, "engine", None), LlamaCppEngine)


def adapter_for(lm):
    """The adapter that parses best on this LM: JSONAdapter (schema grammar) for a constrained embedded engine,
    where the bench measured 5/5 first-time parses against 3/5 for ChatAdapter, and for a served backbone that
    takes the schema; a ChatAdapter without the JSON fallback for a provider whose rules turn it off; otherwise
    None (DSPy's default ChatAdapter, whose fallback asks for the schema as structured output)."""
    engine = getattr(lm, "engine", None)
    if isinstance(engine, LlamaCppEngine) and engine.constrained:
        return dspy.JSONAdapter()
    served = getattr(lm, "tide_served", None)
    if served is not None and served.schema_format != "off":
        return dspy.JSONAdapter()
    rules = getattr(lm, "tide_rules", None)
    if rules is not None and not rules.json_fallback:
        return dspy.ChatAdapter(use_json_adapter_fallback=False)
    return None


def lm_context(lm, **settings):
    """`dspy.context(lm=lm, ...)` with the adapter that parses best on `lm` (adapter_for), unless the caller has
    already chosen one. Library entry points scope their LM calls in it, so the choice never leaks into
    `dspy.settings` and a library caller gets the same adapter as the CLI."""
    adapter = settings.pop("adapter", None) or dspy.settings.adapter or adapter_for(lm)
    return dspy.context(lm=lm, **({"adapter": adapter} if adapter is not None else {}), **settings)
