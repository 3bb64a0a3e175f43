"""Trend windows: the one the job picks from the data's span, and one given by hand
(checked before any file is read, so that a typo costs no pass over the exports)."""

from __future__ import annotations

import re

from mqgather.errors import ConfigError

#: Trend windows the job picks from, shortest first.
WINDOWS = (
    ("1 minute", 60),
    ("5 minutes", 300),
    ("15 minutes", 900),
    ("1 hour", 3600),
    ("6 hours", 6 * 3600),
    ("1 day", 86400),
    ("1 week", 7 * 86400),
)
#: The most windows a trend should have when the job picks the window.
MAX_WINDOWS = 48

#: Seconds per unit of a window Spark's ``window`` takes (no month or year: their lengths
#: vary, and Spark refuses them for a window).
UNIT_SECONDS = {
    "week": 7 * 86400.0,
    "day": 86400.0,
    "hour": 3600.0,
    "minute": 60.0,
    "second": 1.0,
    "millisecond": 1e-3,
    "microsecond": 1e-6,
}
#: ASCII digits only: Spark reads no other script's.
_PART = re.compile(r"([0-9]+)\s+([a-z]+?)s?(?=\s|$)", re.ASCII)
#: The longest window taken: a trend's windows then still fall inside the calendar
#: (Spark cannot read a number of over 18 digits; Python, a window ending past 9999).
MAX_WINDOW_SECONDS = 366 * 86400.0


def pick_window(span_seconds: float) -> str:
    """The shortest window that cuts ``span_seconds`` of data into at most
    :data:`MAX_WINDOWS` windows (the longest one for a longer span)."""
    for name, seconds in WINDOWS:
        if span_seconds / seconds <= MAX_WINDOWS:
            return name
    return WINDOWS[-1][0]


def window_seconds(text: str, key: str = "--window") -> float:
    """The length of a window written as Spark takes it ("15 minutes", "1 hour 30
    minutes").

    Raises:
        ConfigError: naming ``key``, for text that is not whole numbers of the units in
            :data:`UNIT_SECONDS`, or a window of no length.
    """
    words = " ".join(text.lower().split())
    parts = list(_PART.finditer(words))
    whole = " ".join(m.group(0) for m in parts) == words
    known = all(m.group(2) in UNIT_SECONDS for m in parts)
    if not (parts and whole and known):
        raise ConfigError(
            key,
            f"{text!r} is not a window: give whole numbers of "
            f"{', '.join(f'{u}s' for u in UNIT_SECONDS)}, e.g. '15 minutes' or '1 hour 30 "
            "minutes'",
        )
    # Each number as text first: int() refuses one of over 4,300 digits.
    if any(len(m.group(1).lstrip("0")) > 9 for m in parts):
        seconds = float("inf")
    else:
        seconds = sum(int(m.group(1)) * UNIT_SECONDS[m.group(2)] for m in parts)
    if seconds <= 0:
        raise ConfigError(key, f"{text!r} is a window of no length: give a longer one")
    if seconds > MAX_WINDOW_SECONDS:
        shown = text if len(text) <= 40 else f"{text[:40]}..."
        raise ConfigError(key, f"{shown!r} is longer than 366 days: give a shorter window")
    return seconds
