"""An OpenAI-compatible chat server (vLLM, `python -m llama_cpp.server`) as a DSPy custom engine.

DSPy's JSONAdapter asks for the output schema in one canonical form; servers accept it in different dialects, so
this engine writes it in the one the server takes (`schema_format`):

- "json_schema": OpenAI's `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`. vLLM turns it
  into guided decoding (the same as its own `guided_json` / `structured_outputs` extension).
- "llama.cpp": `{"type": "json_object", "schema": ...}`, the only structured form llama_cpp.server accepts; it
  compiles the schema to a grammar.
- "off": no response_format (DSPy's default ChatAdapter then asks for its text format).

Calls are independent HTTP requests, so one engine serves any number of threads (`--workers`). The key, if any,
is read from TIDE_API_KEY at each call and never stored, saved or logged.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit

from dspy.clients.engines.base import validate_request
from dspy.lm15 import (ContextLengthError, InvalidRequestError, Message, Response, ServerError, TextPart,
                       TransportError, Usage, response_to_events)

from tide_dspy.backbones.llamacpp import request_messages

SCHEMA_FORMATS = ("json_schema", "llama.cpp", "off")
KEY_ENV = "TIDE_API_KEY"
PROVIDER = "openai-compatible"


class ServedEngine:
    def __init__(self, api_base: str, model: str = "default", *, schema_format: str = "json_schema",
                 max_tokens: int = 1024, temperature: float | None = None, timeout: float = 600.0):
        if schema_format not in SCHEMA_FORMATS:
            raise ValueError(f"schema format {schema_format!r}: choose one of {', '.join(SCHEMA_FORMATS)} "
                             "(TIDE_SERVER_SCHEMA / --server-schema)")
        if urlsplit(api_base).scheme not in ("http", "https"):
            raise ValueError(f"api_base {api_base!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1")
        self.api_base = api_base
        self.model = model
        self.schema_format = schema_format
        self.max_tokens = int(max_tokens)
        self.temperature = temperature
        self.timeout = float(timeout)

    # ---- what adapters may ask of this engine (dspy.clients.capabilities) ----
    @property
    def supports_response_schema(self) -> bool:
        return self.schema_format != "off"

    @property
    def supported_params(self) -> frozenset[str]:
        params = {"temperature", "max_tokens", "stop", "seed", "top_p"}
        return frozenset(params | ({"response_format"} if self.supports_response_schema else set()))

    def dump_state(self) -> dict:
        return dict(api_base=self.api_base, model=self.model, schema_format=self.schema_format,
                    max_tokens=self.max_tokens, temperature=self.temperature, timeout=self.timeout)

    @classmethod
    def load_state(cls, state: dict) -> ServedEngine:
        return cls(**state)

    def response_format(self, canonical: dict | None) -> dict | None:
        """DSPy's canonical response format written in this server's dialect."""
        if not canonical or self.schema_format == "off":
            return None
        schema = canonical.get("schema") if canonical.get("type") == "json_schema" else None
        if schema is None:
            return {"type": "json_object"}
        if self.schema_format == "llama.cpp":
            return {"type": "json_object", "schema": schema}
        inner = {"name": canonical.get("name") or "response", "schema": schema}
        if "strict" in canonical:
            inner["strict"] = canonical["strict"]
        return {"type": "json_schema", "json_schema": inner}

    def payload(self, request) -> dict:
        cfg = request.config
        body = {"model": self.model, "messages": request_messages(request),
                "max_tokens": min(cfg.max_tokens or self.max_tokens, self.max_tokens)}
        temperature = self.temperature if cfg.temperature is None else cfg.temperature
        for key, value in (("temperature", temperature), ("top_p", cfg.top_p), ("seed", cfg.seed)):
            if value is not None:
                body[key] = value
        if cfg.stop:
            body["stop"] = list(cfg.stop)
        fmt = self.response_format(cfg.response_format)
        if fmt is not None:
            body["response_format"] = fmt
        return body

    def complete(self, request) -> Response:
        validate_request(request)
        body = self.payload(request)
        raw = self._post("/chat/completions", body)
        choice = raw["choices"][0]
        usage = raw.get("usage") or {}
        return Response(
            id=raw.get("id"),
            model=raw.get("model") or self.model,
            message=Message.assistant([TextPart((choice.get("message") or {}).get("content") or "")]),
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            usage=Usage(input_tokens=usage.get("prompt_tokens"), output_tokens=usage.get("completion_tokens")),
            provider_data={"engine": PROVIDER, "schema_format": self.schema_format},
        )

    def stream(self, request):
        return response_to_events(self.complete(request))

    def close(self) -> None:
        """Each call opens its own connection; nothing to release."""

    def _post(self, path: str, body: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(KEY_ENV)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        parts = urlsplit(self.api_base)  # a query string (some gateways want one) stays after the path
        url = urlunsplit(parts._replace(path=parts.path.rstrip("/") + path))
        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc, url) from None
        except (urllib.error.URLError, OSError) as exc:
            raise TransportError(f"{url}: no answer after {time.perf_counter() - t0:.1f}s ({exc}); is the server "
                                 "running there? (--api-base / TIDE_API_BASE)") from None

    def _http_error(self, exc: urllib.error.HTTPError, url: str) -> Exception:
        detail = exc.read().decode(errors="replace")[:800]
        message = f"{url}: HTTP {exc.code}: {detail}"
        if exc.code >= 500:
            return ServerError(message, provider=PROVIDER, status=exc.code)
        if "context" in detail.lower() and ("length" in detail.lower() or "window" in detail.lower()):
            return ContextLengthError(message, provider=PROVIDER, status=exc.code)
        if "response_format" in detail:
            message += (f"\nThe server refused the response format sent for schema format {self.schema_format!r}: "
                        "use TIDE_SERVER_SCHEMA=llama.cpp (--server-schema llama.cpp) for llama_cpp.server, "
                        "json_schema for vLLM and OpenAI-style servers, or off")
        return InvalidRequestError(message, provider=PROVIDER, status=exc.code)
