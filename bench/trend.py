"""How the headline ratios moved from one `make bench` run to the next.

Reads every table `make bench` wrote (``bench/results/<date>.md``) and prints one row per
headline figure with its target, one column per run: the median over that run's rounds
and their range, marked where the run met the target. The run-by-run tables of the
README and of docs/performance.md are this output; ``--readme`` writes them there,
``--check`` fails when one is not what the results give.

    python -m bench.trend [--results DIR] [--last N] [--readme [PAGE] | --check [PAGE]]
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench.figures import command_line

#: The columns ``bench.suite.table`` writes, in order.
COLUMNS = ("benchmark", "figure", "runs", "value", "against", "floor", "ratio", "target", "met")
#: Where the results are, and the pages whose run-by-run table comes from them.
RESULTS = Path("bench/results")
PAGES = (Path("README.md"), Path("docs/performance.md"))
#: The lines between which a page holds the table.
BEGIN = "<!-- bench.trend: python -m bench.trend --readme writes this table -->"
END = "<!-- /bench.trend -->"
#: Runs the pages show.
PAGE_RUNS = 5

_HEAD = re.compile(r"^Commit (?P<commit>\S+), (?P<time>\d\d:\d\d) UTC; (?P<cores>\d+) cores")
_SPREAD = re.compile(r"^(?P<median>[-\d.]+)(?: \((?P<low>[-\d.]+) to (?P<high>[-\d.]+)\))?")


class BadResults(ValueError):
    """A results file that is not a table `make bench` wrote; the message names it."""


@dataclass(frozen=True)
class Row:
    """One line of a run's table, its cells as written."""

    bench: str
    figure: str
    runs: int
    value: str
    against: str
    floor: str
    ratio: str
    target: str
    met: str


@dataclass
class Run:
    """One `make bench` run: its day, commit, hour, cores and table."""

    day: str
    commit: str
    time: str
    cores: int
    rows: list[Row] = field(default_factory=list)

    def find(self, bench: str, figure: str, against: str) -> Row | None:
        """The row of ``figure`` against ``against`` ("" for a figure with no floor)."""
        for row in self.rows:
            if (row.bench, row.figure, row.against) == (bench, figure, against):
                return row
        return None


@dataclass(frozen=True)
class Headline:
    """A figure the README follows from run to run: its ratio, or its value where it
    has no floor, or (``floor``) the floor itself, which shows the machine's speed."""

    label: str
    bench: str
    figure: str
    against: str = ""
    floor: bool = False


HEADLINES: tuple[Headline, ...] = (
    Headline("the machine: the ceiling, 0 open", "gather", "end to end gathers/s, 0 open",
             "ceiling", floor=True),
    Headline("worker CPU / the floor's, 0 open", "gather",
             "worker CPU ms per gather at the floor's rate, 0 open", "floor's worker"),
    Headline("worker CPU / the floor's, 10,000 open", "gather",
             "worker CPU ms per gather at the floor's rate, 10,000 open", "floor's worker"),
    Headline("signal → done p99 / the floor's, 0 open", "gather",
             "signal -> done p99 ms, 0 open", "floor"),
    Headline("signal → done p99 / the floor's, 10,000 open", "gather",
             "signal -> done p99 ms, 10,000 open", "floor"),
    Headline("end to end / the ceiling, 0 open", "gather", "end to end gathers/s, 0 open",
             "ceiling"),
    Headline("end to end / the ceiling, 10,000 open", "gather",
             "end to end gathers/s, 10,000 open", "ceiling"),
    Headline("bridge CPU per gather, 0 open", "gather", "bridge CPU ms per gather, 0 open"),
    Headline("bridge CPU per gather, 10,000 open", "gather",
             "bridge CPU ms per gather, 10,000 open"),
    Headline("bridge CPU / its own floor", "bridge", "bridge CPU ms per gather",
             "floor: MQ gets and signal-with-start alone"),
    Headline("analytics at 100,000 gathers / read and count", "analytics",
             "facts + trends, 100,000 gathers", "Spark read and count"),
    Headline("analytics time growth for 10 × the gathers", "analytics",
             "time growth for 10x the gathers"),
)  # fmt: skip


def read_results(path: Path) -> Run:
    """The run a results file records.

    Raises:
        BadResults: the file lacks the commit line or the table, or a row is not whole.
    """
    lines = path.read_text().splitlines()
    head = next((m for line in lines if (m := _HEAD.match(line))), None)
    if head is None:
        raise BadResults(f"{path}: no 'Commit …, HH:MM UTC; N cores' line: not a make bench table")
    run = Run(path.stem, head["commit"], head["time"], int(head["cores"]))
    table = [line for line in lines if line.startswith("|")]
    if not table or _cells(table[0]) != list(COLUMNS):
        raise BadResults(f"{path}: its table's columns are not {', '.join(COLUMNS)}")
    for number, line in enumerate(table[2:], 3):
        cells = _cells(line)
        if len(cells) != len(COLUMNS) or not cells[2].isdigit():
            raise BadResults(f"{path}: table row {number} has not the {len(COLUMNS)} columns")
        bench, figure, runs, *rest = cells
        run.rows.append(Row(bench, figure, int(runs), *rest))
    return run


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().removeprefix("|").removesuffix("|").split("|")]


def runs_in(directory: Path) -> list[Run]:
    """Every run whose table is in ``directory``, oldest first."""
    return [read_results(path) for path in sorted(directory.glob("*.md"))]


def cell(row: Row | None, headline: Headline) -> str:
    """The headline's figure in one run: median (low–high), ✓ or ✗ against its target."""
    if row is None:
        return "—"
    text = row.floor if headline.floor else row.ratio if headline.against else row.value
    shown = _SPREAD.match(text)
    if shown is None:
        return "—"
    ratio = headline.against and not headline.floor
    unit = "" if ratio else text[shown.end() :].strip().replace("x", "×")
    figure = shown["median"]
    if shown["low"] is not None:
        figure += f" ({shown['low']}–{shown['high']})"
    if unit:
        figure += f" {unit}"
    mark = "" if headline.floor else {"yes": " ✓", "no": " ✗"}.get(row.met, "")
    return figure + mark


def _target(runs: list[Run], headline: Headline) -> str:
    if headline.floor:
        return ""  # the machine's speed is shown, not judged
    for run in reversed(runs):
        row = run.find(headline.bench, headline.figure, headline.against)
        if row is not None and row.target:
            return row.target
    return ""


def trend_table(runs: list[Run], headlines: tuple[Headline, ...] = HEADLINES) -> list[str]:
    """The Markdown table: a row per headline, its target, then a column per run."""
    header = ["figure", "target", *(f"{run.day} ({run.commit})" for run in runs)]
    lines = [
        "| " + " | ".join(header) + " |",
        "|---|---:|" + "---:|" * len(runs),
    ]
    for headline in headlines:
        cells = [cell(run.find(headline.bench, headline.figure, headline.against), headline)
                 for run in runs]  # fmt: skip
        lines.append(f"| {headline.label} | {_target(runs, headline)} | {' | '.join(cells)} |")
    return lines


def in_page(text: str, table: list[str], name: str = "the page") -> str:
    """``text`` with the lines between :data:`BEGIN` and :data:`END` replaced by ``table``.

    Raises:
        BadResults: the page lacks either marker line.
    """
    lines = text.splitlines()
    try:
        start, stop = lines.index(BEGIN), lines.index(END)
    except ValueError:
        raise BadResults(f"{name} has no '{BEGIN}' … '{END}' lines to hold the table") from None
    if stop < start:
        raise BadResults(f"{name}'s '{END}' comes before its '{BEGIN}'")
    return "\n".join([*lines[: start + 1], *table, *lines[stop:]]) + "\n"


def update_pages(
    results: Path, pages: tuple[Path, ...] = PAGES, *, write: bool = True
) -> list[Path]:
    """The pages whose run-by-run table is not the latest :data:`PAGE_RUNS` runs in
    ``results``; with ``write``, each is brought up to date.

    Raises:
        BadResults: a results file or a page is not what it should be.
    """
    table = trend_table(runs_in(results)[-PAGE_RUNS:])
    stale = []
    for page in pages:
        text = page.read_text()
        wanted = in_page(text, table, str(page))
        if wanted != text:
            stale.append(page)
            if write:
                page.write_text(wanted)
    return stale


def main(argv: list[str] | None = None) -> int:
    """Print the table, or write it into the pages, or check theirs (1 when one is stale)."""
    parser = command_line(__doc__)
    named = " and ".join(str(p) for p in PAGES)
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help=f"the folder of make bench tables (default {RESULTS})",
    )
    parser.add_argument(
        "--last",
        type=int,
        default=None,
        help=f"only the latest N runs printed (default: all; a page shows {PAGE_RUNS})",
    )
    parser.add_argument(
        "--readme",
        type=Path,
        nargs="?",
        const=PAGES,
        default=None,
        help=f"write the table into this page (default {named})",
    )
    parser.add_argument(
        "--check",
        type=Path,
        nargs="?",
        const=PAGES,
        default=None,
        help="exit 1 when this page's table (default: each of "
        f"{named}) is not what the results give",
    )
    ns = parser.parse_args(argv)
    runs = runs_in(ns.results)
    if not runs:
        print(f"no make bench tables in {ns.results}: run make bench first", file=sys.stderr)
        return 1
    chosen = ns.readme if ns.readme is not None else ns.check
    if chosen is None:
        last = ns.last or len(runs)
        print("\n".join(trend_table(runs[-last:])))
        print(f"\n{len(runs[-last:])} of {len(runs)} runs in {ns.results}; ✓ met, ✗ not met")
        return 0
    pages: tuple[Path, ...] = chosen if isinstance(chosen, tuple) else (chosen,)
    stale = update_pages(ns.results, pages, write=ns.check is None)
    if ns.check is None:
        for page in stale:
            print(f"{page}: the table of the latest {PAGE_RUNS} runs written")
        return 0
    if stale:
        names = ", ".join(map(str, stale))
        print(f"the run-by-run table of {names} is not what {ns.results} gives: run "
              "python -m bench.trend --readme", file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BadResults as exc:
        print(f"bench.trend: {exc}", file=sys.stderr)
        sys.exit(2)
