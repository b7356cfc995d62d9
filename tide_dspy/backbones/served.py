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

DSPy's response cache is keyed by the LM's model string. `cache_identity` makes that string name the server's
address and the model it serves (read once from `GET /models`), so two servers never share answers, and a server
that does not answer fails before any cached answer is replayed.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit

from dspy.clients._http import retry_after_seconds
from dspy.clients.engines.base import validate_request
from dspy.lm15 import (
    AuthError,
    ContextLengthError,
    InvalidRequestError,
    Message,
    RateLimitError,
    Response,
    ServerError,
    TextPart,
    TransportError,
    Usage,
    response_to_events,
)
from dspy.lm15 import TimeoutError as LMTimeoutError

from tide_dspy.backbones.llamacpp import request_messages
from tide_dspy.util.hashing import short_sha256

logger = logging.getLogger(__name__)

SCHEMA_FORMATS = ("json_schema", "llama.cpp", "off")
KEY_ENV = "TIDE_API_KEY"
PROVIDER = "openai-compatible"


class ServedEngine:
    def __init__(self, api_base: str, model: str | None = None, *, schema_format: str = "json_schema",
                 max_tokens: int = 1024, temperature: float | None = None, timeout: float = 600.0):
        if schema_format not in SCHEMA_FORMATS:
            raise ValueError(f"schema format {schema_format!r}: choose one of {', '.join(SCHEMA_FORMATS)} "
                             "(TIDE_SERVER_SCHEMA / --server-schema)")
        if urlsplit(api_base).scheme not in ("http", "https"):
            raise ValueError(f"api_base {api_base!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1")
        self.api_base = api_base
        self.model = model  # None: the one model the server lists
        self.schema_format = schema_format
        self.max_tokens = int(max_tokens)
        self.temperature = temperature
        self.timeout = float(timeout)
        self._served: str | None = None
        self._lock = threading.Lock()

    def __deepcopy__(self, memo) -> ServedEngine:
        """The LM's copies borrow this engine (DSPy's rule for custom engines): a deep copy of the LM shares it, so
        the served model is read once and no lock is copied."""
        return self

    # ---- which server, serving which model: DSPy's cache key ----
    def identity_string(self, served: str | None = None) -> str:
        name = served or self.model or "default"
        return f"openai-compatible/{name}-{self.schema_format}@{short_sha256(self.api_base, length=10)}"

    def cache_identity(self) -> str:
        """The LM's model string for DSPy's cache: the model served here and this server's address. The first call
        reads `GET <api_base>/models`; a server that lists no models (or has no such endpoint) is known by the
        configured name."""
        with self._lock:
            if self._served is None:
                self._served = self._served_model()
        return self.identity_string(self._served)

    def _served_model(self) -> str:
        try:
            listing = self._request("/models", None)
        except InvalidRequestError as exc:  # no /models here (404, 405): the configured name stands
            logger.warning("%s: no model list (%s); known by the configured name %r", self.api_base,
                           str(exc)[:200], self.model or "default")
            return self.model or "default"
        ids = [m.get("id") for m in (listing.get("data") or []) if isinstance(m, dict) and m.get("id")]
        if self.model is not None:
            # The name asked for, and what the server says it serves: a server restarted with another model behind
            # the same name is another identity.
            return self.model if ids in ([], [self.model]) else f"{self.model}~{'+'.join(sorted(ids))}"
        if len(ids) > 1:
            raise InvalidRequestError(f"{self.api_base} serves {len(ids)} models ({', '.join(ids[:5])}): name one "
                                      "with TIDE_SERVED_MODEL", provider=PROVIDER)
        self.model = ids[0] if ids else "default"
        return self.model

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
        body = {"model": self.model or "default", "messages": request_messages(request),
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
        return self._request(path, body)

    def _request(self, path: str, body: dict | None) -> dict:
        """POST `body` (GET when None) to `path` under api_base; the answer's JSON, or the lm15 error that says why
        not (a 429 carries the server's Retry-After)."""
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(KEY_ENV)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        parts = urlsplit(self.api_base)  # a query string (some gateways want one) stays after the path
        url = urlunsplit(parts._replace(path=parts.path.rstrip("/") + path))
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, headers=headers, method="POST" if body is not None else "GET")
        t0 = time.perf_counter()
        shown = urlunsplit(parts._replace(path=parts.path.rstrip("/") + path, query=""))
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc, shown) from None
        except TimeoutError:
            raise LMTimeoutError(f"{shown}: no answer within {self.timeout:g}s", provider=PROVIDER) from None
        except (urllib.error.URLError, OSError) as exc:
            if isinstance(getattr(exc, "reason", None), socket.timeout):
                raise LMTimeoutError(f"{shown}: no answer within {self.timeout:g}s", provider=PROVIDER) from None
            raise TransportError(f"{shown}: no answer after {time.perf_counter() - t0:.1f}s ({exc}); is the server "
                                 "running there? (--api-base / TIDE_API_BASE)") from None

    def _http_error(self, exc: urllib.error.HTTPError, url: str) -> Exception:
        detail = exc.read().decode(errors="replace")[:800]
        message = f"{url}: HTTP {exc.code}: {detail}"
        if exc.code == 429:
            return RateLimitError(message, provider=PROVIDER, status=429,
                                  retry_after=retry_after_seconds(exc.headers.get("Retry-After")))
        if exc.code in (401, 403):
            return AuthError(message + f"\nCheck {KEY_ENV}: the server refused it (or needs one)", provider=PROVIDER,
                             status=exc.code)
        if exc.code >= 500 and exc.code != 501:  # 501: the server has no such endpoint, which no retry changes
            return ServerError(message, provider=PROVIDER, status=exc.code)
        if "context" in detail.lower() and ("length" in detail.lower() or "window" in detail.lower()):
            return ContextLengthError(message, provider=PROVIDER, status=exc.code)
        if "response_format" in detail:
            message += (f"\nThe server refused the response format sent for schema format {self.schema_format!r}: "
                        "use TIDE_SERVER_SCHEMA=llama.cpp (--server-schema llama.cpp) for llama_cpp.server, "
                        "json_schema for vLLM and OpenAI-style servers, or off")
        return InvalidRequestError(message, provider=PROVIDER, status=exc.code)
