"""Deadlines from waits of any length."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from workflows.timing import after

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_wait_the_calendar_holds_is_added_as_it_is():
    assert after(T0, 30) == T0 + timedelta(seconds=30)
    assert after(T0, 1e9) == T0 + timedelta(seconds=1e9)


@pytest.mark.parametrize("seconds", [1e12, 1e300, float("inf")])
def test_a_wait_past_the_calendar_ends_with_it_instead_of_raising(seconds):
    end = after(T0, seconds)
    assert end == datetime.max.replace(tzinfo=UTC)
    assert end - T0 > timedelta(days=365 * 7000)
