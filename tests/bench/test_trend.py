"""The run-by-run table: every `make bench` table read back, and the README's kept to it."""

from __future__ import annotations

import re
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import suite, trend
from bench.figures import Figure
from bench.suite import results_lines
from bench.trend import HEADLINES, BadResults, Headline, read_results, runs_in, trend_table

ROOT = Path(__file__).parents[2]
RESULTS = ROOT / "bench" / "results"
WORKER = HEADLINES[1]
GROWTH = HEADLINES[-1]


def _row(lines: list[str], label: str) -> list[str]:
    found = next(line for line in lines if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in found.strip("|").split("|")]


def test_a_recorded_run_reads_back_with_its_commit_and_the_ratios_it_states():
    run = read_results(RESULTS / "2026-12-03.md")
    assert (run.day, run.commit, run.time, run.cores) == ("2026-12-03", "461edf3", "20:16", 2)
    lines = trend_table([run])
    assert lines[0] == "| figure | target | 2026-12-03 (461edf3) |"
    assert _row(lines, WORKER.label) == [WORKER.label, "≤ 1.2", "1.53 (1.34–1.66) ✗"]
    assert _row(lines, GROWTH.label) == [GROWTH.label, "≤ 3", "3.08 × ✗"]
    # The machine's speed is shown, never judged.
    assert _row(lines, HEADLINES[0].label)[1:] == ["", "74.5 (70.7–82.9) /s"]
    assert _row(lines, "bridge CPU per gather, 0 open")[2] == "1.82 (1.77–1.85) ms ✗"
    # Every headline names a figure the benchmarks write (a renamed one would show "—").
    missing = [h.label for h in HEADLINES if run.find(h.bench, h.figure, h.against) is None]
    assert not missing


def test_what_the_suite_writes_the_trend_reads_and_a_missing_figure_is_a_dash(tmp_path):
    figures = [
        Figure("gather", WORKER.figure, v, "ms", 5.0, WORKER.against, target=1.2)
        for v in (5.5, 6.5, 5.8)
    ]
    figures.append(Figure("analytics", GROWTH.figure, 2.5, "x", target=3))
    for day, failed in (("2026-12-05", []), ("2026-12-06", ["chaos"])):
        stamp = datetime.fromisoformat(f"{day}T09:30:00").replace(tzinfo=UTC)
        (tmp_path / f"{day}.md").write_text("\n".join(results_lines(stamp, "abc1234", figures,
                                                                    failed)) + "\n")  # fmt: skip
    runs = runs_in(tmp_path)
    assert [r.day for r in runs] == ["2026-12-05", "2026-12-06"]
    lines = trend_table(runs)
    assert _row(lines, WORKER.label)[2:] == ["1.16 (1.10–1.30) ✓"] * 2
    assert _row(lines, GROWTH.label)[2:] == ["2.50 × ✓"] * 2
    assert _row(lines, "bridge CPU / its own floor")[1:] == ["", "—", "—"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("# Benchmarks\n\nno table here\n", "no 'Commit"),
        ("Commit abc, 10:00 UTC; 2 cores.\n\n| a | b |\n|---|---|\n", "columns are not"),
        ("Commit abc, 10:00 UTC; 2 cores.\n\n| " + " | ".join(trend.COLUMNS) + " |\n|-|\n"
         "| gather | worker | 3 | 1 ms |\n", "table row 3"),
    ],
)  # fmt: skip
def test_a_file_that_is_not_a_bench_table_is_named_with_what_it_lacks(tmp_path, text, reason):
    path = tmp_path / "2026-12-05.md"
    path.write_text(text)
    with pytest.raises(BadResults, match=reason) as raised:
        read_results(path)
    assert str(path) in str(raised.value)


@pytest.mark.parametrize("page", trend.PAGES, ids=str)
def test_each_pages_table_is_what_the_results_give(page):
    assert trend.main(["--results", str(RESULTS), "--check", str(ROOT / page)]) == 0


def test_a_stale_readme_fails_the_check_and_is_rewritten(tmp_path, capsys):
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    # A newer run than the README shows.
    newest = sorted(results.glob("*.md"))[-1]
    text = re.sub(r"^Commit \w+", "Commit fedcba9", newest.read_text(), count=1, flags=re.M)
    (results / "2026-12-31.md").write_text(text)
    args = ["--results", str(results)]
    assert trend.main([*args, "--check", str(readme)]) == 1
    assert f"{readme} is not what" in capsys.readouterr().err
    before = readme.read_text()
    assert trend.main([*args, "--readme", str(readme)]) == 0
    after = readme.read_text()
    assert "2026-12-31 (fedcba9)" in after and "2026-12-31" not in before
    # Only the table between the markers changed.
    assert after.split(trend.BEGIN)[0] == before.split(trend.BEGIN)[0]
    assert after.split(trend.END)[1] == before.split(trend.END)[1]
    assert trend.main([*args, "--check", str(readme)]) == 0


def test_a_page_without_the_markers_is_refused(tmp_path):
    with pytest.raises(BadResults, match=r"README\.md has no"):
        trend.in_page("# A README\n", ["| a |"], "README.md")
    with pytest.raises(BadResults, match="comes before"):
        trend.in_page(f"{trend.END}\n{trend.BEGIN}\n", ["| a |"])


def test_a_floor_headline_carries_no_mark():
    headline = Headline("ceiling", "gather", "e2e", "ceiling", floor=True)
    row = trend.Row("gather", "e2e", 3, "50 /s", "ceiling", "60.0 (55.0 to 65.0) /s",
                    "0.83 (0.80 to 0.90)", "≥ 0.9", "no")  # fmt: skip
    assert trend.cell(row, headline) == "60.0 (55.0–65.0) /s"


def _suite_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout's results and pages under ``tmp_path``, and a suite of one benchmark
    that records nothing, run from there."""
    shutil.copytree(RESULTS, tmp_path / "bench" / "results")
    (tmp_path / "docs").mkdir()
    for page in trend.PAGES:
        shutil.copy(ROOT / page, tmp_path / page)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setattr(suite, "BENCHMARKS", (("nothing", ["bench.figures"]),))


def test_a_whole_bench_run_brings_the_pages_tables_up_to_date(tmp_path, monkeypatch):
    _suite_in(tmp_path, monkeypatch)
    monkeypatch.setattr(sys, "argv", ["bench.suite"])
    assert suite.main() == 0
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    for page in trend.PAGES:
        assert f"| {today} (" in (tmp_path / page).read_text(), page
    assert trend.main(["--check"]) == 0


def test_a_part_run_leaves_the_pages_as_they_were(tmp_path, monkeypatch):
    _suite_in(tmp_path, monkeypatch)
    before = {page: (tmp_path / page).read_text() for page in trend.PAGES}
    monkeypatch.setattr(sys, "argv", ["bench.suite", "--only", "nothing"])
    assert suite.main() == 0
    assert {page: (tmp_path / page).read_text() for page in trend.PAGES} == before
