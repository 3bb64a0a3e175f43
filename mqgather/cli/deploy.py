"""Rollout commands: ``mqgather deploy status | promote | drain-check`` and ``replay``."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from mqgather.cli.options import deployment_option, finite, run
from mqgather.runtime.deployments import DeploymentInfo


def _show(info: DeploymentInfo) -> None:
    table = Table(title=f"worker deployment {info.name}")
    for column in ("build id", "status", "open gathers", "created"):
        table.add_column(column, justify="right" if column == "open gathers" else "left")
    for v in info.versions:
        status = v.status
        if v.ramp_percent is not None:
            status = f"ramping {v.ramp_percent:g} %"
        table.add_row(v.build_id, status, str(v.open_gathers), v.created)
    table.add_row("(unversioned)", "", str(info.unversioned_open), "")
    Console().print(table)
    current = info.current or "none (new gathers go to unversioned workers)"
    line = f"current: {current}"
    if info.ramping:
        line += f"; ramping: {info.ramping} takes {info.ramp_percent:g} % of new gathers"
    click.echo(line)


@click.group()
def deploy() -> None:
    """Roll out new gather code: versions of a worker deployment.

    \b
    1. start the new workers: mqgather worker --deployment NAME --build-id NEW
    2. mqgather replay EXPORTED-HISTORIES   (last week's gathers replay on the new code)
    3. mqgather deploy promote NEW --ramp 10, then mqgather deploy promote NEW
    4. mqgather deploy drain-check OLD      (exit 0: no gather left on OLD; stop it)
    """


@deploy.command()
@deployment_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
def status(deployment: str, as_json: bool) -> None:
    """Versions of the deployment, which is current or ramping, open gathers on each."""
    from mqgather.runtime.deployments import describe
    from mqgather.runtime.temporal import connect

    async def main(_: asyncio.Event) -> None:
        info = await describe(await connect(), deployment)
        if as_json:
            click.echo(json.dumps(info.as_dict()))
        else:
            _show(info)

    run(main)


@deploy.command()
@deployment_option
@click.argument("build_id")
@click.option(
    "--ramp",
    type=click.FloatRange(0, 100),
    callback=finite,
    default=None,
    metavar="PERCENT",
    help="Send only this share (0-100) of new gathers to BUILD_ID; without it, all of them.",
)
def promote(deployment: str, build_id: str, ramp: float | None) -> None:
    """Make BUILD_ID the version new gathers start on (or ramp it with --ramp).

    Open gathers are not moved: each finishes on the version it started on.
    """
    from mqgather.runtime.deployments import promote as do_promote
    from mqgather.runtime.temporal import connect

    async def main(_: asyncio.Event) -> None:
        info = await do_promote(await connect(), deployment, build_id, ramp)
        what = "current" if ramp is None else f"ramping at {ramp:g} %"
        click.echo(f"{build_id} of {deployment} is now {what}")
        _show(info)

    run(main)


@deploy.command("drain-check")
@deployment_option
@click.argument("build_id")
def drain_check(deployment: str, build_id: str) -> None:
    """Exit 0 when no open gather is pinned to BUILD_ID any more (it can be stopped),
    1 while some are (they are counted)."""
    from mqgather.runtime.deployments import describe
    from mqgather.runtime.temporal import connect

    async def main(_: asyncio.Event) -> int:
        info = await describe(await connect(), deployment)
        version = next((v for v in info.versions if v.build_id == build_id), None)
        if version is None:
            known = ", ".join(v.build_id for v in info.versions) or "none"
            raise click.ClickException(
                f"version {build_id!r} of deployment {deployment!r} is unknown (known: {known})"
            )
        if version.status in ("current", "ramping"):
            click.echo(f"{build_id} is {version.status}: new gathers still start on it")
            return 1
        if version.open_gathers:
            click.echo(f"{build_id}: {version.open_gathers} open gather(s) still pinned; wait")
            return 1
        click.echo(f"{build_id}: drained, no open gather is pinned to it; it can be stopped")
        return 0

    sys.exit(run(main))


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON summary on the last line.")
def replay(paths: tuple[Path, ...], as_json: bool) -> None:
    """Replay exported gather and collector histories against this code before promoting it.

    PATHS are files or folders: `mqgather export` output (NDJSON), `temporal workflow
    show -o json` files, Temporal Cloud export files. Prints how many replayed cleanly
    and, for each that did not, the workflow and the event where the code parted from the
    history. Exit 0 when all replayed cleanly, 1 otherwise.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from analytics.replay import replay_paths

    console = Console(stderr=True)

    async def main() -> int:
        with Progress(
            TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), console=console,
            transient=True,
        ) as progress:  # fmt: skip
            bar = progress.add_task("replay", total=None)
            report = await replay_paths(
                list(paths),
                on_total=lambda n: progress.update(bar, total=n),
                on_progress=lambda n: progress.update(bar, completed=n),
            )
        for failure in report.failures:
            click.echo(f"FAILED {failure.describe()}")
        for path, reason in report.unreadable.items():
            click.echo(f"SKIPPED {path}: {reason}")
        click.echo(report.summary())
        if as_json:
            click.echo(json.dumps(report.as_dict()))
        return 0 if report.ok else 1

    sys.exit(asyncio.run(main()))


COMMANDS = [replay]
