"""The one retry and sampling rule (tide_dspy.retry), one behaviour per test."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tide_dspy.retry import RETRY_TEMPERATURE, call_with_retries, rollout_base, sampling_config


def test_the_first_attempt_of_a_plain_call_has_no_config():
    assert sampling_config(0) == {}


def test_every_retry_is_a_new_sample_with_its_own_rollout_and_seed():
    configs = [sampling_config(a) for a in (1, 2, 3)]
    assert [c["rollout_id"] for c in configs] == [1, 2, 3]
    assert all(c["seed"] == c["rollout_id"] and c["temperature"] == RETRY_TEMPERATURE for c in configs)


def test_a_rollout_keeps_the_lms_temperature_on_its_first_attempt_unless_one_is_given():
    assert sampling_config(0, rollout=2) == {"rollout_id": 200, "seed": 200}
    assert sampling_config(0, rollout=2, temperature=0.3)["temperature"] == 0.3
    assert sampling_config(1, rollout=2, retry_temperature=0.7)["temperature"] == 0.7


def test_a_repeated_run_starts_its_rollouts_elsewhere():
    assert rollout_base(SimpleNamespace(kwargs={"rollout_id": 3})) == 30_000
    assert rollout_base(None) == 0
    assert sampling_config(1, base=30_000)["rollout_id"] == 30_001


def test_failures_are_retried_recorded_and_the_accepted_value_returned():
    seen, failures = [], []

    def call(config):
        seen.append(config)
        if len(seen) == 1:
            raise ValueError("unparseable")
        return len(seen)

    tried = call_with_retries(call, 4, check=lambda v: None if v == 3 else "too small",
                              on_failure=lambda i, e: failures.append((i, e)))
    assert tried.ok and tried.value == 3 and tried.attempts == 3
    assert failures == [(0, "ValueError: unparseable"), (1, "too small")]
    assert len({c.get("rollout_id") for c in seen}) == 3


def test_a_call_that_never_succeeds_returns_its_errors_without_raising():
    tried = call_with_retries(lambda c: 1 / 0, 2, error_chars=8)
    assert not tried.ok and tried.attempts == 2 and tried.errors == ["ZeroDivisionError: division"] * 2


def test_an_exception_outside_retry_on_propagates_at_once():
    calls = []

    def call(config):
        calls.append(config)
        raise KeyError("auth")

    with pytest.raises(KeyError):
        call_with_retries(call, 3, retry_on=ValueError)
    assert len(calls) == 1


def test_at_least_one_attempt_is_required():
    with pytest.raises(ValueError, match="at least 1"):
        call_with_retries(lambda c: None, 0)
