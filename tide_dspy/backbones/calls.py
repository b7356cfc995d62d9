"""`ProviderLM`: a dspy.LM that sends only what its provider accepts, and waits out what a provider asks it to wait for.

Every call of a backbone get_lm builds passes here, whoever makes it (rounds, Multi's samples, judges, DSPy's Refine
in distillation, optimizers, Optuna's trials): its sampling parameters are shaped by the backbone's `ProviderRules`,
Claude's static prefix is marked for caching (cache_marks.py), an openai-compatible server gets the output schema in
its dialect (`Served`), and the call's DSPy cache key names where it goes.

Retries are tenacity's, with DSPy's own loop off (`num_retries=0`). DSPy's loop (dspy/clients/execution.py in 3.4)
honours Retry-After, but it sleeps any Retry-After however long (a daily quota's would hold a run for a day),
retries a host name that does not resolve (no wait changes that), and backs off without jitter, so `--workers`
threads refused together retry together. Here a transient failure (DSPy's `is_retryable_lm_error`) is retried up
to `num_retries` times (default 8), waiting the provider's Retry-After (read by DSPy's clients) plus up to a second
of jitter, else 1, 2, 4, ... 60 seconds plus the same jitter: at least 183 s in all, longer than a per-minute limit.
A Retry-After over LONGEST_WAIT, or a host that does not resolve, ends the call at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import threading

import dspy
import tenacity
from dspy.clients.base_lm import LM_CLASS_STATE_KEY
from dspy.utils.exceptions import is_retryable_lm_error

from tide_dspy.backbones.cache_marks import mark_static_prefix
from tide_dspy.backbones.providers import ProviderRules
from tide_dspy.util.hashing import short_sha256
from tide_dspy.util.settings import settings

logger = logging.getLogger(__name__)

DEFAULT_RETRIES = 8
LONGEST_WAIT = 600.0  # seconds of a Retry-After still waited out; a longer one is a quota, not a rate limit
SCHEMA_FORMATS = ("json_schema", "llama.cpp", "off")


def retry_after(exc: BaseException | None) -> float | None:
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


def retryable(exc: BaseException) -> bool:
    """A transient failure worth waiting for (see the module's docstring for what is not)."""
    if not is_retryable_lm_error(exc) or unresolvable(exc):
        return False
    hint = retry_after(exc)
    if hint is not None and hint > LONGEST_WAIT:
        logger.warning("the provider asks to wait %.0f s (more than %.0f s): not retried", hint, LONGEST_WAIT)
        return False
    return True


_BACKOFF = tenacity.wait_exponential(multiplier=1, max=60) + tenacity.wait_random(0, 1)


def wait_time(state: tenacity.RetryCallState) -> float:
    """The provider's Retry-After plus up to a second of jitter, else the exponential backoff with it."""
    hint = retry_after(state.outcome.exception())
    return hint + random.uniform(0, 1) if hint is not None else _BACKOFF(state)


def _retrying(lm: ProviderLM, factory=tenacity.Retrying):
    def say(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception()
        status = getattr(exc, "status", None)
        logger.warning("%s: %s%s; retry %d of %d in %.1f s%s", lm.model.split("@")[0], type(exc).__name__,
                       f" (HTTP {status})" if status else "", state.attempt_number, lm.tide_retries,
                       state.next_action.sleep, " (the provider's Retry-After)" if retry_after(exc) is not None else "")

    return factory(stop=tenacity.stop_after_attempt(lm.tide_retries + 1), wait=wait_time,
                   retry=tenacity.retry_if_exception(retryable), before_sleep=say, reraise=True)


class Served:
    """An openai-compatible server (vLLM, `python -m llama_cpp.server`), reached through DSPy's LiteLLM client: where
    it is, the schema dialect it takes, and the model it serves, read once from `GET /models` (the configured
    name where it lists none or several under that name).

    The dialect is the one quirk LiteLLM cannot be told of: DSPy's JSONAdapter asks for the schema as OpenAI's
    json_schema, which vLLM takes, but llama_cpp.server takes it only as `{"type": "json_object", "schema": ...}`
    ("llama.cpp"); "off" sends no response_format (DSPy's ChatAdapter asks for its text format). The key is read
    from TIDE_API_KEY at each call (a placeholder without one, so the client never falls back to OPENAI_API_KEY),
    and never stored, saved or logged."""

    def __init__(self, api_base: str, model: str | None, schema_format: str):
        if schema_format not in SCHEMA_FORMATS:
            raise ValueError(f"schema format {schema_format!r}: choose one of {', '.join(SCHEMA_FORMATS)} "
                             "(TIDE_SERVER_SCHEMA / --server-schema)")
        self.api_base, self.model, self.schema_format = api_base, model, schema_format
        self._served: str | None = None
        self._lock = threading.Lock()

    def __deepcopy__(self, memo) -> Served:
        return self  # the LM's copies share it: the served model is read once, and no lock is copied

    @staticmethod
    def key() -> str:
        key = settings().api_key
        return key.get_secret_value() if key else "no-key"

    def served_model(self) -> str:
        """What the server serves, as its identity knows it: the configured name, marked with what the server lists
        where that differs (a server restarted with another model behind the same name is another identity)."""
        with self._lock:
            if self._served is None:
                self._served = self._listed()
        return self._served

    def name(self) -> str:
        """The model id each request names: the configured one, else the one the server lists."""
        return self.model or self.served_model()

    def _listed(self) -> str:
        import openai

        try:
            ids = [m.id for m in openai.OpenAI(base_url=self.api_base, api_key=self.key(), max_retries=0,
                                               timeout=30).models.list()]
        except openai.NotFoundError:  # no /models here: the configured name stands
            return self.model or "default"
        except openai.APIConnectionError as exc:
            raise ConnectionError(f"{self.api_base}: no answer ({exc}); is the server running there? (--api-base / "
                                  "TIDE_API_BASE)") from None
        if self.model is not None:
            return self.model if ids in ([], [self.model]) else f"{self.model}~{'+'.join(sorted(ids))}"
        if len(ids) > 1:
            raise ValueError(f"{self.api_base} serves {len(ids)} models ({', '.join(ids[:5])}): name one with "
                             "TIDE_SERVED_MODEL")
        return ids[0] if ids else "default"

    def identity(self) -> str:
        """What DSPy's cache keys a call on besides the request: the model served, the dialect and the address."""
        return f"openai-compatible/{self.served_model()}-{self.schema_format}@{short_sha256(self.api_base, length=10)}"

    def explain(self, exc: Exception) -> None:
        """Add to a refusal of the response format which --server-schema the server takes instead."""
        if "response_format" in str(exc) and len(exc.args) == 1 and isinstance(exc.args[0], str):
            exc.args = (f"{exc.args[0]}\nThe server refused the response format sent for schema format "
                        f"{self.schema_format!r}: use TIDE_SERVER_SCHEMA=llama.cpp (--server-schema llama.cpp) for "
                        "llama_cpp.server, json_schema for vLLM and OpenAI-style servers, or off",)

    def response_format(self, asked):
        """The response format the adapter asked for (a pydantic model, or a dict), in this server's dialect."""
        if asked is None or self.schema_format != "llama.cpp":
            return asked
        schema = asked.model_json_schema() if hasattr(asked, "model_json_schema") else (
            asked.get("json_schema", {}).get("schema") or asked.get("schema"))
        return {"type": "json_object", **({"schema": schema} if schema else {})}


class ProviderLM(dspy.LM):
    """A dspy.LM whose every call is shaped by `rules` and retried by tenacity (the module's docstring says why).

    The sampling rules apply at construction, on `copy()` (DSPy's Refine and Optuna's trials copy the LM with a
    temperature) and on each call's own options. DSPy's cache key leaves the address out (api_base), so each call's
    key names where it goes: `cache_identity` (a hosted backbone's address, or a served model's identity) rides in
    the call's `rollout_id`, which DSPy keys on and never sends. So DSPy's cache never replays the answers of another
    address."""

    def __init__(self, model: str, *, rules: ProviderRules, num_retries: int = DEFAULT_RETRIES,
                 cache_identity: str | None = None, served: Served | None = None, **kwargs):
        if num_retries < 0:
            raise ValueError(f"num_retries must be at least 0, got {num_retries} (--num-retries / TIDE_NUM_RETRIES)")
        self.tide_rules = rules
        self.tide_retries = num_retries
        self.tide_origin: ProviderLM | None = None  # the LM this one was copied from, first of the line
        self.tide_cache_identity = cache_identity
        self.tide_served = served
        super().__init__(model, num_retries=0, **rules.sampling(kwargs))

    @property
    def supports_response_schema(self) -> bool:
        return self.tide_served.schema_format != "off" if self.tide_served else super().supports_response_schema

    @property
    def supported_params(self) -> set[str]:
        if self.tide_served is None:
            return super().supported_params
        return {"temperature", "max_tokens", "stop", "seed", "top_p",
                *(["response_format"] if self.supports_response_schema else [])}

    def _shape(self, messages, kwargs: dict) -> dict:
        """The call's options as this provider takes them; `messages` (the adapter's own list) split in place where
        Claude's cache mark goes, so they stay the adapter's and DSPy does not warn of a caller's messages."""
        kwargs = mark_static_prefix(self, messages, self.tide_rules.sampling(kwargs))
        if self.tide_served is not None:
            self.model = "openai/" + self.tide_served.name()
            self.tide_cache_identity = self.tide_served.identity()
            kwargs["api_key"] = self.tide_served.key()
            if "response_format" in kwargs:
                kwargs["response_format"] = self.tide_served.response_format(kwargs["response_format"])
        if self.tide_cache_identity is not None:
            rollout = kwargs.get("rollout_id", self.kwargs.get("rollout_id"))
            kwargs["rollout_id"] = self.tide_cache_identity + ("" if rollout is None else f"#{rollout}")
        return kwargs

    def __call__(self, prompt=None, *, messages=None, **kwargs):
        kwargs = self._shape(messages, kwargs)
        try:
            for attempt in _retrying(self):
                with attempt:
                    return super().__call__(prompt, messages=messages, **kwargs)
        except Exception as exc:
            if self.tide_served is not None:
                self.tide_served.explain(exc)
            raise

    async def acall(self, prompt=None, *, messages=None, **kwargs):
        kwargs = await asyncio.to_thread(self._shape, messages, kwargs)  # a served model's first call asks the server
        try:
            async for attempt in _retrying(self, tenacity.AsyncRetrying):
                with attempt:
                    return await super().acall(prompt, messages=messages, **kwargs)
        except Exception as exc:
            if self.tide_served is not None:
                self.tide_served.explain(exc)
            raise

    def copy(self, **kwargs):
        copied = super().copy(**kwargs)
        copied.kwargs = copied.tide_rules.sampling(copied.kwargs)
        copied.tide_origin = self.tide_origin or self
        return copied

    def dump_state(self):
        """dspy.LM's state, marked as a plain dspy.LM: a program saved with DSPy's own save() loads without this
        class (tide-dspy's loader drops a saved LM anyway: a program runs on the LM its caller builds)."""
        return {**super().dump_state(), LM_CLASS_STATE_KEY: "dspy.clients.lm.LM"}

    def update_history(self, entry):
        """Record a call; a copy's calls go to the history of the LM it was copied from too. Optimizers copy the LM
        they are given (MIPROv2's proposer at another temperature, say), and what a run spent is read from the
        history of the LMs it built (cost.guard.Spend), so those calls are counted and priced as its."""
        super().update_history(entry)
        origin, bound = self.tide_origin, dspy.settings.max_history_size
        if origin is None or dspy.settings.disable_history or not bound:
            return
        if len(origin.history) >= bound:
            origin.history.pop(0)
        origin.history.append(entry)
