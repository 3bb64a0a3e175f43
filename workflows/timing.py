"""Deadlines from waits of any length."""

from __future__ import annotations

from datetime import datetime, timedelta


def after(moment: datetime, seconds: float) -> datetime:
    """``moment`` plus ``seconds``. A wait that runs past the calendar's end (infinite, or
    recorded before :mod:`mqgather.limits` bounded it, or sent in a hand-made signal)
    ends with the calendar, where the arithmetic would raise and fail the workflow's
    every task from then on."""
    try:
        return moment + timedelta(seconds=seconds)
    except OverflowError:
        return datetime.max.replace(tzinfo=moment.tzinfo)
