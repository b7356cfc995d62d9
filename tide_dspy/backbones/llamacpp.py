"""The embedded backbone: llama.cpp in-process, as a DSPy custom engine.

`dspy.LM("llamacpp/<model>-<sha12>", engine=LlamaCppEngine(...))`: DSPy owns caching, retries and history;
the engine turns one `dspy.lm15.Request` into one `dspy.lm15.Response`.

One `Llama` object per model file per process, shared by every engine and LM copy, behind a lock. llama.cpp
keeps the tokens of the last call and re-evaluates only what follows the longest common prefix, so rounds
whose prompts share the static context (system message, candidates, templates) pay only for the new tail.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dspy.lm15 import (
    ContextLengthError,
    Message,
    Response,
    TextPart,
    TokenLogprob,
    TopLogprob,
    Usage,
    response_to_events,
)

from tide_dspy.backbones import llamacpp_cache
from tide_dspy.backbones.grammar import GrammarFilter
from tide_dspy.backbones.weights import INSTALL_HINT, LOCAL_MODELS, LocalModel, assemble

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 1024
DEFAULT_N_CTX = 32768


class LlamaCppUnavailable(ImportError):
    pass


@dataclass
class CallStats:
    """What one call cost. `reused_tokens` is the prompt prefix llama.cpp kept from the previous call."""

    prompt_tokens: int
    output_tokens: int
    reused_tokens: int
    prompt_seconds: float | None  # llama.cpp's own prompt-eval timer (None when unavailable)
    generation_seconds: float | None
    wall_seconds: float
    constrained: bool
    finish_reason: str
    grammar_fallbacks: int | None = None  # steps whose first choice the grammar rejected (fast grammar only)


@dataclass
class _Shared:
    llama: Any
    lock: threading.Lock
    settings: tuple


_SHARED: dict[str, _Shared] = {}
_SHARED_LOCK = threading.Lock()


def import_llama_cpp():
    try:
        import llama_cpp
    except ImportError as exc:
        raise LlamaCppUnavailable(f"the embedded backbone needs llama-cpp-python ({exc}). Install it with the "
                                  f"portable CPU build: scripts/install.sh, or {INSTALL_HINT}") from exc
    return llama_cpp


def shared_llama(path: Path, n_ctx: int, n_threads: int) -> _Shared:
    """The process-wide Llama for this file; reloaded only if asked for other settings."""
    key = str(path)
    with _SHARED_LOCK:
        shared = _SHARED.get(key)
        if shared is not None and shared.settings == (n_ctx, n_threads):
            return shared
        llama_cpp = import_llama_cpp()
        if shared is not None:
            log.warning(
                "reloading %s with n_ctx=%d n_threads=%d (was %s)", path.name, n_ctx, n_threads, shared.settings
            )
        t0 = time.perf_counter()
        llama = llama_cpp.Llama(model_path=key, n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                                verbose=False)
        log.info("loaded %s in %.1fs (n_ctx=%d, threads=%d)", path.name, time.perf_counter() - t0, n_ctx, n_threads)
        shared = _Shared(llama, threading.Lock(), (n_ctx, n_threads))
        _SHARED[key] = shared
        return shared


def _tokens(llama) -> list[int]:
    """The tokens llama.cpp holds in its KV cache (a numpy array on a real Llama)."""
    ids = getattr(llama, "_input_ids", None)
    if ids is None:
        return []
    return ids.tolist() if hasattr(ids, "tolist") else list(ids)


def _perf(llama) -> tuple[float, float] | None:
    """(prompt-eval seconds, generation seconds) since the last reset, from llama.cpp's own counters."""
    try:
        import llama_cpp

        data = llama_cpp.llama_perf_context(llama.ctx)
        return data.t_p_eval_ms / 1000.0, data.t_eval_ms / 1000.0
    except Exception:  # noqa: BLE001 - a fake Llama or an older binding has no counters
        return None


def _reset_perf(llama) -> None:
    try:
        import llama_cpp

        llama_cpp.llama_perf_context_reset(llama.ctx)
    except Exception:  # noqa: BLE001
        pass


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(getattr(p, "text", "") or "" for p in content)


def grammar_logprobs(llama, grammar: GrammarFilter) -> tuple[TokenLogprob, ...]:
    """The grammar sampler's per-step record as lm15 logprobs (the model's distribution before the grammar)."""
    def text(token: int) -> str:
        return llama.detokenize([token]).decode("utf-8", errors="replace")

    return tuple(TokenLogprob(token=text(t), logprob=lp, token_id=t,
                              top=tuple(TopLogprob(token=text(a), logprob=alp) for a, alp in top))
                 for t, lp, top in grammar.logprobs if lp > float("-inf"))


def chat_logprobs(raw: dict) -> tuple[TokenLogprob, ...]:
    """llama-cpp-python's OpenAI-style `choices[0].logprobs.content` as lm15 logprobs."""
    content = ((raw["choices"][0].get("logprobs") or {}).get("content")) or []
    return tuple(TokenLogprob(token=c["token"], logprob=float(c["logprob"]),
                              top=tuple(TopLogprob(token=a["token"], logprob=float(a["logprob"]))
                                        for a in c.get("top_logprobs") or []))
                 for c in content)


def request_messages(request) -> list[dict]:
    messages = []
    if request.system is not None:
        messages.append({"role": "system", "content": _text(request.system)})
    for m in request.messages:
        role = "system" if m.role == "developer" else m.role
        messages.append({"role": role, "content": m.text or ""})
    return messages


class LlamaCppEngine:
    """A DSPy engine running a GGUF model in this process.

    constrained=True turns a request's JSON-schema response format into a llama.cpp grammar, so the output
    always parses as that schema (JSONAdapter sends one; ChatAdapter does not). With constrained=False the
    engine advertises no response_format support, so adapters send plain prompts. fast_grammar=True checks the
    grammar on the chosen token first and on the whole vocabulary only when it rejects it (see grammar.py);
    False uses llama-cpp-python's own full-vocabulary grammar sampler.
    """

    def __init__(self, model: str = "qwen2.5-coder-1.5b-instruct", *, n_ctx: int = DEFAULT_N_CTX,
                 n_threads: int = 2, max_tokens: int = DEFAULT_MAX_TOKENS, temperature: float = 0.0,
                 seed: int = 0, constrained: bool = True, require_items: bool = False, fast_grammar: bool = True,
                 llama: Any = None):
        if model not in LOCAL_MODELS:
            raise ValueError(f"unknown local model {model!r}; choose one of {sorted(LOCAL_MODELS)}")
        self.model = model
        self.n_ctx = int(n_ctx)
        self.n_threads = int(n_threads)
        self.max_tokens = int(max_tokens)
        self.temperature = float(temperature)
        self.seed = int(seed)
        self.constrained = bool(constrained)
        self.require_items = bool(require_items)
        self.fast_grammar = bool(fast_grammar)
        self._injected = _Shared(llama, threading.Lock(), ()) if llama is not None else None
        self.calls: list[CallStats] = []

    # ---- what adapters may ask of this engine (dspy.clients.capabilities) ----
    @property
    def spec(self) -> LocalModel:
        return LOCAL_MODELS[self.model]

    @property
    def supports_response_schema(self) -> bool:
        return self.constrained

    @property
    def supported_params(self) -> frozenset[str]:
        params = {"temperature", "max_tokens", "stop", "seed", "top_p", "top_k", "logprobs", "top_logprobs"}
        return frozenset(params | ({"response_format"} if self.constrained else set()))

    # ---- saving (dspy.clients.lm._dump_engine): settings only, never weights or paths ----
    def dump_state(self) -> dict:
        return dict(model=self.model, n_ctx=self.n_ctx, n_threads=self.n_threads, max_tokens=self.max_tokens,
                    temperature=self.temperature, seed=self.seed, constrained=self.constrained,
                    require_items=self.require_items, fast_grammar=self.fast_grammar)

    @classmethod
    def load_state(cls, state: dict) -> LlamaCppEngine:
        return cls(**state)

    def _shared(self) -> _Shared:
        if self._injected is not None:
            return self._injected
        return shared_llama(assemble(self.spec), self.n_ctx, self.n_threads)

    def _grammar_format(self, request) -> dict | None:
        fmt = request.config.response_format
        if not self.constrained or not fmt:
            return None
        if fmt.get("type") == "json_schema":
            return {"type": "json_object", "schema": self._require_items(fmt["schema"])}
        return {"type": "json_object"}

    def _require_items(self, schema: dict) -> dict:
        """With require_items, top-level list outputs (a round's findings) get minItems 1 in the grammar: under a
        grammar the small Qwen models answer an empty list to almost every round, even at temperature 0.7-1.0."""
        if not self.require_items or not isinstance(schema.get("properties"), dict):
            return schema
        props = {k: ({**v, "minItems": max(1, v.get("minItems", 0))} if v.get("type") == "array" else v)
                 for k, v in schema["properties"].items()}
        return {**schema, "properties": props}

    def complete(self, request) -> Response:
        cfg = request.config
        response_format = self._grammar_format(request)
        kwargs: dict[str, Any] = dict(
            messages=request_messages(request),
            max_tokens=min(cfg.max_tokens or self.max_tokens, self.max_tokens),
            temperature=self.temperature if cfg.temperature is None else cfg.temperature,
            seed=self.seed if cfg.seed is None else cfg.seed,
        )
        if cfg.stop:
            kwargs["stop"] = list(cfg.stop)
        if cfg.top_p is not None:
            kwargs["top_p"] = cfg.top_p
        if cfg.top_k is not None:
            kwargs["top_k"] = cfg.top_k
        if response_format is not None and not self.fast_grammar:
            kwargs["response_format"] = response_format
        if cfg.logprobs is not None and not (response_format is not None and self.fast_grammar):
            kwargs.update(logprobs=True, top_logprobs=cfg.logprobs)

        shared = self._shared()
        cache = None if self._injected else llamacpp_cache.for_model(self.spec.dspy_model, self.n_ctx)
        grammar = None
        with shared.lock:
            llama = shared.llama
            if response_format is not None and self.fast_grammar:
                from llama_cpp import LogitsProcessorList

                grammar = GrammarFilter.for_response_format(llama, response_format, temperature=kwargs["temperature"],
                                                            seed=kwargs["seed"], top_k=cfg.top_k, top_p=cfg.top_p,
                                                            logprobs=cfg.logprobs)
                kwargs["logits_processor"] = LogitsProcessorList([grammar])
            before = _tokens(llama)
            _reset_perf(llama)
            if cache:
                cache.attach(llama)
            t0 = time.perf_counter()
            try:
                raw = llama.create_chat_completion(**kwargs)
            except ValueError as exc:
                if "exceed context window" in str(exc):
                    raise ContextLengthError(self._context_message(str(exc)), provider="llamacpp") from exc
                raise
            finally:
                if cache:
                    cache.detach(llama)
                if grammar is not None:
                    grammar.close()
            wall = time.perf_counter() - t0
            perf = _perf(llama)
            after = _tokens(llama)
            if cache:
                cache.keep(llama, raw, before)
            logprobs = (None if cfg.logprobs is None else
                        grammar_logprobs(llama, grammar) if grammar is not None else chat_logprobs(raw))
        return self._response(raw, before, after, perf, wall, response_format is not None,
                              grammar.fallbacks if grammar is not None else None, logprobs)

    def _context_message(self, detail: str) -> str:
        return (f"the prompt does not fit the context window of {self.spec.title}: {detail} (n_ctx={self.n_ctx}, "
                f"the model allows up to {self.spec.n_ctx_train}). Raise TIDE_N_CTX / n_ctx if below that, "
                "or use a smaller instance or a hosted backbone.")

    def _response(self, raw: dict, before: list, after: list, perf, wall: float, constrained: bool,
                  grammar_fallbacks: int | None = None, logprobs: tuple[TokenLogprob, ...] | None = None) -> Response:
        choice = raw["choices"][0]
        usage = raw.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        output_tokens = int(usage.get("completion_tokens") or 0)
        reused = min(llamacpp_cache.common_prefix(before, after[:prompt_tokens]), prompt_tokens)
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        self.calls.append(CallStats(
            prompt_tokens=prompt_tokens, output_tokens=output_tokens, reused_tokens=reused,
            prompt_seconds=perf[0] if perf else None, generation_seconds=perf[1] if perf else None,
            wall_seconds=round(wall, 3), constrained=constrained, finish_reason=finish,
            grammar_fallbacks=grammar_fallbacks,
        ))
        return Response(
            id=raw.get("id"),
            model=self.spec.dspy_model,
            message=Message.assistant([TextPart((choice.get("message") or {}).get("content") or "")]),
            finish_reason=finish,
            usage=Usage(input_tokens=prompt_tokens, output_tokens=output_tokens, cache_read_tokens=reused),
            provider_data={"engine": "llama.cpp", **{k: v for k, v in asdict(self.calls[-1]).items() if v is not None}},
            logprobs=logprobs or (),
        )

    def stream(self, request):
        return response_to_events(self.complete(request))

    def close(self) -> None:
        """The shared Llama outlives any one LM; nothing to release per engine."""
