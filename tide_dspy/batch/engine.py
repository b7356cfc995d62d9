"""`BatchEngine`: a DSPy custom engine whose every request goes to its provider's batch API, and `batch_lm`, which
puts it under a backbone's or a judge's LM.

DSPy's modules are unchanged: a round still calls its LM and blocks. The LM's engine is DSPy's own native client
(lm15), built as DSPy builds it for an online call, but given a transport that does not send: it hands the request
(its URL, headers and body, exactly as they would have gone online) to the collector, which sends it inside a
batch, and returns the batch's answer for it as the HTTP response. So the request in the batch is the online request
byte for byte (sampling rules, output schema, prompt-cache marks), and DSPy parses the answer, records history and
usage, and caches it as it does online; an answer found in DSPy's cache is never sent at all. lm15's own batch
calls are not used because they send OpenAI requests to the Responses API, not the Chat Completions endpoint the
online calls use, and number lines by position, which a resumed run could not match.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import re
import threading
from urllib.parse import urlsplit, urlunsplit

from dspy.utils.callback import BaseCallback

from tide_dspy.backbones.providers import ProviderRules
from tide_dspy.batch.clients import Endpoint, LineResult
from tide_dspy.batch.collector import BatchLineFailed, Collector

_ROLLOUT: contextvars.ContextVar[str] = contextvars.ContextVar("tide_batch_rollout", default="")
_GEMINI_URL = re.compile(r"^(?P<base>.*)/models/(?P<model>[^/:]+):generateContent$")
# The online endpoint each provider's chat call goes to, after the base.
_SUFFIX = {"openai": "/chat/completions", "anthropic": "/messages"}


class _RolloutOfCall(BaseCallback):
    """Notes each call's rollout id for the engine (DSPy strips it before the engine sees the request). Two samples
    that send the same bytes are two requests; the rollout tells them apart in the ledger's keys."""

    def on_lm_start(self, call_id, instance, inputs):
        kwargs = inputs.get("kwargs") or {}
        rollout = kwargs.get("rollout_id", (getattr(instance, "kwargs", None) or {}).get("rollout_id"))
        _ROLLOUT.set("" if rollout is None else str(rollout))


class _Capture:
    """An lm15 transport that sends nothing: each request is answered by its batch."""

    def __init__(self, engine: BatchEngine):
        self.engine = engine

    def stream(self, request):
        from dspy._vendor.lm15.transports import TransportResponse

        result = self.engine.batched(request)
        return TransportResponse(status=result.status, reason="", headers=[("content-type", "application/json")],
                                 http_version="HTTP/1.1", chunks=iter([result.body]), release=lambda consumed: None)

    def close(self) -> None:
        pass


class BatchEngine:
    """A DSPy custom engine (complete(Request) -> Response) that answers through `collector` in batches of `role`
    (backbone or judge). `base_url` is where the online calls would go (None: the provider's own address)."""

    def __init__(self, collector: Collector, *, role: str, model: str, rules: ProviderRules,
                 base_url: str | None = None, timeout: float | None = None, providers=()):
        from dspy.clients.engines.lm15_engine import LM15Engine
        from dspy.lm15 import RouterConfig

        if rules.batch is None:
            raise ValueError(f"{model}: its provider has no batch API")
        self.collector, self.role, self.rules, self.timeout = collector, role, rules, timeout or 600.0
        route = LM15Engine(RouterConfig(env={}, providers=providers)).resolve(model).provider
        self._inner = LM15Engine(RouterConfig(base_urls={route: base_url} if base_url else None,
                                              transport=_Capture(self), providers=providers))
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def complete(self, request):
        return self._inner.complete(request)

    def stream(self, request):
        from dspy.lm15 import UnsupportedFeatureError

        raise UnsupportedFeatureError("a batched LM does not stream: its answers arrive when its batch ends",
                                      feature="stream")

    def close(self) -> None:
        pass

    def dump_state(self) -> dict:
        return {"role": self.role, "provider": self.rules.provider}

    @classmethod
    def load_state(cls, state: dict) -> BatchEngine:
        raise ValueError("a batched LM is not restored from saved state: build the LM again and pass --batch")

    # ---- one request ----
    def batched(self, request) -> LineResult:
        endpoint, body = self.endpoint(request)
        return self.collector.call(self.role, endpoint, self.rules.batch, self._key(request), body)

    def _key(self, request) -> str:
        """What identifies this request in the ledger: its URL, bytes and rollout, and how many identical requests
        came before it in this process (a repeat is another request, as it would be online)."""
        url = urlunsplit(urlsplit(request.url)._replace(query=""))
        digest = hashlib.sha256(b"\0".join([self.role.encode(), url.encode(), request.body,
                                            _ROLLOUT.get().encode()])).hexdigest()[:40]
        with self._lock:
            n = self._seen.get(digest, 0)
            self._seen[digest] = n + 1
        return f"{digest}-{n}"

    def endpoint(self, request) -> tuple[Endpoint, dict]:
        """(where and as whom the request would have gone online, its body) from the captured request."""
        import json

        provider = self.rules.provider
        headers = {k.lower(): v for k, v in request.headers}
        url = urlunsplit(urlsplit(request.url)._replace(query=""))
        body = json.loads(request.body or b"{}")
        if provider == "gemini":
            m = _GEMINI_URL.match(url)
            if m is None:
                raise BatchLineFailed(f"a Gemini request to {url} is not a generateContent call; it cannot be batched")
            base, model = m.group("base"), m.group("model")
            credential = headers.get("x-goog-api-key") or ""
            extra = ()
        elif provider in _SUFFIX and url.endswith(_SUFFIX[provider]):
            base, model = url[: -len(_SUFFIX[provider])], str(body.get("model") or "")
            if provider == "openai":
                credential = headers.get("authorization", "").removeprefix("Bearer ").strip()
                extra = ()
            else:
                credential = headers.get("x-api-key") or ""
                extra = tuple(sorted((k, v) for k, v in headers.items()
                                     if k in ("anthropic-version", "anthropic-beta")))
        else:
            raise BatchLineFailed(f"a {provider} request to {url} has no batch equivalent here")
        return Endpoint(provider, base, model, credential, extra, self.timeout), body


def provider_base(lm) -> str | None:
    """Where the LM's online calls go: its api_base, else the provider's base variable, else None (its own)."""
    from tide_dspy.backbones.registry import BASE_ENV

    base = (getattr(lm, "kwargs", None) or {}).get("api_base")
    if base:
        return base
    for name in BASE_ENV.get(getattr(lm, "tide_rules", None).provider, ()):
        if os.environ.get(name):
            return os.environ[name]
    return None


def batch_lm(lm, collector: Collector, role: str = "backbone"):
    """A copy of `lm` (a hosted backbone's or judge's LM, as get_lm builds it) whose calls go through `collector`
    in batches of `role`. The copy asks for the same things online would (sampling rules, prompt-cache marks,
    DSPy's cache) and waits for its batch instead of timing out or retrying: a request that its batch did not
    answer is sent again by the collector, alone, up to BatchSettings.line_attempts times."""
    rules = getattr(lm, "tide_rules", None)
    name = getattr(lm, "tide_backbone", None) or getattr(lm, "model", repr(lm))
    if rules is None or rules.batch is None:
        raise ValueError(f"--batch: {name} has no batch API (batches go to OpenAI, Anthropic and Gemini)")
    if rules.provider not in _SUFFIX and rules.provider != "gemini":
        raise ValueError(f"--batch: {name} ({rules.provider}) is sent through LiteLLM, whose requests tide-dspy "
                         "cannot yet put in a batch; run it without --batch")
    engine = BatchEngine(collector, role=role, model=lm.model, rules=rules, base_url=provider_base(lm),
                         timeout=(lm.kwargs or {}).get("timeout"), providers=getattr(lm, "_providers", ()))
    batched = lm.copy(engine=engine, api_base=None, timeout=None)
    batched.callbacks = [*batched.callbacks, _RolloutOfCall()]
    batched.tide_origin = None  # its own history: the calls that went through a batch
    batched.tide_native_client = True  # DSPy's native client builds every batched request (prompt-cache marks)
    batched.tide_batch = role
    return batched


def batch_judge(judge, collector: Collector):
    """`judge` with its LM batched in role "judge" (its batches counted apart from the backbone's), when it has a
    hosted LM; a proxy judge, or none, as it is. A batched judge rates an instance's pairs at once
    (metrics.scoring.rates_pairs_at_once)."""
    lm = getattr(judge, "lm", None)
    if lm is None or getattr(lm, "tide_batch", None) is not None:
        return judge
    judge.lm = batch_lm(lm, collector, role="judge")
    return judge
