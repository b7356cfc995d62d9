"""A local simulator of the four hosted providers' HTTP APIs: OpenAI chat completions, Anthropic messages, Gemini
generateContent and DashScope's OpenAI-compatible mode.

A valid request gets a valid answer for the tide-dspy signature its prompt asks for: findings that parse and cite
the instance's own artifacts (a new one each round), judge scores, templates, scan ratings, the workspace
generator's stages (testing/generation_answers.py), or "ok". A request that
a provider's documentation forbids gets that provider's status code and error body; each rule below names the page
that documents it. Rate limits, server errors, hangs and prose answers are scripted with `Fault`s. Every request is
logged (`ProviderSimulator.log`) with the headers it came with, so a test can check where a key went.

    with ProviderSimulator(keys={"openai": "sk-test"}) as sim:
        sim.base_url("openai")                       # http://127.0.0.1:<port>/openai/v1, for --api-base
        sim.faults.append(Fault(429, count=2, retry_after="1"))

The same server speaks each provider's batch API (testing/batch_sim.py: `sim.batches`), each line answered as the
same request online would be, with simulated time that a test compresses.

Token counts are estimates (tide_dspy.util.tokens: 4 characters a token): the window rules need no more.
Prompt caching is simulated too: Anthropic reads a cached prefix only up to a `cache_control` mark; OpenAI, Gemini
and DashScope report the longest prefix shared with an earlier prompt as cached, as their implicit caches do.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tide_dspy.testing.batch_sim import BatchRefusal, BatchService
from tide_dspy.testing.generation_answers import WRITERS as GENERATION_WRITERS
from tide_dspy.testing.generation_answers import generation_values
from tide_dspy.util.tokens import estimate_tokens

PROVIDERS = ("openai", "anthropic", "gemini", "dashscope")
# The path under which each provider is served, so one server stands in for all four.
PREFIX = {"openai": "/openai/v1", "anthropic": "/anthropic", "gemini": "/gemini/v1beta",
          "dashscope": "/dashscope/compatible-mode/v1"}


@dataclass(frozen=True)
class SimModel:
    provider: str
    name: str
    context_window: int  # prompt + output tokens
    max_output: int
    max_prompt: int | None = None
    reasoning: bool = False  # an OpenAI reasoning model: only the default temperature
    keep_default_temperature: bool = False  # Gemini 3: other temperatures are advised against, not refused
    cache_min_tokens: int = 1024


MODELS = {m.name: m for m in (
    # https://platform.openai.com/docs/models/gpt-5-mini: 400,000 context, 128,000 output (272,000 input)
    SimModel("openai", "gpt-5-mini", 400_000, 128_000, max_prompt=272_000, reasoning=True),
    SimModel("openai", "gpt-4o-mini", 128_000, 16_384),
    # https://docs.claude.com/en/docs/about-claude/models/overview: 200K context, 64K output
    SimModel("anthropic", "claude-sonnet-4-5", 200_000, 64_000),
    # https://ai.google.dev/gemini-api/docs/models: 1,048,576 input, 65,536 output
    SimModel("gemini", "gemini-3.5-flash", 1_048_576 + 65_536, 65_536, max_prompt=1_048_576,
             keep_default_temperature=True, cache_min_tokens=4096),
    # https://www.alibabacloud.com/help/en/model-studio/models: 1M context, 65,536 output
    SimModel("dashscope", "qwen3.6-flash", 1_000_000, 65_536),
)}


# Scripted 200 answers a Fault may ask for: prose no adapter parses; a findings answer with no finding; one whose
# findings were all found before.
ANSWERS = ("prose", "empty", "repeat")


@dataclass
class Fault:
    """The next `count` requests (of `kind`, e.g. "findings", of `provider`, asking for JSON or not, when given) get
    this instead of an answer: an HTTP status with the provider's error body, "hang" (no answer for `seconds`), or
    one of ANSWERS: "prose" (a 200 answer in plain prose, which no adapter parses), "empty" (a findings answer
    with no finding) or "repeat" (findings that were all found before)."""

    status: int | str
    count: int = 1
    retry_after: str | None = None  # the Retry-After header's value, in seconds
    retry_after_date: float | None = None  # or, seconds from the moment it is sent, written as an HTTP date
    seconds: float = 5.0  # how long a hang lasts
    kind: str | None = None
    provider: str | None = None
    structured: bool | None = None  # only requests that ask (True) or do not ask (False) for JSON
    after: int = 0  # let this many matching requests through first (a round-3 answer: after=2)

    def matches(self, provider: str, kind: str, structured: bool) -> bool:
        return (self.count > 0 and self.provider in (None, provider) and self.kind in (None, kind)
                and self.structured in (None, structured))


@dataclass
class RateLimit:
    """At most `requests` requests per `per` seconds (a sliding window); beyond that, 429 with a Retry-After."""

    requests: int
    per: float
    times: list[float] = field(default_factory=list)

    def wait(self, now: float) -> float:
        self.times = [t for t in self.times if now - t < self.per]
        if len(self.times) < self.requests:
            self.times.append(now)
            return 0.0
        return self.per - (now - self.times[0])


@dataclass
class Logged:
    """One request as the simulator saw it, and what it answered."""

    provider: str
    method: str
    path: str
    model: str | None
    status: int
    kind: str  # findings | judge | template | scan | generation | models | batch (a batch endpoint) | other
    error: str | None = None
    structured: bool = False  # a JSON-schema or JSON-object answer was asked for
    headers: dict = field(default_factory=dict)
    body: dict = field(default_factory=dict)
    prompt: str = ""
    advice: list[str] = field(default_factory=list)  # documented recommendations the request ignored
    usage: dict = field(default_factory=dict)
    at: float = 0.0
    batch: str | None = None  # the batch job this request was a line of (None: sent online)


class Rejected(Exception):
    def __init__(self, status: int, kind: str, message: str, *, code: str | None = None, param: str | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.kind, self.message, self.code, self.param = status, kind, message, code, param
        self.headers = headers or {}


@dataclass
class Call:
    """A request in one shape, whatever the wire format: what the rules and the answer need."""

    provider: str
    model: str
    system: str
    texts: list[str]  # the text blocks of the messages, in order
    temperature: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    structured: Any = None  # a JSON schema, "json_object", or None
    stream: bool = False
    marks: list[int] = field(default_factory=list)  # Anthropic: prompt offsets where a cache_control mark ends

    @property
    def prompt(self) -> str:
        return "\n\n".join([self.system, *self.texts])


# ---- the rules, one function per documented constraint ----

def _walk(schema: Any, path: tuple = ()):
    if isinstance(schema, dict):
        yield path, schema
        for key, value in schema.items():
            if isinstance(value, (dict, list)):
                yield from _walk(value, (*path, key))
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            yield from _walk(value, (*path, i))


def _is_object(node: dict) -> bool:
    return node.get("type") == "object" or "properties" in node


def openai_strict_schema(schema: dict, name: str) -> None:
    """https://platform.openai.com/docs/guides/structured-outputs#supported-schemas: the root is an object (not
    anyOf); every object sets additionalProperties false and lists every property in required; `default` is not a
    supported keyword; at most 1,000 enum values in all, and an enum of more than 250 values has at most 15,000
    characters."""
    bad = f"Invalid schema for response_format '{name}'"
    if schema.get("type") != "object" or "anyOf" in schema:
        raise Rejected(400, "invalid_request_error", f"{bad}: schema must be a JSON Schema of 'type: \"object\"', "
                                                     "got 'type: \"None\"'.", code="invalid_json_schema",
                       param="response_format")
    enum_values = 0
    for path, node in _walk(schema):
        where = f"In context=({', '.join(repr(p) for p in path)})"
        if "default" in node and path and path[-1] != "properties":
            raise Rejected(400, "invalid_request_error", f"{bad}: {where}, 'default' is not permitted.",
                           code="invalid_json_schema", param="response_format")
        if _is_object(node) and path[-1:] != ("properties",):
            if node.get("additionalProperties") is not False:
                raise Rejected(400, "invalid_request_error", f"{bad}: {where}, 'additionalProperties' is required "
                               "to be supplied and to be false.", code="invalid_json_schema", param="response_format")
            missing = sorted(set(node.get("properties", {})) - set(node.get("required", [])))
            if missing:
                raise Rejected(400, "invalid_request_error", f"{bad}: {where}, 'required' is required to be supplied "
                               f"and to be an array including every key in properties. Missing '{missing[0]}'.",
                               code="invalid_json_schema", param="response_format")
        if isinstance(node.get("enum"), list) and path[-1:] != ("properties",):
            values = node["enum"]
            enum_values += len(values)
            if len(values) > 250 and sum(len(str(v)) for v in values) > 15_000:
                raise Rejected(400, "invalid_request_error", f"{bad}: {where}, an enum of more than 250 values may "
                               "have at most 15000 characters in all.", code="invalid_json_schema")
    if enum_values > 1000:
        raise Rejected(400, "invalid_request_error", f"{bad}: Expected at most 1000 enum values in total within a "
                       f"single schema when using structured outputs, but received {enum_values}.",
                       code="invalid_json_schema", param="response_format")


# https://docs.claude.com/en/docs/build-with-claude/structured-outputs#json-schema-limitations: no numerical
# constraints, no string length constraints, no array constraints beyond minItems 0 or 1; every object sets
# additionalProperties false.
ANTHROPIC_UNSUPPORTED = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength",
                         "maxLength", "maxItems", "uniqueItems", "minProperties", "maxProperties")


def anthropic_schema(schema: dict, where: str) -> None:
    for path, node in _walk(schema):
        if path[-1:] == ("properties",):
            continue
        found = [k for k in ANTHROPIC_UNSUPPORTED if k in node]
        if node.get("minItems", 0) not in (0, 1):
            found.append("minItems")
        if found:
            kind = node.get("type", "schema")
            raise Rejected(400, "invalid_request_error", f"{where}: For '{kind}' type, "
                           f"propert{'ies' if len(found) > 1 else 'y'} {', '.join(repr(f) for f in found)} "
                           f"{'are' if len(found) > 1 else 'is'} not supported")
        if _is_object(node) and node.get("additionalProperties") is not False:
            raise Rejected(400, "invalid_request_error", f"{where}: For 'object' type, 'additionalProperties' must "
                           "be explicitly set to false")


def window(call: Call, model: SimModel) -> None:
    """The prompt plus the output asked for must fit the model's window, and each its own limit."""
    prompt, out = estimate_tokens(call.prompt), call.max_tokens or 0
    if out > model.max_output:
        raise _too_many_output(call.provider, model, out)
    if model.max_prompt and prompt > model.max_prompt or prompt + out > model.context_window:
        raise _too_long(call.provider, model, prompt, out)


def _too_many_output(provider: str, model: SimModel, out: int) -> Rejected:
    if provider == "anthropic":  # https://docs.claude.com/en/api/messages (max_tokens)
        return Rejected(400, "invalid_request_error", f"max_tokens: {out} > {model.max_output}, which is the maximum "
                        f"allowed number of output tokens for {model.name}")
    if provider == "gemini":  # https://ai.google.dev/api/generate-content#generationconfig
        return Rejected(400, "INVALID_ARGUMENT", f"The specified maxOutputTokens value {out} is out of range: "
                        f"[1, {model.max_output + 1})")
    if provider == "dashscope":
        return Rejected(400, "invalid_request_error", f"Range of max_tokens should be [1, {model.max_output}]",
                        code="invalid_parameter_error")
    return Rejected(400, "invalid_request_error", f"max_completion_tokens is too large: {out}. This model supports at "
                    f"most {model.max_output} completion tokens.", code="invalid_value", param="max_tokens")


def _too_long(provider: str, model: SimModel, prompt: int, out: int) -> Rejected:
    if provider == "anthropic":  # https://docs.claude.com/en/docs/build-with-claude/context-windows
        return Rejected(400, "invalid_request_error", f"input length and `max_tokens` exceed context limit: {prompt} + "
                        f"{out} > {model.context_window}, decrease input length or `max_tokens` and try again")
    if provider == "gemini":
        return Rejected(400, "INVALID_ARGUMENT", f"The input token count ({prompt}) exceeds the maximum number of "
                        f"tokens allowed ({model.max_prompt}).")
    return Rejected(400, "invalid_request_error", f"This model's maximum context length is {model.context_window} "
                    f"tokens. However, you requested {prompt + out} tokens ({prompt} in the messages, {out} in the "
                    "completion). Please reduce the length of the messages or completion.",
                    code="context_length_exceeded", param="messages")


# ---- each wire format: parse, check, answer ----

def _texts(content) -> list[tuple[str, dict]]:
    """(text, block) of a message's content, a string or a list of blocks."""
    if isinstance(content, str):
        return [(content, {})]
    out = []
    for block in content or []:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            out.append((block["text"], block))
    return out


def parse_openai(body: dict, provider: str) -> Call:
    system, texts = [], []
    for message in body.get("messages") or []:
        parts = [t for t, _ in _texts(message.get("content"))]
        (system if message.get("role") in ("system", "developer") else texts).extend(parts)
    fmt = body.get("response_format") or {}
    structured = ((fmt.get("json_schema") or {}).get("schema") if fmt.get("type") == "json_schema"
                  else "json_object" if fmt.get("type") == "json_object" else None)
    return Call(provider, body.get("model", ""), "\n\n".join(system), texts, body.get("temperature"),
                body.get("seed"), body.get("max_completion_tokens", body.get("max_tokens")), structured,
                bool(body.get("stream")))


def parse_anthropic(body: dict) -> Call:
    system, texts, marks, offset = body.get("system") or "", [], [], 0
    if isinstance(system, list):
        blocks = _texts(system)
        system = "\n\n".join(t for t, _ in blocks)
        if any("cache_control" in b for _, b in blocks):
            marks.append(len(system))
    offset = len(system)
    for message in body.get("messages") or []:
        for text, block in _texts(message.get("content")):
            offset += 2 + len(text)
            texts.append(text)
            if "cache_control" in block:
                marks.append(offset)
    fmt = (body.get("output_config") or {}).get("format") or body.get("output_format") or {}
    return Call("anthropic", body.get("model", ""), system, texts, body.get("temperature"), None,
                body.get("max_tokens"), fmt.get("schema") if fmt.get("type") == "json_schema" else None,
                bool(body.get("stream")), marks)


def _field(body: dict, camel: str):
    """A Gemini request field by its JSON name or its proto name (the API takes both: max_output_tokens)."""
    snake = re.sub(r"(?<!^)([A-Z])", r"_\1", camel).lower()
    return body.get(camel, body.get(snake))


def parse_gemini(body: dict, model: str) -> Call:
    system = "\n\n".join(t for t, _ in _texts((_field(body, "systemInstruction") or {}).get("parts")))
    texts = [t for c in body.get("contents") or [] for t, _ in _texts(c.get("parts"))]
    cfg = _field(body, "generationConfig") or {}
    structured = _field(cfg, "responseJsonSchema") or _field(cfg, "responseSchema")
    if structured is None and _field(cfg, "responseMimeType") == "application/json":
        structured = "json_object"
    return Call("gemini", model, system, texts, cfg.get("temperature"), cfg.get("seed"),
                _field(cfg, "maxOutputTokens"), structured)


ANTHROPIC_FIELDS = {"model", "messages", "system", "max_tokens", "metadata", "stop_sequences", "stream", "temperature",
                    "top_k", "top_p", "tools", "tool_choice", "thinking", "output_config", "output_format",
                    "service_tier", "container", "mcp_servers", "context_management"}


def check(call: Call, body: dict, headers: dict, advice: list[str]) -> None:
    """Every documented rule the request must meet; raises Rejected for the first it breaks."""
    model = MODELS.get(call.model)
    if model is None or model.provider != call.provider:
        raise _unknown_model(call.provider, call.model)
    if call.provider == "openai":
        # https://platform.openai.com/docs/guides/reasoning: reasoning models take only the default temperature,
        # and max_completion_tokens rather than max_tokens.
        if model.reasoning and call.temperature is not None and call.temperature != 1:
            raise Rejected(400, "invalid_request_error", f"Unsupported value: 'temperature' does not support "
                           f"{call.temperature} with this model. Only the default (1) value is supported.",
                           code="unsupported_value", param="temperature")
        if model.reasoning and "max_tokens" in body:
            raise Rejected(400, "invalid_request_error", "Unsupported parameter: 'max_tokens' is not supported with "
                           "this model. Use 'max_completion_tokens' instead.", code="unsupported_parameter",
                           param="max_tokens")
        fmt = body.get("response_format") or {}
        if fmt.get("type") == "json_schema" and (fmt.get("json_schema") or {}).get("strict"):
            openai_strict_schema(fmt["json_schema"].get("schema") or {}, fmt["json_schema"].get("name", "response"))
    if call.provider == "anthropic":
        # https://docs.claude.com/en/api/versioning: the anthropic-version header is required.
        if not headers.get("anthropic-version"):
            raise Rejected(400, "invalid_request_error", "anthropic-version: header is required")
        # https://docs.claude.com/en/api/messages: max_tokens is required, temperature is within 0..1, and fields
        # outside the documented body are refused.
        extra = sorted(set(body) - ANTHROPIC_FIELDS)
        if extra:
            raise Rejected(400, "invalid_request_error", f"{extra[0]}: Extra inputs are not permitted")
        if call.max_tokens is None:
            raise Rejected(400, "invalid_request_error", "max_tokens: Field required")
        if call.temperature is not None and not 0 <= call.temperature <= 1:
            raise Rejected(400, "invalid_request_error", "temperature: range: 0..1")
        if isinstance(call.structured, dict):
            where = "output_config.format.schema" if "output_config" in body else "output_format.schema"
            anthropic_schema(call.structured, where)
        # https://docs.claude.com/en/docs/build-with-claude/prompt-caching: at most 4 cache breakpoints.
        if len(call.marks) > 4:
            raise Rejected(400, "invalid_request_error", f"A maximum of 4 blocks with cache_control may be provided. "
                           f"Found {len(call.marks)}.")
    if call.provider == "gemini" and model.keep_default_temperature and call.temperature not in (None, 1, 1.0):
        # https://ai.google.dev/gemini-api/docs/gemini-3: keep temperature at its default of 1.0 (lower values
        # can loop or degrade reasoning). Advice, not a refusal.
        advice.append(f"temperature {call.temperature} on {model.name} (the Gemini 3 guide says keep 1.0)")
    if call.provider == "dashscope":
        # https://www.alibabacloud.com/help/en/model-studio/deep-thinking: thinking needs a streaming call.
        if body.get("enable_thinking") and not call.stream:
            raise Rejected(400, "invalid_request_error", "parameter.enable_thinking must be set to false for "
                           "non-streaming calls", code="invalid_parameter_error")
        if call.temperature is not None and not 0 <= call.temperature < 2:
            raise Rejected(400, "invalid_request_error", "Range of temperature should be [0.0, 2.0)",
                           code="invalid_parameter_error")
    if (
        call.structured == "json_object"
        and call.provider in ("openai", "dashscope")
        and "json" not in call.prompt.lower()
    ):
        # https://platform.openai.com/docs/guides/structured-outputs#json-mode (DashScope follows it)
        raise Rejected(400, "invalid_request_error", "'messages' must contain the word 'json' in some form, to use "
                       "'response_format' of type 'json_object'.", param="messages")
    window(call, model)


def _unknown_model(provider: str, name: str) -> Rejected:
    if provider == "anthropic":  # https://docs.claude.com/en/api/errors
        return Rejected(404, "not_found_error", f"model: {name}")
    if provider == "gemini":  # https://ai.google.dev/gemini-api/docs/troubleshooting
        return Rejected(404, "NOT_FOUND", f"models/{name} is not found for API version v1beta, or is not supported "
                        "for generateContent. Call ListModels to see the list of available models and their "
                        "supported methods.")
    # https://platform.openai.com/docs/guides/error-codes (DashScope answers the same way)
    return Rejected(404, "invalid_request_error", f"The model `{name}` does not exist or you do not have access to "
                    "it.", code="model_not_found")


def authenticate(provider: str, headers: dict, query: dict, keys: dict[str, str]) -> None:
    """The key, where each provider takes it; a missing or wrong one is refused as the provider refuses it."""
    expected = keys.get(provider)
    if provider == "anthropic":  # https://docs.claude.com/en/api/overview#authentication: x-api-key
        got = headers.get("x-api-key")
        if not got:
            raise Rejected(401, "authentication_error", "x-api-key header is required")
        if got != expected:
            raise Rejected(401, "authentication_error", "invalid x-api-key")
        return
    if provider == "gemini":  # https://ai.google.dev/gemini-api/docs/api-key: x-goog-api-key (or ?key=)
        got = headers.get("x-goog-api-key") or (query.get("key") or [None])[0]
        if not got:
            raise Rejected(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers without "
                           "established identity). Please use API Key or other form of API consumer identity to call "
                           "this API.")
        if got != expected:
            raise Rejected(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")
        return
    # OpenAI and DashScope: Authorization: Bearer <key> (https://platform.openai.com/docs/api-reference/authentication)
    auth = headers.get("authorization") or ""
    got = auth[7:] if auth.lower().startswith("bearer ") else ""
    if not got:
        raise Rejected(401, "invalid_request_error", "You didn't provide an API key. You need to provide your API key "
                       "in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
    if got != expected:
        raise Rejected(401, "invalid_request_error", "Incorrect API key provided.", code="invalid_api_key")


def error_body(provider: str, err: Rejected) -> dict:
    if provider == "anthropic":
        return {"type": "error", "error": {"type": err.kind, "message": err.message}}
    if provider == "gemini":
        return {"error": {"code": err.status, "message": err.message, "status": err.kind}}
    return {"error": {"message": err.message, "type": err.kind, "param": err.param, "code": err.code}}


FAULT_BODIES = {  # what each provider says with a 429 or a server error
    ("openai", 429): ("requests", "Rate limit reached for requests per min (RPM). Please try again later.",
                      "rate_limit_exceeded"),
    ("anthropic", 429): ("rate_limit_error", "Number of requests has exceeded your per-minute rate limit.", None),
    ("gemini", 429): ("RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).", None),
    ("dashscope", 429): ("limit_requests", "Requests rate limit exceeded, please try again later.", "limit_requests"),
    ("anthropic", 529): ("overloaded_error", "Overloaded", None),
    ("gemini", 503): ("UNAVAILABLE", "The model is overloaded. Please try again later.", None),
}


def fault_rejection(provider: str, fault: Fault) -> Rejected:
    kind, message, code = FAULT_BODIES.get((provider, fault.status), (
        "api_error" if provider == "anthropic" else "INTERNAL" if provider == "gemini" else "server_error",
        "The server had an error while processing your request.", None))
    headers = {"retry-after": fault.retry_after} if fault.retry_after is not None else {}
    if fault.retry_after_date is not None:
        headers = {"retry-after": http_date(fault.retry_after_date)}
    return Rejected(int(fault.status), kind, message, code=code, headers=headers)


# ---- answers: what a provider's model would write for each tide-dspy signature ----

SECTION = re.compile(r"\[\[ ## (\w+) ## \]\]\n(.*?)(?=\n\n\[\[ ## |\Z)", re.S)
HEADING = re.compile(r"^### (\S+) · (.+?) \((.*)\)$", re.M)
COMPACT = re.compile(r"^- (\S+) · (\S+)", re.M)
ACTION = re.compile(r"^- (\S+) \[(.*?)\] .*?\| required: (.*?)(?: \| constraints: .*)?$", re.M)


def field_types(system: str) -> dict[str, str]:
    """Each output field the prompt asks for, with its type as the prompt writes it, in order."""
    block = system.split("Your output fields are:", 1)[-1] if "Your output fields are:" in system else ""
    fields = {}
    for line in block.splitlines()[1:] if block else []:
        m = re.match(r"^\d+\. `(\w+)`(?: \((.*?)\):)?", line)
        if not m:
            break
        fields[m.group(1)] = m.group(2) or ""
    return fields


def output_fields(system: str) -> list[str]:
    return list(field_types(system))


def request_kind(fields: list[str]) -> str:
    # A judge answers a 1-5 score (the Likert rubric), or PROBE's verdicts: a grade, or per-detail verdicts.
    for kind, field_name in (("findings", "findings"), ("judge", "score"), ("judge", "judgment"),
                             ("judge", "root_cause"), ("template", "template"), ("scan", "suspicion")):
        if field_name in fields:
            return kind
    return "generation" if set(fields) & set(GENERATION_WRITERS) else "other"


def first_choice(type_text: str) -> str | None:
    """The first value of a field typed Literal['a', 'b', ...] (a PROBE verdict: "correct"), else None."""
    m = re.match(r"Literal\[\s*'([^']*)'", type_text)
    return m.group(1) if m else None


def findings(inputs: dict[str, str], repeat: bool = False) -> list[dict]:
    """New findings, after those already found (`repeat`: the first ones again, as a round that only re-finds
    answers): each cites two of the context's artifacts and resolves the problem with a library action (workspace)
    or a patch (repository)."""
    context = inputs.get("context", "")
    artifacts = [(h, i, where) for h, i, where in HEADING.findall(context)]
    artifacts += [(h, i, "") for h, i in COMPACT.findall(context) if h not in {a[0] for a in artifacts}]
    if not artifacts:
        return []
    found = 0 if repeat else len(re.findall(r"^\d+\. ", inputs.get("already_found", ""), re.M))
    try:
        wanted = max(1, int(str(inputs.get("max_new", "1")).strip()))
    except ValueError:
        wanted = 1
    actions = ACTION.findall(inputs.get("actions", ""))
    out = []
    for n in range(found, found + wanted):
        chosen = [artifacts[(2 * n) % len(artifacts)], artifacts[(2 * n + 1) % len(artifacts)]]
        handles = list(dict.fromkeys(h for h, _, _ in chosen))
        item = {"description": f"Simulated problem {n + 1}: {' and '.join(handles)} together show a task that "
                               "nobody owns", "evidence_ids": handles, "used_template_id": "", "why": ""}
        if "actions" in inputs:
            action_id, _, required = actions[n % len(actions)] if actions else ("act_none", "", "")
            params = [p.strip() for p in required.split(",") if p.strip() and p.strip() != "-"]
            item["action"] = {"action_id": action_id, "parameters": {p: f"simulated {p}" for p in params}}
        else:
            path = (chosen[0][2].split(" lines ")[0] or chosen[0][1].split("::")[0]).strip() or "module.py"
            item["patch"] = (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,1 +1,1 @@\n"
                             "-    return value\n+    return None\n")
        out.append(item)
    return out


def answer_values(call: Call) -> dict[str, Any]:
    types = field_types(call.system)
    fields = list(types)
    inputs = dict(SECTION.findall("\n\n".join(call.texts)))  # a prompt cut for caching is read whole
    generated = generation_values(fields, inputs)
    if generated is not None:
        return generated
    values: dict[str, Any] = {}
    for name in fields:
        if first_choice(types[name]) is not None:
            values[name] = first_choice(types[name])
        elif name == "findings":
            values[name] = findings(inputs)
        elif name == "score":
            values[name] = 4
        elif name == "rationale":
            values[name] = "The essentials match: the same people, the same blocked task and the same cause."
        elif name == "template":
            values[name] = {"name": "Commitment left without an owner",
                            "pattern": "One item promises an action and no later item shows anyone taking it up",
                            "evidence_flow": ["find the promise", "find who was meant to act",
                                              "check that nothing later records the action"]}
        elif name == "suspicion":
            values[name] = 5
        else:
            values[name] = "ok"
    return values or {"answer": "ok"}


def answer_text(call: Call, scripted: str | None = None) -> str:
    """The answer to `call`; `scripted` (one of ANSWERS) replaces it with prose, no finding, or findings that were
    already found."""
    if scripted == "prose":
        return "Having read everything carefully, I believe the main risk is an approval nobody has chased."
    values = answer_values(call)
    if "findings" in values and scripted in ("empty", "repeat"):
        inputs = dict(SECTION.findall("\n\n".join(call.texts)))
        values["findings"] = [] if scripted == "empty" else findings(inputs, repeat=True)
    if call.structured is not None:
        return json.dumps(values)
    parts = [f"[[ ## {k} ## ]]\n{v if isinstance(v, (str, int)) else json.dumps(v)}" for k, v in values.items()]
    return "\n\n".join([*parts, "[[ ## completed ## ]]"])


# ---- caching, as each provider reports it ----

def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PromptCache:
    def __init__(self):
        self.prompts: dict[str, list[str]] = {p: [] for p in PROVIDERS}
        self.marked: set[tuple[str, str]] = set()

    def usage(self, call: Call, model: SimModel) -> tuple[int, int, int]:
        """(cache read, cache write, uncached) prompt tokens."""
        prompt = call.prompt
        total = estimate_tokens(prompt)
        if call.provider == "anthropic":
            prefixes = [prompt[:m] for m in call.marks if estimate_tokens(prompt[:m]) >= model.cache_min_tokens]
            hits = [p for p in prefixes if (call.model, p) in self.marked]
            read = max((estimate_tokens(p) for p in hits), default=0)
            written = max((estimate_tokens(p) for p in prefixes if (call.model, p) not in self.marked), default=0)
            self.marked.update((call.model, p) for p in prefixes)
            write = max(0, written - read)
            return read, write, total - read - write
        shared = max((_common_prefix(prompt, p) for p in self.prompts[call.provider][-50:]), default=0)
        read = estimate_tokens(prompt[:shared]) if estimate_tokens(prompt[:shared]) >= model.cache_min_tokens else 0
        if call.provider == "openai":
            read -= read % 128  # https://platform.openai.com/docs/guides/prompt-caching: 128-token increments
        self.prompts[call.provider].append(prompt)
        return read, 0, total - read


def respond(call: Call, text: str, usage: tuple[int, int, int], n: int) -> tuple[dict, dict]:
    """The provider's 200 body for `text`, and the usage it reports."""
    read, write, plain = usage
    prompt, out = read + write + plain, estimate_tokens(text)
    if call.provider == "anthropic":
        u = {"input_tokens": plain, "output_tokens": out, "cache_read_input_tokens": read,
             "cache_creation_input_tokens": write}
        return {"id": f"msg_sim{n}", "type": "message", "role": "assistant", "model": call.model,
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
                "usage": u}, u
    if call.provider == "gemini":
        u = {"promptTokenCount": prompt, "candidatesTokenCount": out, "totalTokenCount": prompt + out,
             **({"cachedContentTokenCount": read} if read else {})}
        return {"candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP",
                                "index": 0}], "usageMetadata": u, "modelVersion": call.model}, u
    u = {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out,
         "prompt_tokens_details": {"cached_tokens": read}}
    return {"id": f"chatcmpl-sim{n}", "object": "chat.completion", "created": int(time.time()), "model": call.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": u}, u


def model_list(provider: str) -> dict:
    names = [m.name for m in MODELS.values() if m.provider == provider]
    if provider == "anthropic":
        return {"data": [{"type": "model", "id": n, "display_name": n} for n in names], "has_more": False}
    if provider == "gemini":
        return {"models": [{"name": f"models/{n}", "supportedGenerationMethods": ["generateContent"]} for n in names]}
    return {"object": "list", "data": [{"id": n, "object": "model", "owned_by": provider} for n in names]}


# ---- the server ----

class ProviderSimulator:
    """One local HTTP server for all four providers (see the module docstring)."""

    def __init__(self, keys: dict[str, str] | None = None, *, rate_limit: RateLimit | None = None,
                 host: str = "127.0.0.1", port: int = 0):
        self.keys = {p: f"sim-{p}-key" for p in PROVIDERS} | dict(keys or {})
        self.address = (host, port)  # port 0: any free port
        self.faults: list[Fault] = []
        self.rate_limit = rate_limit
        self.log: list[Logged] = []
        self.lock = threading.Lock()
        self.cache = PromptCache()
        self._server: ThreadingHTTPServer | None = None
        self._started = time.monotonic()
        # The batch APIs (testing/batch_sim.py): `batches.plan` sets their pace and line faults, `batches.jobs` logs
        # every batch received.
        self.batches = BatchService(self._batch_line, lambda: self.root)

    # ---- addresses ----
    @property
    def root(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def base_url(self, provider: str) -> str:
        """The address to give tide-dspy (--api-base) for `provider`, as its client expects it."""
        return self.root + {"anthropic": "/anthropic/v1"}.get(provider, PREFIX[provider])

    def litellm_base(self, provider: str) -> str:
        """The address for LiteLLM's `<PROVIDER>_API_BASE` variable (LiteLLM adds /v1 for Anthropic itself)."""
        return self.root + PREFIX[provider]

    # ---- what the log says ----
    def requests(self, provider: str | None = None, kind: str | None = None) -> list[Logged]:
        return [r for r in self.log if provider in (None, r.provider) and kind in (None, r.kind)]

    def rejected(self) -> list[Logged]:
        """Requests refused for what they asked (4xx), not for a scripted fault."""
        return [r for r in self.log if 400 <= r.status < 500 and r.status != 429]

    def __enter__(self) -> ProviderSimulator:
        sim = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):  # noqa: N802 - http.server's naming
                sim._handle(self, "GET")

            def do_POST(self):  # noqa: N802
                sim._handle(self, "POST")

        self._server = ThreadingHTTPServer(self.address, Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # ---- one request ----
    def _route(self, path: str) -> tuple[str | None, str, str | None]:
        """(provider, action, model in the path)."""
        for provider in PROVIDERS:
            prefix = PREFIX[provider] + ("/v1" if provider == "anthropic" else "")
            if not path.startswith(prefix + "/"):
                continue
            rest = path[len(prefix):]
            if rest == "/models":
                return provider, "models", None
            if provider == "gemini":
                m = re.fullmatch(r"/models/([^/:]+):(generateContent|streamGenerateContent)", rest)
                return (provider, "generate", m.group(1)) if m else (provider, "unknown", None)
            if rest == ("/messages" if provider == "anthropic" else "/chat/completions"):
                return provider, "generate", None
            return provider, "unknown", None
        return None, "unknown", None

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        headers = {k.lower(): v for k, v in handler.headers.items()}
        raw = handler.rfile.read(int(headers.get("content-length") or 0)) if method == "POST" else b""
        batch_route = self.batches.route(parts.path)
        if batch_route is not None:
            self._handle_batch(handler, method, parts, headers, raw, *batch_route)
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {}
        provider, action, path_model = self._route(parts.path)
        entry = Logged(provider or "?", method, parts.path, body.get("model") or path_model, 200, "other",
                       headers=dict(handler.headers.items()), body=body, at=time.monotonic() - self._started)
        status, payload, extra_headers = 200, {}, {}
        with self.lock:
            self.log.append(entry)  # on arrival: a request the client gave up on (a hang) is in the log too
        try:
            if provider is None or action == "unknown":
                raise Rejected(404, "not_found_error" if provider == "anthropic" else "invalid_request_error",
                               f"Unknown request URL: {method} {parts.path}.")
            authenticate(provider, headers, parse_qs(parts.query), self.keys)
            if action == "models":
                entry.kind, payload = "models", model_list(provider)
            else:
                payload, entry = self._generate(provider, path_model, body, headers, entry)
        except Rejected as err:
            status, payload, extra_headers = err.status, error_body(provider or "openai", err), err.headers
            entry.status, entry.error = err.status, err.message
        self._send(handler, status, payload, extra_headers)

    def _generate(self, provider: str, path_model: str | None, body: dict, headers: dict,
                  entry: Logged, line_faults: list[Fault] | None = None) -> tuple[dict, Logged]:
        """Answer one request: online (`line_faults` None: the scripted faults and the rate limit apply), or as a
        line of a batch (only `line_faults` apply)."""
        call = (parse_anthropic(body) if provider == "anthropic" else parse_gemini(body, path_model or "")
                if provider == "gemini" else parse_openai(body, provider))
        entry.model, entry.prompt = call.model, call.prompt
        entry.kind, entry.structured = request_kind(output_fields(call.system)), call.structured is not None
        if line_faults is None:
            fault = self._next_fault(provider, entry.kind, entry.structured)
        else:
            with self.lock:
                fault = next((f for f in line_faults if f.matches(provider, entry.kind, entry.structured)), None)
                if fault is not None:
                    fault.count -= 1
        if fault is not None and fault.status == "hang":
            time.sleep(fault.seconds)
        elif fault is not None and fault.status not in ANSWERS:
            raise fault_rejection(provider, fault)
        if self.rate_limit is not None and line_faults is None:
            with self.lock:
                wait = self.rate_limit.wait(time.monotonic())
            if wait > 0:
                raise fault_rejection(provider, Fault(429, retry_after=str(max(1, round(wait + 0.5)))))
        check(call, body, headers, entry.advice)
        with self.lock:
            # https://www.alibabacloud.com/help/en/model-studio/batch-interfaces-compatible-with-openai: DashScope's
            # batch calls get no context-cache discount.
            if line_faults is not None and provider == "dashscope":
                usage = (0, 0, estimate_tokens(call.prompt))
            else:
                usage = self.cache.usage(call, MODELS[call.model])
            n = len(self.log)
        payload, entry.usage = respond(call, answer_text(call, fault.status if fault is not None else None), usage, n)
        return payload, entry

    def _batch_line(self, provider: str, model: str, body: dict, headers: dict, batch_id: str,
                    line_faults: list[Fault]) -> tuple[int, dict, str]:
        """One line of a batch answered as the same request sent online would be: (status, body, kind)."""
        entry = Logged(provider, "POST", f"batch {batch_id}", body.get("model") or model, 200, "other",
                       headers={}, body=body, at=time.monotonic() - self._started, batch=batch_id)
        with self.lock:
            self.log.append(entry)
        try:
            payload, entry = self._generate(provider, model, body, headers, entry, line_faults)
            return 200, payload, entry.kind
        except Rejected as err:
            entry.status, entry.error = err.status, err.message
            return err.status, error_body(provider, err), entry.kind

    def _handle_batch(self, handler: BaseHTTPRequestHandler, method: str, parts, headers: dict, raw: bytes,
                      provider: str, rest: str) -> None:
        query = parse_qs(parts.query)
        entry = Logged(provider, method, parts.path, None, 200, "batch", headers=dict(handler.headers.items()),
                       at=time.monotonic() - self._started)
        with self.lock:
            self.log.append(entry)
        try:
            if self.batches.needs_key(provider, rest, query):
                authenticate(provider, headers, query, self.keys)
            if provider == "anthropic" and not headers.get("anthropic-version"):
                raise Rejected(400, "invalid_request_error", "anthropic-version: header is required")
            try:
                reply = self.batches.handle(provider, rest, method, headers, query, raw)
            except BatchRefusal as err:
                raise Rejected(err.status, err.kind, err.message, code=err.code, param=err.param) from None
            except (ValueError, KeyError, TypeError, AttributeError) as err:  # a body that is not what it must be
                raise Rejected(400, "invalid_request_error" if provider != "gemini" else "INVALID_ARGUMENT",
                               f"Malformed batch request: {err}") from None
            status, data, content_type, extra_headers = reply.status, reply.body, reply.content_type, reply.headers
        except Rejected as err:
            status, extra_headers, content_type = err.status, err.headers, "application/json"
            data = json.dumps(error_body(provider, err)).encode()
            entry.error = err.message
        entry.status = status
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", content_type)
            handler.send_header("Content-Length", str(len(data)))
            for name, value in extra_headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _next_fault(self, provider: str, kind: str, structured: bool) -> Fault | None:
        """The first fault this request gets; every matching fault still waiting (`after`) counts it."""
        chosen = None
        with self.lock:
            for fault in self.faults:
                if not fault.matches(provider, kind, structured):
                    continue
                if fault.after > 0:
                    fault.after -= 1
                elif chosen is None:
                    fault.count -= 1
                    chosen = fault
        return chosen

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, payload: dict, headers: dict) -> None:
        data = json.dumps(payload).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a hang outlasted its timeout)
            pass


def http_date(seconds_from_now: float) -> str:
    """A Retry-After value in the HTTP-date form."""
    return formatdate(time.time() + seconds_from_now, usegmt=True)


# ---- by hand: what to give tide to use a running simulator (`tide provider-sim`) ----

KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY",
                 "dashscope": "DASHSCOPE_API_KEY"}
BASE_VARIABLES = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_API_BASE", "gemini": "GEMINI_API_BASE",
                  "dashscope": "DASHSCOPE_API_BASE"}
BACKBONES = {"openai": "gpt-5-mini", "anthropic": "claude-sonnet-4.5", "gemini": "gemini-3.5-flash",
             "dashscope": "qwen-3.6-flash"}


def instructions(sim: ProviderSimulator) -> list[str]:
    """What to give tide to use a running simulator: per provider the backbone, the address, the key variable and
    its value, and the model ids it serves; then the README's hosted start, ready to paste."""
    lines = [f"provider simulator on {sim.root}: canned answers that cite real ids (the findings mean nothing; no "
             "model runs)", ""]
    for provider in PROVIDERS:
        models = ", ".join(f"{provider}/{m.name}" for m in MODELS.values() if m.provider == provider)
        address = (f"--api-base {sim.base_url(provider)}" if provider != "dashscope"
                   else f"{BASE_VARIABLES[provider]}={sim.litellm_base(provider)} (through LiteLLM)")
        lines += [f"  --backbone {BACKBONES[provider]}: {address}",
                  f"      {KEY_VARIABLES[provider]}={sim.keys[provider]}; models: {models}"]
    openai = sim.base_url("openai")
    lines += ["", "The README's hosted start against it, in another shell (the base variable sends every OpenAI call "
              "there, the judge's too):",
              f"  export {KEY_VARIABLES['openai']}={sim.keys['openai']} {BASE_VARIABLES['openai']}={openai}",
              "  tide check gpt-5-mini",
              "  tide discover repo examples/sample_repo --backbone gpt-5-mini "
              "--templates programs/repository/local/templates.json",
              f"or name the address on each command instead: --api-base {openai} (and --judge-api-base {openai} "
              "for a hosted --judge).", "Ctrl-C stops it."]
    return lines
