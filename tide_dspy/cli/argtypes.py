"""argparse types. Numbers: each refuses what would silently switch a limit off (nan, inf, 0 where 1 is the least
that means anything) with a message that says what it expected. Names and prices: checked against the library only
when a value is parsed, so building the parser and printing its help load no DSPy or pydantic: `--help` stays fast.
"""

from __future__ import annotations

import argparse
import math


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    return _int_at_least(text, 1)


def count(text: str) -> int:
    """An argparse type: an integer of at least 0."""
    return _int_at_least(text, 0)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0 (seconds, ...); nan and inf are refused, since either would
    switch a limit off."""
    return _float_in(text, 0.0, math.inf, open_low=True)


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number of at least 0."""
    return _float_in(text, 0.0, math.inf)


def fraction(text: str) -> float:
    """An argparse type: a finite number strictly between 0 and 1."""
    return _float_in(text, 0.0, 1.0, open_low=True, open_high=True)


def percentage(text: str) -> float:
    """An argparse type: a finite number from 0 to 100."""
    return _float_in(text, 0.0, 100.0)


def _float_in(text: str, low: float, high: float, open_low: bool = False, open_high: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    if value < low or (open_low and value == low) or value > high or (open_high and value == high):
        lower = f"above {low:g}" if open_low else f"at least {low:g}"
        upper = "" if math.isinf(high) else f" and {'below' if open_high else 'at most'} {high:g}"
        raise argparse.ArgumentTypeError(f"must be {lower}{upper}, got {text}")
    return value


def price(text: str):
    """An argparse type: IN,OUT[,CACHED] in USD per million tokens (cost.prices.parse_price)."""
    from tide_dspy.cost.prices import parse_price

    try:
        return parse_price(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def judge_rubric(text: str) -> str:
    """An argparse type for --judge-rubric: one of schemas.JUDGE_RUBRICS, read only when a value is parsed (the
    schemas load pydantic, and `--help` stays fast)."""
    from tide_dspy.schemas import JUDGE_RUBRICS

    if text not in JUDGE_RUBRICS:
        raise argparse.ArgumentTypeError(f"unknown rubric {text!r}: choose one of {', '.join(JUDGE_RUBRICS)}")
    return text


def setting_name(text: str) -> str:
    """An argparse type for --setting: a name of tide_dspy.domains.SETTING_NAMES. The settings are read only when a
    value is parsed, so building the parser and printing its help load no DSPy: `--help` stays fast."""
    from tide_dspy.domains import SETTING_NAMES

    if text not in SETTING_NAMES:
        raise argparse.ArgumentTypeError(f"unknown setting {text!r}: choose one of {', '.join(SETTING_NAMES)}")
    return text


def stop_rule(text: str) -> str:
    """An argparse type for --stop-on: one of schemas.STOP_RULES, read only when a value is parsed."""
    from tide_dspy.schemas import STOP_RULES

    if text not in STOP_RULES:
        raise argparse.ArgumentTypeError(f"unknown stop rule {text!r}: choose one of {', '.join(STOP_RULES)}")
    return text
