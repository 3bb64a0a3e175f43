"""Charts (PNG) and one self-contained HTML report, drawn from the same tables as the CSVs.

The report has a section per aggregate: its outcomes, latencies, most-missed leg, its
trend charts and the timeout advisor. The CSV tables follow at the end, as written.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import pandas as pd

from analytics.advisor import TARGETS, WHOLE_GATHER, leg_deadlines, target_column
from analytics.transforms import OUTCOMES


@dataclass
class ReportData:
    """What the report shows, as the job computed it."""

    summary: dict[str, Any]
    aggregates: pd.DataFrame
    outcomes: pd.DataFrame
    trends: pd.DataFrame
    legs: pd.DataFrame
    advice: pd.DataFrame
    #: Per collector and destination, over all the data (empty without collectors).
    destinations: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: The same per window.
    batch_trends: pd.DataFrame = field(default_factory=pd.DataFrame)


def _time_axis(ax: Any, times: pd.Series) -> None:
    """Readable dates; a lone window gets room on both sides instead of a span of years."""
    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    stamps = pd.to_datetime(times).drop_duplicates()
    if len(stamps) == 1:
        # The standard library's: pandas builds this one from keywords through a NumPy
        # timedelta without a unit, which NumPy is retiring.
        pad = timedelta(minutes=30)
        ax.set_xlim(stamps.iloc[0] - pad, stamps.iloc[0] + pad)


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _file_stem(aggregate: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", aggregate) or "_"


def charts(trends: pd.DataFrame, legs: pd.DataFrame, out: Path) -> dict[str, list[Path]]:
    """Per aggregate, ``<aggregate>-trends.png`` (timeout rate in %, p50/p95 latency, and
    p99 on its own axis so an outlier does not flatten the others) and
    ``<aggregate>-legs.png`` (p95 arrival latency per leg), under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    made: dict[str, list[Path]] = {}
    for name, rows in trends.groupby("aggregate"):
        aggregate = str(name)
        fig, (rate_ax, lat_ax, p99_ax) = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True)
        marker = "o" if len(rows) < 60 else None
        rate_ax.plot(rows["window_start"], 100 * rows["timeout_rate"], marker=marker)
        rate_ax.set_title(f"{aggregate}: timeout rate per window")
        rate_ax.set_ylabel("% timed out")
        rate_ax.set_ylim(bottom=0)
        for column, style in (("p50_ms", "-"), ("p95_ms", "--")):
            lat_ax.plot(rows["window_start"], rows[column], style, marker=marker,
                        label=column[:3])  # fmt: skip
        lat_ax.set_title("completion latency of completed gathers")
        lat_ax.set_ylabel("ms")
        lat_ax.set_ylim(bottom=0)
        lat_ax.legend(loc="best", fontsize="small")
        p99_ax.plot(rows["window_start"], rows["p99_ms"], ":", marker=marker, color="tab:red")
        p99_ax.set_title("p99 completion latency (own axis)")
        p99_ax.set_ylabel("ms")
        p99_ax.set_ylim(bottom=0)
        _time_axis(p99_ax, rows["window_start"])
        stem = _file_stem(aggregate)
        made[aggregate] = [_save(fig, out / f"{stem}-trends.png")]
        leg_rows = legs[legs["aggregate"] == name]
        if not leg_rows.empty:
            fig, ax = plt.subplots(figsize=(8, 3.2))
            for leg, per_leg in leg_rows.groupby("leg"):
                ax.plot(per_leg["window_start"], per_leg["p95_ms"], marker=marker, label=str(leg))
            _time_axis(ax, leg_rows["window_start"])
            ax.set_title(f"{aggregate}: p95 arrival latency per leg (ms after the start)")
            ax.set_ylabel("ms")
            ax.set_ylim(bottom=0)
            ax.legend(loc="best", fontsize="small")
            made[aggregate].append(_save(fig, out / f"{stem}-legs.png"))
    return made


def batch_charts(batch_trends: pd.DataFrame, out: Path) -> dict[str, list[Path]]:
    """Per collector, ``collector-<name>.png``: batches per window and the p95 wait of a
    batch's first message, one line per destination, under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    made: dict[str, list[Path]] = {}
    for name, rows in batch_trends.groupby("collector"):
        collector = str(name)
        fig, (count_ax, wait_ax) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
        marker = "o" if len(rows) < 60 else None
        for destination, per in rows.groupby("destination"):
            count_ax.plot(per["window_start"], per["batches"], marker=marker,
                          label=str(destination))  # fmt: skip
            wait_ax.plot(per["window_start"], per["wait_p95_ms"], marker=marker,
                         label=str(destination))  # fmt: skip
        count_ax.set_title(f"collector {collector}: batches PUT per window")
        count_ax.set_ylabel("batches")
        count_ax.set_ylim(bottom=0)
        count_ax.legend(loc="best", fontsize="small")
        wait_ax.set_title("p95 wait of a batch's first message (arrival to PUT)")
        wait_ax.set_ylabel("ms")
        wait_ax.set_ylim(bottom=0)
        _time_axis(wait_ax, rows["window_start"])
        made[collector] = [_save(fig, out / f"collector-{_file_stem(collector)}.png")]
    return made


def _collector_section(collector: str, data: ReportData, images: list[Path]) -> str:
    rows = data.destinations[data.destinations["collector"] == collector]
    table = _rows(
        f"destinations-{collector}",
        ("destination", "batches", "messages", "failed", "per batch",
         "by count / bytes / delay / release", "wait p50 / p95 / p99", "longest wait"),
        [
            (str(r["destination"]), str(int(r["batches"])), str(int(r["messages"])),
             str(int(r["failed"])), f"{r['messages_per_batch']:.1f}",
             " / ".join(str(int(r[f"by_{k}"])) for k in ("count", "bytes", "delay", "released")),
             " / ".join(millis(r[k]) for k in ("wait_p50_ms", "wait_p95_ms", "wait_p99_ms")),
             millis(r["max_wait_ms"]))
            for r in rows.to_dict("records")
        ],
    )  # fmt: skip
    return (
        f'<section id="collector-{html.escape(collector)}"><h2>Collector '
        f"{html.escape(collector)}</h2><p>Batches per destination, why each closed, and how "
        "long a batch's first message waited from its arrival at the bridge to the PUT.</p>"
        f"{table}{''.join(_image(p) for p in images)}</section>"
    )


#: How the tables and their CSV files write a time (a window's start): always with the
#: time of day, which pandas leaves out of a CSV column whose times all fall at midnight.
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """Write ``frame`` as the CSV file the report's table of it shows, times included."""
    frame.to_csv(path, index=False, date_format=TIME_FORMAT)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, pd.Timestamp):
        return value.strftime(TIME_FORMAT)
    return str(value)


def _rows(table_id: str, header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    """A table of text cells."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    table = f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
    return f'<table id="{html.escape(table_id)}">{table}</table>'


def _table(frame: pd.DataFrame, table_id: str) -> str:
    """A table of raw values, as in the CSV files."""
    cells = ([_cell(v) for v in record] for record in frame.itertuples(index=False))
    return _rows(table_id, (str(c) for c in frame.columns), cells)


def percent(part: float, whole: float) -> str:
    """``part`` of ``whole`` in percent, with a precision that shows small rates."""
    if not whole:
        return "-"
    value = 100.0 * part / whole
    return f"{value:.2f} %" if value < 10 else f"{value:.1f} %"


def millis(value: Any) -> str:
    """A latency in ms, or a dash when there is none."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "-"
    return f"{float(value):,.0f} ms"


def when(value: Any) -> str:
    """A timestamp to the second, in UTC."""
    if value is None or pd.isna(value):
        return "-"
    return f"{pd.Timestamp(value):%Y-%m-%d %H:%M:%S} UTC"


def _ordered_outcomes(present: Iterable[str]) -> list[str]:
    extra = sorted(set(present) - set(OUTCOMES))
    return [*OUTCOMES, *extra]


def _outcome_table(aggregate: str, counts: dict[str, int], gathers: int) -> str:
    rows = [
        (outcome, str(counts.get(outcome, 0)), percent(counts.get(outcome, 0), gathers))
        for outcome in _ordered_outcomes(counts)
    ]
    return _rows(f"outcomes-{aggregate}", ("outcome", "gathers", "share"), rows)


def _advice_table(aggregate: str, advice: pd.DataFrame) -> str:
    header = [
        "leg",
        "gathers",
        "configured timeout",
        "timeout rate at it",
        *(f"timeout for ≤ {100 * r:g} %" for r in TARGETS),
    ]
    rows = []
    for rec in advice.to_dict("records"):
        configured = rec["configured_ms"]
        advised = [
            millis(rec[target_column(r)])
            if not pd.isna(rec[target_column(r)])
            else f"> {millis(configured)} (not observed)"
            for r in TARGETS
        ]
        rows.append(
            [
                "whole gather" if rec["leg"] == WHOLE_GATHER else str(rec["leg"]),
                str(rec["gathers"]),
                millis(configured),
                percent(rec["rate_at_configured"], 1.0),
                *advised,
            ]
        )
    return _rows(f"advice-{aggregate}", header, rows)


def _leg_deadlines(advice: pd.DataFrame) -> str:
    """The advice to give a slow leg a deadline of its own, if any."""
    return "".join(
        f'<p class="advice">{html.escape(found.text())}.</p>' for found in leg_deadlines(advice)
    )


def _image(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return (
        f'<figure><img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}"/></figure>'
    )


def _section(aggregate: str, data: ReportData, images: list[Path]) -> str:
    facts = data.aggregates[data.aggregates["aggregate"] == aggregate].iloc[0]
    gathers = int(facts["gathers"])
    outcomes = data.outcomes[data.outcomes["aggregate"] == aggregate]
    counts = {str(r["outcome"]): int(r["count"]) for r in outcomes.to_dict("records")}
    missed = str(facts["most_missed_leg"] or "")
    missed_text = (
        f"{missed}: missing in {int(facts['most_missed_count'])} gathers "
        f"({percent(int(facts['most_missed_count']), gathers)})"
        if missed
        else "none (no leg was missing)"
    )
    key_facts = _rows(
        f"facts-{aggregate}",
        ("", ""),
        [
            ("gathers", str(gathers)),
            ("from", when(facts["first_start"])),
            ("to", when(facts["last_end"])),
            ("completion latency p50 / p95 / p99",
             " / ".join(millis(facts[k]) for k in ("p50_ms", "p95_ms", "p99_ms"))),
            ("late / duplicate / unknown replies",
             f"{int(facts['late'])} / {int(facts['duplicates'])} / {int(facts['unknown'])}"),
            ("most-missed leg", missed_text),
        ],
    )  # fmt: skip
    advice = data.advice[data.advice["aggregate"] == aggregate]
    advisor = (
        "<h3>Timeout advisor</h3>"
        "<p>The timeout that would have kept the timeout rate under each target, on the "
        "arrival latencies observed (from the gather's start to the leg's first arrival), "
        "beside the configured one. Arrivals after the configured timeout are not observed, "
        "so a target that needs more is shown as above it. Released and cancelled gathers "
        "are not counted.</p>" + _advice_table(aggregate, advice) + _leg_deadlines(advice)
        if not advice.empty
        else "<p>No completed or timed-out gathers to advise on.</p>"
    )
    return (
        f'<section id="aggregate-{html.escape(aggregate)}"><h2>Aggregate '
        f"{html.escape(aggregate)}</h2>"
        f"{key_facts}<h3>Outcomes</h3>{_outcome_table(aggregate, counts, gathers)}"
        f"{''.join(_image(p) for p in images)}{advisor}</section>"
    )


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; max-width: 60rem; }
table { border-collapse: collapse; margin: 0.75rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: right; }
th { background: #f3f3f3; }
td:first-child { text-align: left; }
section { border-top: 2px solid #888; margin-top: 2rem; }
img { max-width: 100%; }
.note { color: #555; font-size: 0.9rem; }
"""


def html_report(data: ReportData, images: dict[str, list[Path]], path: Path) -> Path:
    """One HTML file that works offline: the data's range, a section per aggregate and
    per collector, the CSV tables, and what the run read."""
    s = data.summary
    total = int(s["gathers"])
    overview = _rows(
        "summary",
        ("", ""),
        [
            ("data from", when(s.get("first_start"))),
            ("data to", when(s.get("last_end"))),
            ("trend window", f"{s['window']}" + (" (picked from the data's span)"
                                                 if s.get("window_picked") else "")),
            ("gathers", str(total)),
            *((outcome.lower(), f"{n} ({percent(n, total)})")
              for outcome, n in s["outcomes"].items()),
            *((("collector batches", f"{s['batches']} of {s['batched_messages']} messages"),)
              if s.get("batches") else ()),
        ],
    )  # fmt: skip
    sections = "".join(
        _section(str(name), data, images.get(str(name), []))
        for name in data.aggregates["aggregate"]
    )
    if not data.destinations.empty:
        sections += "".join(
            _collector_section(str(name), data, images.get(f"collector:{name}", []))
            for name in data.destinations["collector"].drop_duplicates()
        )
        batch_tables = "<h3>Collector batches per window</h3>" + _table(
            data.batch_trends, "batch_trends"
        )
    else:
        batch_tables = ""
    run = _rows(
        "run",
        ("", ""),
        [
            ("history events read", str(s["events"])),
            (
                "files skipped (corrupt, truncated, or a value that cannot be read)",
                str(s["skipped_files"]),
            ),
            (
                "collector batches left out (a value that cannot be read)",
                str(s.get("unreadable_batches", 0)),
            ),
            ("duplicate histories dropped", str(s["duplicate_histories_dropped"])),
            (
                "gathers still running in their files (not counted)",
                str(len(s.get("running_gathers", []))),
            ),
            (
                "runs counted with another run of their gather (read twice, or reset)",
                str(s.get("runs_counted_with_another", 0)),
            ),
            ("job time", f"{s['seconds']} s"),
        ],
    )
    title = f"mqgather: gathers from {when(s.get('first_start'))} to {when(s.get('last_end'))}"
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{_STYLE}</style></head><body>
<h1>mqgather: gather outcomes, timeouts and latency</h1>
{overview}
{sections}
<section id="tables"><h2>The CSV tables</h2>
<p class="note">trends.csv, leg_trends.csv and advice.csv as written (rates as fractions).</p>
<h3>Trends per window</h3>
{_table(data.trends, "trends")}
<h3>Per-leg arrival latency</h3>
{_table(data.legs, "leg_trends")}
<h3>Timeout advice</h3>
{_table(data.advice, "advice")}
{batch_tables}
</section>
<section id="about"><h2>This run</h2>{run}</section>
</body></html>
"""
    path.write_text(page)
    return path
