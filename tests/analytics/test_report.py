"""The report's tables and the CSV files written beside them."""

from __future__ import annotations

import csv
import re

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import pandas as pd

from analytics.report import _table, _time_axis, write_csv


def test_a_window_at_midnight_keeps_its_time_in_the_csv_and_the_table(tmp_path):
    # pandas writes a column whose times all fall at midnight as dates alone; a run whose
    # hourly windows all start at 00:00 then showed "2026-11-27" in trends.csv.
    frame = pd.DataFrame({"window_start": pd.to_datetime(["2026-11-27 00:00:00"]), "gathers": [6]})
    path = tmp_path / "trends.csv"
    write_csv(frame, path)
    with path.open() as f:
        rows = list(csv.reader(f))
    assert rows == [["window_start", "gathers"], ["2026-11-27 00:00:00", "6"]]
    cells = re.findall(r"<td>([^<]*)</td>", _table(frame, "trends"))
    assert cells == rows[1]


def test_a_window_within_the_day_is_written_alike(tmp_path):
    frame = pd.DataFrame({"window_start": pd.to_datetime(["2026-11-27 13:00:00"])})
    path = tmp_path / "t.csv"
    write_csv(frame, path)
    assert path.read_text().splitlines()[1] == "2026-11-27 13:00:00"
    assert re.findall(r"<td>([^<]*)</td>", _table(frame, "t")) == ["2026-11-27 13:00:00"]


def test_a_lone_window_is_drawn_with_half_an_hour_on_each_side():
    """Not a span of years around one point: matplotlib's own limits for one date."""
    fig, ax = plt.subplots()
    try:
        times = pd.Series(pd.to_datetime(["2026-11-27 13:00:00", "2026-11-27 13:00:00"]))
        ax.plot(times, [1, 2])
        _time_axis(ax, times)
        left, right = (mdates.num2date(x).replace(tzinfo=None) for x in ax.get_xlim())
    finally:
        plt.close(fig)
    assert (str(left), str(right)) == ("2026-11-27 12:30:00", "2026-11-27 13:30:00")
