"""The dev stack and the demo: ``mqgather dev | demo | drive``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bridge.mq.admin import setup_queues
from bridge.mq.connect import open_transport
from mqgather.cli.options import (
    RATE,
    aggregate_option,
    config_option,
    fanout_options,
    finite,
    mq_option,
    run,
    share_option,
)
from mqgather.config import AggregateSpec, load_config
from mqgather.constants import STATE_DIR
from mqgather.errors import MQGatherError
from mqgather.runtime.temporal import connect, ensure_search_attributes
from workers.demo.stack import DevStack

if TYPE_CHECKING:
    from workers.demo.driver import RequestPlan

#: How long after a gather's timeout the simulated back ends answer a "late" leg.
LATE_MARGIN_SECONDS = 2.0


@click.command()
@fanout_options
@click.option("--requests", "n", default=100, show_default=True, type=click.IntRange(min=1),
              help="Requests to send.")  # fmt: skip
@click.option("--rate", default=50.0, show_default=True, type=RATE, callback=finite,
              help="Requests per second.")  # fmt: skip
@share_option("--drop-rate", 0.02, "Share of the requests with a leg never answered.")
@share_option("--late-rate", 0.02, "Share with a leg answered after the timeout.")
@share_option(
    "--duplicate-rate", 0.03, "Share with a leg answered twice (the shares add up to at most 1)."
)
@click.option("--seed", default=7, show_default=True,
              help="Picks the requests dropped, late or duplicated.")  # fmt: skip
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Wait for every gather's outcome (and the late replies) and compare it with the plan.",
)
def drive(
    mq: str,
    config_path: str | None,
    task_queue: str,
    name: str,
    n: int,
    rate: float,
    drop_rate: float,
    late_rate: float,
    duplicate_rate: float,
    seed: int,
    wait: bool,
) -> None:
    """Send N requests at a rate with planned drops, late and duplicate replies to a
    running stack (`mqgather dev`), show progress, and end with the outcomes beside the
    plan. Needs back ends that honour the planned fates, as `mqgather dev` runs."""
    from workers.demo.driver import Rates, expected_counts, plan_requests, retrying_legs
    from workers.demo.driver import drive as do_drive
    from workers.demo.harness import counts_for, rerequests_seen

    spec = load_config(config_path).aggregate(name)
    rates = Rates(drop=drop_rate, late=late_rate, duplicate=duplicate_rate)
    try:
        plans = plan_requests(n, spec, rates, seed)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    expected = expected_counts(plans, 0, 0, retrying_legs(spec))
    ours = {plan.correl_id for plan in plans}
    console = Console(stderr=True)

    async def main(stop: asyncio.Event) -> dict[str, Any]:
        client = await connect()
        with open_transport(mq) as qm, _progress(console) as progress:
            sent_bar = progress.add_task("requests sent", total=n)
            sent = await do_drive(
                client, qm, spec, plans, rate=rate, task_queue=task_queue,
                on_sent=lambda i: progress.update(sent_bar, completed=i),
            )  # fmt: skip
            if not wait:
                return {}
            now = await _follow(
                progress, lambda: counts_for(qm, spec, ours), expected, stop,
                limit=_late_after(spec) + 60, poll=1.0,
            )  # fmt: skip
            return {**now, **_rerequests(spec, plans, rerequests_seen(qm, spec, sent))}

    figures = run(main)
    if not figures:
        click.echo(f"sent {n} requests; planned outcomes: {json.dumps(expected)}")
        return
    _summary({"requests": n, **figures}, expected, spec, title="mqgather drive")
    _check(figures, expected)


def _late_after(spec: AggregateSpec) -> float:
    """When the simulated back ends answer a "late" leg: after the gather timed out."""
    return spec.timeout_seconds + LATE_MARGIN_SECONDS


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=console,
    )  # fmt: skip


async def _follow(
    progress: Progress,
    count: Callable[[], dict[str, int]],
    expected: dict[str, int],
    stop: asyncio.Event,
    *,
    limit: float,
    poll: float,
    stack: DevStack | None = None,
) -> dict[str, int]:
    """Show gathers finishing until every planned outcome is in (or ``limit`` seconds
    pass, or Ctrl-C); returns the counts reached."""
    done_bar = progress.add_task("gathers finished", total=expected["requests"])
    give_up = time.monotonic() + limit
    while True:
        now = count()
        progress.update(done_bar, completed=now["completed"] + now["timed_out"])
        if all(now[k] >= expected[k] for k in now):
            return now
        if stop.is_set() or time.monotonic() > give_up:
            progress.console.print("[red]not every planned outcome arrived in time[/red]")
            return now
        for line in stack.supervise() if stack else ():
            progress.console.print(line, soft_wrap=True, markup=False, highlight=False)
        await asyncio.sleep(poll)  # polling queue depths for the progress bar


def _rerequests(
    spec: AggregateSpec,
    plans: list[RequestPlan],
    seen: dict[bytes, tuple[tuple[str, ...], float | None]],
) -> dict[str, Any]:
    """The run's re-requests against the plan: ``rerequested`` counts the planned ones
    seen and any without a cause, so that a missing or a causeless one fails the check;
    ``rerequested_slow`` those a leg's slow reply explains (it was due and not in)."""
    from workers.demo.driver import planned_rerequests, reconcile_rerequests, retrying_legs

    verdict = reconcile_rerequests(
        planned_rerequests(plans, retrying_legs(spec)), seen, _retry_after(spec)
    )
    return {
        "rerequested": verdict.planned + verdict.unexplained,
        "rerequested_slow": verdict.slow,
    }


def _retry_after(spec: AggregateSpec) -> dict[str, float]:
    """Each leg with re-requests, and its retry_after_seconds."""
    return {leg.name: leg.retry_after_seconds for leg in spec.legs if leg.retries}


def _check(figures: dict[str, Any], expected: dict[str, int]) -> None:
    mismatched = [k for k in expected if k != "requests" and figures[k] != expected[k]]
    if mismatched:
        raise MQGatherError(f"the counts differ from the plan for: {', '.join(mismatched)}")


@click.command()
@mq_option
@config_option
@click.option("--port", "temporal_port", default=7233, show_default=True, help="Temporal port.")
@click.option("--ui-port", default=8233, show_default=True, help="Temporal web UI port.")
def dev(mq: str, config_path: str | None, temporal_port: int, ui_port: int) -> None:
    """Run the whole stack until Ctrl-C: Temporal (embedded if none is reachable), worker,
    bridge, the collectors' bridges and simulated back ends, supervised (a child that dies
    is restarted)."""
    from workers.demo.harness import ensure_server

    config = load_config(config_path)
    with open_transport(mq) as qm:
        setup_queues(qm, config)
    console = Console(stderr=True)
    # "Late" legs of `mqgather drive` are answered after the longest timeout, as in the demo.
    late_after = max((_late_after(spec) for spec in config.aggregates.values()), default=5.0)
    stack = DevStack(
        mq=mq, config=config_path, temporal_port=temporal_port, ui_port=ui_port,
        backends_args=["--late-after", str(late_after)], collectors=list(config.collectors),
    )  # fmt: skip

    async def main(stop: asyncio.Event) -> None:
        client = await ensure_server(stack, lambda line: console.print(line, soft_wrap=True))
        await ensure_search_attributes(client)
        stack.start_children()
        click.echo(f"mqgather dev stack up. Temporal UI: {stack.ui_url}", err=True)
        click.echo(f"MQ: {mq}; logs in {stack.state_dir}/; Ctrl-C stops everything", err=True)
        await _until_stopped(stack, stop, console)

    try:
        run(main)
    finally:
        stack.stop()
        click.echo("dev stack stopped", err=True)


@click.command()
@config_option
@click.option("--requests", "n", default=200, show_default=True, type=click.IntRange(min=1),
              help="Requests to drive.")  # fmt: skip
@click.option("--rate", default=25.0, show_default=True, type=RATE, callback=finite,
              help="Requests per second.")  # fmt: skip
@aggregate_option
@click.option("--json", "as_json", is_flag=True, help="Also print the figures as JSON (last line).")
@click.option("--port", "temporal_port", default=7233, show_default=True, help="Temporal port.")
@click.option("--ui-port", default=8233, show_default=True, help="Temporal web UI port.")
@click.option("--state-dir", default=STATE_DIR, show_default=True, help="Files of the demo.")
@click.option(
    "--keep-ui",
    is_flag=True,
    help="After the summary, keep the stack and the Temporal web UI up until Ctrl-C.",
)
@click.option(
    "--collector/--no-collector",
    "with_collector",
    default=True,
    show_default=True,
    help="Also show the collector (its first [collectors] entry) after the gathers.",
)
def demo(
    config_path: str | None,
    n: int,
    rate: float,
    name: str,
    as_json: bool,
    temporal_port: int,
    ui_port: int,
    state_dir: str,
    keep_ui: bool,
    with_collector: bool,
) -> None:
    """The demo: start the dev stack, drive N requests with some dropped, late and duplicate
    replies (plus a few unknown and poison ones), and print what happened to every one.
    Then the collector: messages batched by destination under rules from its database,
    with a table of batches per destination and close reason, reconciled."""
    from workers.demo.collect import run_section, set_rules
    from workers.demo.driver import (
        Rates,
        expected_counts,
        plan_requests,
        put_strays,
        retrying_legs,
    )
    from workers.demo.driver import drive as do_drive
    from workers.demo.harness import (
        counts,
        ensure_server,
        latencies,
        percentile,
        rerequests_seen,
        until_ready,
    )

    config = load_config(config_path)
    spec = config.aggregate(name)
    state = Path(state_dir)
    state.mkdir(parents=True, exist_ok=True)  # the demo's own directory, unlike a --mq path
    qm_file = state / "demo-qm.db"
    for stale in (qm_file, Path(f"{qm_file}-wal"), Path(f"{qm_file}-shm")):
        stale.unlink(missing_ok=True)
    mq = f"local:{qm_file}"
    with open_transport(mq) as qm:
        setup_queues(qm, config)
    late_after = _late_after(spec)
    collector = next(iter(config.collectors.values()), None) if with_collector else None
    stack = DevStack(
        mq=mq, config=config_path, state_dir=state, temporal_port=temporal_port, ui_port=ui_port,
        backends_args=["--aggregate", name, "--late-after", str(late_after)],
        collectors=[collector.name] if collector else [],
    )  # fmt: skip
    if collector is not None:
        set_rules(collector)
    console = Console(stderr=True)
    rates = Rates()
    plans = plan_requests(n, spec, rates)
    unknown, poison = round(n * rates.unknown), round(n * rates.poison)
    expected = expected_counts(plans, unknown, poison, retrying_legs(spec))

    async def main(stop: asyncio.Event) -> dict[str, Any]:
        client = await ensure_server(stack, lambda line: console.print(line, soft_wrap=True))
        await ensure_search_attributes(client)
        stack.start_children()
        qm = open_transport(mq)
        try:
            with _progress(console) as progress:
                ready = progress.add_task("starting the stack", total=None)
                put_strays(qm, spec, unknown, poison)
                await until_ready(client, qm, spec, stop)
                progress.remove_task(ready)
                sent_bar = progress.add_task("requests sent", total=n)
                sent = await do_drive(
                    client, qm, spec, plans, rate=rate,
                    on_sent=lambda i: progress.update(sent_bar, completed=i),
                )  # fmt: skip
                now = await _follow(
                    progress, lambda: counts(qm, spec), expected, stop,
                    limit=late_after + spec.unknown_timeout_seconds + 60, poll=0.25, stack=stack,
                )  # fmt: skip
            took = latencies(qm, spec, sent)
            now.update(_rerequests(spec, plans, rerequests_seen(qm, spec, sent)))
            collected = None
            if collector is not None:
                console.print(f"collector {collector.name}: batching by destination", style="bold")
                collected = await run_section(client, qm, collector)
        finally:
            qm.close()
        return {
            "requests": n,
            **now,
            "latency_ms": {f"p{q}": round(percentile(took, q), 1) for q in (50, 95, 99)},
            **({"collector": collected.as_dict()} if collected is not None else {}),
        }

    try:
        figures = run(main)
        _summary(figures, expected, spec, title="mqgather demo")
        if "collector" in figures:
            _collector_summary(figures["collector"])
        _closing_line(stack.ui_url, keep_ui)
        if as_json:
            click.echo(json.dumps(figures))
        if keep_ui:
            run(lambda stop: _until_stopped(stack, stop, console))
    finally:
        stack.stop()
    _check(figures, expected)
    if "collector" in figures and not figures["collector"]["reconciled"]:
        raise click.ClickException(
            "the collector's batches do not account for every message sent; see the table"
        )


def _collector_summary(data: dict[str, Any]) -> None:
    """Batches per destination and close reason, and the messages reconciled."""
    table = Table(title="mqgather collector")
    for column in ("destination", "close reason", "batches"):
        table.add_column(column, justify="right" if column == "batches" else "left")
    for row in data["batches"]:
        table.add_row(row["destination"], row["reason"], str(row["batches"]))
    batched = sum(data["batched"].values())
    mark = "" if data["reconciled"] else " ✗"
    table.add_row(
        "messages sent", "", f"{data['sent']} = {batched} batched + {data['failed']} failed{mark}"
    )
    Console(file=sys.stdout).print(table)


async def _until_stopped(stack: DevStack, stop: asyncio.Event, console: Console) -> None:
    """Supervise the stack until Ctrl-C."""
    while not stop.is_set():
        for line in stack.supervise():
            console.print(line, soft_wrap=True, markup=False, highlight=False)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)


def _summary(
    figures: dict[str, Any], expected: dict[str, int], spec: AggregateSpec, title: str
) -> None:
    """Each outcome's count beside the plan (✗ where they differ), and the latencies."""
    table = Table(title=title)
    table.add_column("")
    table.add_column("count", justify="right")
    table.add_column("planned", justify="right")
    shown = ("requests", "completed", "timed_out", "late", "unknown", "duplicates", "failures",
             "rerequested")  # fmt: skip
    for key in shown:
        mark = "" if figures[key] == expected[key] else " ✗"
        table.add_row(key.replace("_", " "), str(figures[key]), f"{expected[key]}{mark}")
    lat = figures.get("latency_ms")
    if lat:
        table.add_row("latency p50/p95/p99", f"{lat['p50']}/{lat['p95']}/{lat['p99']} ms", "")
    console = Console(file=sys.stdout)
    console.print(table)
    if slow := figures.get("rerequested_slow"):
        legs = ", ".join(f"{leg} {after:g} s" for leg, after in _retry_after(spec).items())
        console.print(
            f"Also {slow} unplanned re-request{'s' if slow > 1 else ''}: a reply not in by its "
            f"leg's retry_after_seconds ({legs}) is asked again, as configured; this machine "
            "or its Temporal server answered that slowly.",
            soft_wrap=True,
        )


def _closing_line(ui_url: str, keep_ui: bool) -> None:
    console = Console(file=sys.stdout)
    if keep_ui:
        console.print(f"Every gather's history: {ui_url} (Ctrl-C stops the stack)", soft_wrap=True)
    else:
        console.print(
            "The stack has stopped. To browse these gathers in the Temporal web UI, run "
            f"`mqgather dev` (it keeps the demo's history) or `mqgather demo --keep-ui`, "
            f"then open {ui_url}",
            soft_wrap=True,
        )


COMMANDS = [dev, demo, drive]
