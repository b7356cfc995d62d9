"""One retry and sampling rule for the LM calls tide-dspy repeats: discovery rounds, judge ratings and workspace
generation steps (distillation repeats under `dspy.Refine`, whose rule this one follows).

As in DSPy's `BestOfN` and `Refine` (dspy/predict/best_of_n.py, refine.py), an attempt after the first is a new
sample: its own `rollout_id`, so DSPy's cache does not replay the answer that just failed, and a temperature above
0. Here the seed follows the rollout id too, so a local sampler with a fixed seed does not repeat itself either.
The first attempt of a plain call has no config of its own: its cache entry is the call's.

A config holds only what the LM's provider accepts (backbones.providers): a reasoning model, or Gemini 3, gets no
temperature, so its samples differ by rollout id and seed alone; a provider without a seed gets none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tide_dspy.backbones.providers import LOCAL, ProviderRules, rules_of

RETRY_TEMPERATURE = 1.0  # DSPy's BestOfN and Refine sample their attempts at 1.0
ROLLOUTS_PER_RUN = 10_000  # rollout ids a run may use before a repeat of the run (another base) begins
ATTEMPTS_PER_ROLLOUT = 100


def rollout_base(lm) -> int:
    """Where the rollout ids of a run on `lm` start. A repeat of a whole run is the LM copied with another
    rollout_id; its calls must not replay this run's samples."""
    kwargs = getattr(lm, "kwargs", None) or {}
    return int(kwargs.get("rollout_id") or 0) * ROLLOUTS_PER_RUN


def sampling_config(attempt: int, *, rollout: int | None = None, base: int = 0, temperature: float | None = None,
                    retry_temperature: float = RETRY_TEMPERATURE, rules: ProviderRules = LOCAL) -> dict:
    """The per-call `config` of `attempt` (0 is the first) of the sample `rollout` (None: the plain call).

    {} for the first attempt of the plain call; otherwise rollout_id = seed = base + rollout * 100 + attempt, and
    temperature = `temperature` when given, else `retry_temperature` on a retry (else the LM's own); then whatever
    the provider's `rules` refuse is left out."""
    if rollout is None and attempt == 0:
        return {}
    rollout_id = base + (rollout or 0) * ATTEMPTS_PER_ROLLOUT + attempt
    config: dict[str, Any] = {"rollout_id": rollout_id, "seed": rollout_id}
    chosen = temperature if temperature is not None else (retry_temperature if attempt else None)
    if chosen is not None:
        config["temperature"] = chosen
    return rules.sampling(config)


def describe_error(exc: BaseException, chars: int | None = None) -> str:
    """`Type: message`, the message scrubbed of secrets (a gateway may echo the key) and then cut to `chars`
    characters when given: the one place an error becomes text that is logged, printed or saved."""
    from tide_dspy.util.secrets import scrub_text

    message = scrub_text(str(exc))
    return f"{type(exc).__name__}: {message[:chars] if chars is not None else message}"


@dataclass
class Retried:
    """The outcome of `call_with_retries`: the accepted value (when `ok`), how many attempts were made and why
    each failed one failed."""

    value: Any = None
    ok: bool = False
    attempts: int = 0
    errors: list[str] = field(default_factory=list)


def call_with_retries(call: Callable[[dict], Any], max_attempts: int, *, lm=None, rollout: int | None = None,
                      temperature: float | None = None, retry_temperature: float = RETRY_TEMPERATURE,
                      check: Callable[[Any], str | None] | None = None,
                      retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
                      error_chars: int | None = None,
                      on_failure: Callable[[int, str], None] | None = None) -> Retried:
    """`call(config)` with each attempt's `sampling_config` until a value passes `check` (which returns None, or
    why it rejects the value), at most `max_attempts` times.

    An exception of a `retry_on` type is a failed attempt, recorded with `describe_error`; any other propagates.
    `on_failure(attempt, error)` follows each failed attempt. `lm` sets the rollout base (rollout_base) and the
    provider rules each config obeys. Never
    raises for a failure it retries: the outcome carries the errors, for the caller to count and record."""
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
    outcome, base, rules = Retried(), rollout_base(lm), rules_of(lm)
    for attempt in range(max_attempts):
        outcome.attempts = attempt + 1
        config = sampling_config(attempt, rollout=rollout, base=base, temperature=temperature,
                                 retry_temperature=retry_temperature, rules=rules)
        try:
            value = call(config)
            error = check(value) if check is not None else None
        except retry_on as exc:
            error = describe_error(exc, error_chars)
        if error is None:
            outcome.value, outcome.ok = value, True
            return outcome
        outcome.errors.append(error)
        if on_failure is not None:
            on_failure(attempt, error)
    return outcome
