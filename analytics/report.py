"""Charts (PNG) and one self-contained HTML report, drawn from the same tables as the CSVs."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import pandas as pd


def _time_axis(ax: Any, times: pd.Series) -> None:
    """Readable dates; a lone window gets room on both sides instead of a span of years."""
    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    stamps = pd.to_datetime(times).drop_duplicates()
    if len(stamps) == 1:
        pad = pd.Timedelta(minutes=30)
        ax.set_xlim(stamps.iloc[0] - pad, stamps.iloc[0] + pad)


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def charts(trends: pd.DataFrame, legs: pd.DataFrame, out: Path) -> list[Path]:
    """timeout_rate.png, latency.png and leg_latency.png under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    made = []
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for name, rows in trends.groupby("aggregate"):
        ax.plot(rows["window_start"], 100 * rows["timeout_rate"], marker="o", label=str(name))
    _time_axis(ax, trends["window_start"])
    ax.set_title("Timeout rate per window")
    ax.set_ylabel("% of gathers timed out")
    ax.legend(loc="best")
    made.append(_save(fig, out / "timeout_rate.png"))

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for name, rows in trends.groupby("aggregate"):
        for column, style in (("p50_ms", "-"), ("p95_ms", "--"), ("p99_ms", ":")):
            ax.plot(rows["window_start"], rows[column], style, marker="o",
                    label=f"{name} {column[:3]}")  # fmt: skip
    _time_axis(ax, trends["window_start"])
    ax.set_title("Completion latency of completed gathers")
    ax.set_ylabel("ms")
    ax.legend(loc="best", fontsize="small")
    made.append(_save(fig, out / "latency.png"))

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for (name, leg), rows in legs.groupby(["aggregate", "leg"]):
        ax.plot(rows["window_start"], rows["p95_ms"], marker="o", label=f"{name} {leg}")
    _time_axis(ax, legs["window_start"])
    ax.set_title("Per-leg p95 arrival latency (ms after the gather started)")
    ax.set_ylabel("ms")
    ax.legend(loc="best", fontsize="small")
    made.append(_save(fig, out / "leg_latency.png"))
    return made


def _table(frame: pd.DataFrame, table_id: str) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for record in frame.itertuples(index=False):
        cells = "".join(f"<td>{html.escape(_cell(v))}</td>" for v in record)
        rows.append(f"<tr>{cells}</tr>")
    body = "".join(rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def html_report(
    summary: dict[str, Any],
    trends: pd.DataFrame,
    legs: pd.DataFrame,
    images: list[Path],
    path: Path,
) -> Path:
    """One HTML file with the summary, the charts (embedded) and both tables."""
    pictures = "".join(
        f'<figure><img alt="{p.stem}" src="data:image/png;base64,'
        f'{base64.b64encode(p.read_bytes()).decode()}"/></figure>'
        for p in images
    )
    facts = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(_cell(v))}</td></tr>"
        for k, v in summary.items()
        if not isinstance(v, dict | list)
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mqgather analytics</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem; color: #222; }}
table {{ border-collapse: collapse; margin: 1rem 0; font-size: 0.9rem; }}
th, td {{ border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: right; }}
th {{ background: #f3f3f3; }}
img {{ max-width: 100%; }}
</style></head><body>
<h1>mqgather: gather timeouts and latency</h1>
<table id="summary">{facts}</table>
{pictures}
<h2>Trends per window</h2>
{_table(trends, "trends")}
<h2>Per-leg arrival latency</h2>
{_table(legs, "leg_trends")}
</body></html>
"""
    path.write_text(page)
    return path
