"""`ProviderLM`: a dspy.LM that sends only what its provider accepts, and waits out what a provider asks it to wait for.

Every call of a hosted or served backbone passes here, whoever makes it (rounds, Multi's samples, judges, DSPy's
Refine in distillation, Optuna's trials): its sampling parameters are shaped by the backbone's `ProviderRules`, and
a call that failed for a transient reason (a 429, a timeout, a 5xx, a dropped connection) is retried under one
`RetryPolicy`; a host name that does not resolve ends the call at once. DSPy's own retry loop is off
(`num_retries=0`), so the wait is this module's alone: the provider's Retry-After when it sends one (seconds or an
HTTP date, read by DSPy's clients), else an exponential backoff with jitter that outlasts a per-minute rate limit.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.clients._deprecation import _adapter_call, adapter_message_call
from dspy.clients.base_lm import LM_CLASS_STATE_KEY
from dspy.utils.exceptions import is_retryable_lm_error

from tide_dspy.backbones.prompt_caching import mark_static_prefix
from tide_dspy.backbones.providers import ProviderRules

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """How a call that failed for a transient reason is retried.

    Attempt n (from 0) waits the provider's Retry-After plus up to a second of jitter, or else between half and all
    of min(cap, base * 2**n) seconds. The defaults (8 retries, 1 s, 60 s) wait at least 91 s in all, so a
    per-minute limit has reset before they run out, and the jitter spreads `--workers` threads that were refused
    together. A Retry-After longer than `longest_wait` (a daily quota) ends the retries at once."""

    num_retries: int = 8
    base: float = 1.0
    cap: float = 60.0
    longest_wait: float = 600.0

    def __post_init__(self):
        if self.num_retries < 0:
            raise ValueError(f"num_retries must be at least 0, got {self.num_retries} "
                             "(--num-retries / TIDE_NUM_RETRIES)")

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        if retry_after is not None:
            return retry_after + rng.uniform(0, min(1.0, self.base))
        bound = min(self.cap, self.base * 2 ** attempt)
        return bound / 2 + rng.uniform(0, bound / 2)

    def least_total_wait(self) -> float:
        """The shortest time all retries wait together when the provider sends no Retry-After."""
        return sum(min(self.cap, self.base * 2 ** n) / 2 for n in range(self.num_retries))


def _retry_after(exc: BaseException) -> float | None:
    value = getattr(exc, "retry_after", None)
    return float(value) if isinstance(value, (int, float)) and value >= 0 else None


def unresolvable(exc: BaseException) -> bool:
    """True when `exc` comes of a host name that did not resolve (a socket.gaierror in its chain): no network, or a
    mistyped address. No wait changes that, so such a call is not retried."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, socket.gaierror):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _why(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    return f"{type(exc).__name__}{f' (HTTP {status})' if status else ''}"


class _Retrier:
    """One policy applied to one LM's calls (shared by its copies)."""

    def __init__(self, policy: RetryPolicy, label: str):
        self.policy, self.label = policy, label
        self.rng = random.Random()
        self.lock = threading.Lock()

    def __deepcopy__(self, memo) -> _Retrier:
        """A deep copy of the LM (DSPy copies modules, and the LM a predictor holds, with copy.deepcopy) shares
        this retrier, as its copy() does: one policy, one jitter source, and no lock to copy."""
        return self

    def wait_for(self, exc: BaseException, attempt: int) -> float | None:
        """Seconds to wait before the next attempt, or None when `exc` ends the call."""
        if attempt >= self.policy.num_retries or not is_retryable_lm_error(exc) or unresolvable(exc):
            return None
        hint = _retry_after(exc)
        if hint is not None and hint > self.policy.longest_wait:
            logger.warning("%s: the provider asks to wait %.0f s (more than %.0f s): not retried", self.label, hint,
                           self.policy.longest_wait)
            return None
        with self.lock:
            seconds = self.policy.delay(attempt, hint, self.rng)
        logger.warning("%s: %s; retry %d of %d in %.1f s%s", self.label, _why(exc), attempt + 1,
                       self.policy.num_retries, seconds, " (the provider's Retry-After)" if hint is not None else "")
        return seconds

    def run(self, call: Callable[[], Any]) -> Any:
        attempt = 0
        while True:
            try:
                return call()
            except Exception as exc:
                seconds = self.wait_for(exc, attempt)
                if seconds is None:
                    raise
            time.sleep(seconds)
            attempt += 1

    async def arun(self, call: Callable[[], Any]) -> Any:
        attempt = 0
        while True:
            try:
                return await call()
            except Exception as exc:
                seconds = self.wait_for(exc, attempt)
                if seconds is None:
                    raise
            await asyncio.sleep(seconds)
            attempt += 1


class ProviderLM(dspy.LM):
    """A dspy.LM whose every call is shaped by `rules` and retried under `retry`.

    The sampling rules apply at construction, on `copy()` (DSPy's Refine and Optuna's trials copy the LM with a
    temperature) and on each call's own options. On a provider that caches only what it is asked to (Claude), each
    call's static prefix is marked (backbones.prompt_caching). DSPy's cache key leaves the address out (api_base),
    so each call's key names where it goes: a served engine's cache identity (its address and the model it serves,
    read before the first call) is its model string; a hosted backbone's (`cache_identity`, its address) rides in
    the call's `rollout_id`, which DSPy keys on and never sends. Either way, DSPy's cache never replays the answers
    of another address."""

    def __init__(self, model: str, *, rules: ProviderRules, retry: RetryPolicy | None = None,
                 cache_identity: str | None = None, **kwargs):
        self.tide_rules = rules
        self.retry_policy = retry or RetryPolicy()
        self.tide_origin: ProviderLM | None = None  # the LM this one was copied from, first of the line
        self.tide_cache_identity = cache_identity
        super().__init__(model, num_retries=0, **rules.sampling(kwargs))
        self._retrier = _Retrier(self.retry_policy, model.split("@")[0])

    def _keyed(self, kwargs: dict) -> dict:
        """The call's options with the address in its cache key (a rollout id of its own kept after it)."""
        if self.tide_cache_identity is None:
            return kwargs
        rollout = kwargs.get("rollout_id", self.kwargs.get("rollout_id"))
        return {**kwargs, "rollout_id": self.tide_cache_identity + ("" if rollout is None else f"#{rollout}")}

    def _identify(self) -> None:
        identity = getattr(self._engine_spec, "cache_identity", None)
        if callable(identity):
            self.model = identity()

    def _shape(self, messages, kwargs: dict):
        """(messages, options) as this provider takes them, and the context the call runs in: an adapter's messages
        cut for caching are still that adapter's (DSPy warns only about messages a caller passed itself)."""
        shaped, kwargs = mark_static_prefix(self, messages, self.tide_rules.sampling(kwargs))
        origin = _adapter_call.get()
        adapters = shaped is not messages and origin is not None and origin[0] is self and origin[1] is messages
        return shaped, kwargs, ((lambda: adapter_message_call(self, shaped)) if adapters else nullcontext)

    def __call__(self, prompt=None, *, messages=None, **kwargs):
        messages, kwargs, context = self._shape(messages, self._keyed(kwargs))

        def once():
            self._identify()
            with context():
                return super(ProviderLM, self).__call__(prompt, messages=messages, **kwargs)

        return self._retrier.run(once)

    async def acall(self, prompt=None, *, messages=None, **kwargs):
        messages, kwargs, context = self._shape(messages, self._keyed(kwargs))

        async def once():
            await asyncio.to_thread(self._identify)
            with context():
                return await super(ProviderLM, self).acall(prompt, messages=messages, **kwargs)

        return await self._retrier.arun(once)

    def copy(self, **kwargs):
        copied = super().copy(**kwargs)
        copied.kwargs = copied.tide_rules.sampling(copied.kwargs)
        copied.tide_origin = self.tide_origin or self
        return copied

    def update_history(self, entry):
        """Record a call; a copy's calls go to the history of the LM it was copied from too. Optimizers copy the LM
        they are given (MIPROv2's proposer at another temperature, say), and the usage a command reports is read
        from the history of the LM it built (cost.usage), so those calls are counted and priced as its."""
        super().update_history(entry)
        origin, bound = self.tide_origin, dspy.settings.max_history_size
        if origin is None or dspy.settings.disable_history or not bound:
            return
        if len(origin.history) >= bound:
            origin.history.pop(0)
        origin.history.append(entry)

    def dump_state(self):
        """dspy.LM's state, marked as a plain dspy.LM so a saved program loads without importing this class (the
        loader drops a saved LM anyway: a program runs on the LM its caller builds)."""
        state = super().dump_state()
        state[LM_CLASS_STATE_KEY] = "dspy.clients.lm.LM"
        state["num_retries"] = self.retry_policy.num_retries
        return state
