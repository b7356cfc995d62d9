"""argparse types for numeric options: each refuses what would silently switch a limit off (nan, inf, 0 where
1 is the least that means anything) with a message that says what it expected."""

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
