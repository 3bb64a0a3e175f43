"""Trend windows: picked from the data's span, or given by hand and checked first."""

from __future__ import annotations

import pytest

from analytics.windows import pick_window, window_seconds
from mqgather.errors import ConfigError
from tests.mqgather.cli.test_queues import run


@pytest.mark.parametrize(
    ("span", "window"),
    [(0, "1 minute"), (40 * 60, "1 minute"), (3 * 3600, "5 minutes"), (30 * 3600, "1 hour"),
     (5 * 86400, "6 hours"), (400 * 86400, "1 week")],
)  # fmt: skip
def test_the_window_follows_the_span(span, window):
    assert pick_window(span) == window


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15 minutes", 900), ("1 minute", 60), ("1 hour 30 minutes", 5400), ("2 Hours", 7200),
     ("1 week  2 days", 9 * 86400), ("250 milliseconds", 0.25), (" 10 seconds ", 10)],
)  # fmt: skip
def test_a_window_spark_takes_is_measured(text, seconds):
    assert window_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "why"),
    [("15 parsecs", "is not a window"), ("abc", "is not a window"), ("", "is not a window"),
     ("-5 minutes", "is not a window"), ("1.5 hours", "is not a window"),
     ("15", "is not a window"), ("1 month", "is not a window"),
     ("15 minutes ago", "is not a window"),
     ("0 minutes", "of no length"), ("0 seconds 0 days", "of no length"),
     # Another script's digits, which Spark does not read; windows past the calendar.
     ("\u0661\u0665 minutes", "is not a window"), ("367 days", "longer than 366 days"),
     ("1000000 weeks", "longer than 366 days"), ("9" * 5000 + " days", "longer than 366")],
)  # fmt: skip
def test_a_window_spark_cannot_take_is_refused_naming_the_option(text, why):
    with pytest.raises(ConfigError, match=why) as raised:
        window_seconds(text)
    assert raised.value.key == "--window"
    if why == "is not a window":  # it says what a window looks like
        assert "e.g. '15 minutes' or '1 hour 30 minutes'" in raised.value.reason


def test_the_command_refuses_a_bad_window_before_reading_anything(tmp_path):
    (tmp_path / "in").mkdir()
    out = tmp_path / "out"
    done = run(["analyze", str(tmp_path / "in"), "--out", str(out), "--window", "15 parsecs"],
               tmp_path)  # fmt: skip
    assert done.returncode == 2
    assert b"Invalid value for '--window': '15 parsecs' is not a window" in done.stderr
    assert not out.exists()  # no Spark session, no pass over the files


def test_the_job_refuses_a_bad_window_before_reading_anything(spark, tmp_path):
    from analytics.job import analyze

    out = tmp_path / "out"
    with pytest.raises(ConfigError, match="'1 fortnight' is not a window"):
        analyze(spark, [tmp_path], out, window="1 fortnight")
    assert not out.exists()
