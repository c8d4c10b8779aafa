"""Argument types of the command line: a value out of its range is refused by argparse in one line that names the
option (``argument --lr: -1 is not a positive number``), before any work."""

from __future__ import annotations

import argparse
import math


def _number(text: str, kind: type, what: str, ok) -> int | float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if (kind is float and not math.isfinite(value)) or not ok(value):
        raise argparse.ArgumentTypeError(f"{text} is not {what}")
    return value


def positive_int(text: str) -> int:
    """A count: 1, 2, ..."""
    return _number(text, int, "a positive integer", lambda v: v > 0)


def non_negative_int(text: str) -> int:
    """A seed or a count that may be 0."""
    return _number(text, int, "a non-negative integer", lambda v: v >= 0)


def non_negative_float(text: str) -> float:
    """A threshold that may be 0: finite and not below 0."""
    return _number(text, float, "a non-negative number", lambda v: v >= 0)


def positive_float(text: str) -> float:
    """A learning rate, a time: finite and above 0."""
    return _number(text, float, "a positive number", lambda v: v > 0)


def fraction(text: str) -> float:
    """A warm-up or momentum: in [0, 1)."""
    return _number(text, float, "a fraction in [0, 1)", lambda v: 0 <= v < 1)


def unit_float(text: str) -> float:
    """A fraction that may be 1: in [0, 1]."""
    return _number(text, float, "a fraction in [0, 1]", lambda v: 0 <= v <= 1)
