"""``mqgather worker | bridge | backends | drive | scatter | status | release | extend |
cancel | dev | demo``."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bridge.connect import open_transport
from bridge.models import QueueAttributes, parse_id
from bridge.transport import Transport
from mqgather import telemetry
from mqgather.cli import config_option, mq_option
from mqgather.config import AggregateSpec, MQGatherConfig, load_config
from mqgather.constants import STATE_DIR, TASK_QUEUE
from mqgather.errors import MQGatherError
from mqgather.stack import DevStack
from mqgather.temporal import TemporalUnavailable, connect, ensure_search_attributes

T = TypeVar("T")
log = logging.getLogger("mqgather")


def _logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )


def _run(main: Callable[[asyncio.Event], Awaitable[T]]) -> T:
    """Run ``main(stop)``; SIGINT and SIGTERM set ``stop`` for a clean shutdown."""

    async def runner() -> T:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await main(stop)

    return asyncio.run(runner())


def task_queue_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--task-queue`` option."""
    return click.option(
        "--task-queue", default=TASK_QUEUE, show_default=True, help="Temporal task queue."
    )(fn)


def aggregate_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--aggregate`` option (default: the demo's aggregate)."""
    return click.option(
        "--aggregate", "name", default="orders", show_default=True, help="Aggregate name."
    )(fn)


def fanout_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--mq``, ``--config``, ``--task-queue`` and ``--aggregate``: what a command that
    registers gathers needs."""
    for option in (aggregate_option, task_queue_option, config_option, mq_option):
        fn = option(fn)
    return fn


def _connector(mq: str) -> Callable[[], Transport]:
    return lambda: open_transport(mq)


def _define_queues(mq: str, config: MQGatherConfig) -> None:
    with open_transport(mq) as qm:
        for name, definition in config.queues.items():
            qm.define(QueueAttributes(name=name, **definition.model_dump()), replace=True)
        for spec in config.aggregates.values():
            for leg in spec.legs:
                if not qm.list_queues(leg.queue()):
                    qm.define(QueueAttributes(name=leg.queue(), maxdepth=100_000))


@click.command()
@mq_option
@config_option
@task_queue_option
@click.option("--threads", default=8, show_default=True, help="Activity threads (MQ connections).")
def worker(mq: str, config_path: str | None, task_queue: str, threads: int) -> None:
    """Run gather workflows and the merge/PUT activities until Ctrl-C."""
    from workers.worker import build_worker

    load_config(config_path)  # fail at start on a bad file
    _logging()
    telemetry.configure("mqgather-worker")

    async def main(stop: asyncio.Event) -> None:
        client = await connect()
        await ensure_search_attributes(client)
        w = build_worker(client, _connector(mq), task_queue=task_queue, activity_threads=threads)
        log.info("worker on task queue %s, MQ %s", task_queue, mq)
        async with w:
            await stop.wait()

    _run(main)


@click.command()
@mq_option
@config_option
@task_queue_option
@click.option("--batch-size", default=100, show_default=True, help="Messages per MQ unit of work.")
def bridge(mq: str, config_path: str | None, task_queue: str, batch_size: int) -> None:
    """Feed gathers from the reply queues until Ctrl-C (one signal per gather per batch)."""
    from bridge.inbound import InboundBridge

    config = load_config(config_path)
    _logging()
    telemetry.configure("mqgather-bridge")

    async def main(stop: asyncio.Event) -> None:
        client = await connect()
        b = InboundBridge(
            client, _connector(mq), list(config.aggregates.values()),
            task_queue=task_queue, batch_size=batch_size,
        )  # fmt: skip
        log.info("bridge serving %s", ", ".join(b.by_queue))
        await b.run(stop)
        log.info("bridge stopped: %s", b.stats)

    _run(main)


@click.command()
@mq_option
@config_option
@click.option("--aggregate", "names", multiple=True, help="Serve these aggregates' legs (all).")
@click.option("--latency-ms", default=100.0, show_default=True)
@click.option("--jitter-ms", default=50.0, show_default=True)
@click.option("--drop-rate", default=0.0, show_default=True, help="Share of legs never answered.")
@click.option(
    "--late-rate", default=0.0, show_default=True, help="Share answered after --late-after."
)
@click.option("--duplicate-rate", default=0.0, show_default=True, help="Share answered twice.")
@click.option("--late-after", default=5.0, show_default=True, help="Seconds before a late reply.")
def backends(
    mq: str,
    config_path: str | None,
    names: tuple[str, ...],
    latency_ms: float,
    jitter_ms: float,
    drop_rate: float,
    late_rate: float,
    duplicate_rate: float,
    late_after: float,
) -> None:
    """Simulated back ends: answer the leg request queues until Ctrl-C."""
    from workers.backends import BackendBehaviour, start_backends

    config = load_config(config_path)
    specs = [config.aggregate(n) for n in names] if names else list(config.aggregates.values())
    queues = sorted({leg.queue() for spec in specs for leg in spec.legs})
    behaviour = BackendBehaviour(
        latency_ms=latency_ms, jitter_ms=jitter_ms, drop_rate=drop_rate, late_rate=late_rate,
        duplicate_rate=duplicate_rate, late_after_seconds=late_after,
        reply_format="xml" if specs and specs[0].merge == "xml" else "json",
    )  # fmt: skip
    _logging()

    async def main(stop: asyncio.Event) -> None:
        halt, stats, threads = start_backends(_connector(mq), queues, behaviour)
        log.info("back ends serving %s", ", ".join(queues))
        await stop.wait()
        halt.set()
        for thread in threads:
            await asyncio.to_thread(thread.join, 5)
        log.info("back ends stopped: %s", stats)

    _run(main)


@click.command()
@fanout_options
@click.option("--correl-id", default=None, help="The gather's CorrelId (default: new).")
@click.option("--reply-to-q", default="", help="Requester's ReplyToQ (replyToQueue mode).")
@click.option("--body", "bodies", multiple=True, metavar="LEG=TEXT", help="A leg request body.")
def scatter(
    mq: str,
    config_path: str | None,
    task_queue: str,
    name: str,
    correl_id: str | None,
    reply_to_q: str,
    bodies: tuple[str, ...],
) -> None:
    """Register one gather and PUT its leg requests; prints the CorrelId."""
    from bridge.fanout import scatter as do_scatter

    spec = load_config(config_path).aggregate(name)
    leg_bodies = {}
    for item in bodies:
        leg, eq, text = item.partition("=")
        if not eq:
            raise click.BadParameter(f"{item!r} is not LEG=TEXT", param_hint="--body")
        leg_bodies[leg] = text.encode()

    async def main(_: asyncio.Event) -> None:
        client = await connect()
        with open_transport(mq) as qm:
            done = await do_scatter(
                client, qm, spec, bodies=leg_bodies, reply_to_q=reply_to_q,
                correl_id=parse_id(correl_id) if correl_id else None, task_queue=task_queue,
            )  # fmt: skip
        click.echo(f"hex:{done.correl_id.hex()}  {done.gather_id}")

    _run(main)


@click.command()
@fanout_options
@click.option("--requests", "n", default=100, show_default=True)
@click.option("--rate", default=50.0, show_default=True, help="Requests per second.")
@click.option("--drop-rate", default=0.02, show_default=True)
@click.option("--late-rate", default=0.02, show_default=True)
@click.option("--duplicate-rate", default=0.03, show_default=True)
@click.option("--seed", default=7, show_default=True)
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
) -> None:
    """Send N requests at a rate with planned drops, late and duplicate replies."""
    from workers.driver import Rates, expected_counts, plan_requests
    from workers.driver import drive as do_drive

    spec = load_config(config_path).aggregate(name)
    rates = Rates(drop=drop_rate, late=late_rate, duplicate=duplicate_rate)
    plans = plan_requests(n, spec, rates, seed)

    async def main(_: asyncio.Event) -> None:
        client = await connect()
        with open_transport(mq) as qm:
            await do_drive(client, qm, spec, plans, rate=rate, task_queue=task_queue)
        click.echo(json.dumps(expected_counts(plans, 0, 0)))

    _run(main)


def _gather_handle(client: Any, name: str, correl: str) -> Any:
    from workflows.models import GatherResult, gather_id

    return client.get_workflow_handle(gather_id(name, parse_id(correl)), result_type=GatherResult)


@click.command()
@click.argument("correl_id")
@aggregate_option
@click.option("--json", "as_json", is_flag=True)
def status(correl_id: str, name: str, as_json: bool) -> None:
    """Show a gather: state, legs received and missing, deadline (CORRELID as hex:… or text)."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError

    from workflows.gather import GatherWorkflow

    async def main(_: asyncio.Event) -> dict[str, Any]:
        client = await connect()
        handle = _gather_handle(client, name, correl_id)
        try:
            desc = await handle.describe()
        except RPCError as exc:
            raise MQGatherError(f"no gather {handle.id}: {exc.message}") from exc
        if desc.status == WorkflowExecutionStatus.RUNNING:
            current = await handle.query(GatherWorkflow.status)
            return dict(current.model_dump(mode="json"), running=True)
        result = await handle.result()
        return dict(result.model_dump(mode="json", exclude={"consumed_msg_ids"}), running=False)

    data = _run(main)
    if as_json:
        click.echo(json.dumps(data))
        return
    table = Table(show_header=False)
    for key, value in data.items():
        table.add_row(key, ", ".join(value) if isinstance(value, list) else str(value))
    Console().print(table)


def _update_command(update: str, doc: str) -> click.Command:
    @click.command(name=update, help=doc)
    @click.argument("correl_id")
    @aggregate_option
    @click.option("--seconds", default=60.0, show_default=True, help="(extend) from now.")
    @click.option("--reason", default="", help="(release, cancel) recorded with the outcome.")
    def command(correl_id: str, name: str, seconds: float, reason: str) -> None:
        from workflows.models import CancelInput, ExtendInput, ReleaseInput, UpdateResult

        arg: Any = {
            "extend": ExtendInput(seconds=seconds),
            "release": ReleaseInput(reason=reason or "released by an operator"),
            "cancel": CancelInput(reason=reason or "cancelled by an operator"),
        }[update]

        async def main(_: asyncio.Event) -> UpdateResult:
            from temporalio.service import RPCError

            client = await connect()
            handle = _gather_handle(client, name, correl_id)
            try:
                result: UpdateResult = await handle.execute_update(
                    update, arg, result_type=UpdateResult
                )
            except RPCError as exc:
                raise MQGatherError(f"{update} {handle.id}: {exc.message}") from exc
            return result

        click.echo(_run(main).model_dump_json())

    return command


release = _update_command("release", "PUT what a gather has now, as a RELEASED response.")
extend = _update_command("extend", "Move a gather's deadline to --seconds from now.")
cancel = _update_command("cancel", "End a gather; what arrived goes to the timeout queue.")


async def _ensure_server(stack: DevStack, console: Console) -> Any:
    """Connect to Temporal at the stack's address, starting the embedded server if needed."""
    try:
        return await connect(stack.address)
    except TemporalUnavailable:
        pass
    console.print(f"starting the embedded Temporal server on {stack.address} …", soft_wrap=True)
    stack.start_server()
    deadline = time.monotonic() + 60
    while True:
        try:
            return await connect(stack.address)
        except TemporalUnavailable:
            if stack.server is not None and stack.server.poll() is not None:
                raise
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)  # the server is starting; nothing to await on yet


@click.command()
@mq_option
@config_option
@click.option("--port", "temporal_port", default=7233, show_default=True, help="Temporal port.")
@click.option("--ui-port", default=8233, show_default=True, help="Temporal web UI port.")
def dev(mq: str, config_path: str | None, temporal_port: int, ui_port: int) -> None:
    """Run the whole stack until Ctrl-C: Temporal (embedded if none is reachable), worker,
    bridge and simulated back ends, supervised (a child that dies is restarted)."""
    config = load_config(config_path)
    _define_queues(mq, config)
    console = Console(stderr=True)
    stack = DevStack(mq=mq, config=config_path, temporal_port=temporal_port, ui_port=ui_port)

    async def main(stop: asyncio.Event) -> None:
        client = await _ensure_server(stack, console)
        await ensure_search_attributes(client)
        stack.start_children()
        click.echo(f"mqgather dev stack up. Temporal UI: {stack.ui_url}", err=True)
        click.echo(f"MQ: {mq}; logs in {stack.state_dir}/; Ctrl-C stops everything", err=True)
        while not stop.is_set():
            for line in stack.supervise():
                click.echo(line, err=True)
            try:
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            except TimeoutError:
                continue

    try:
        _run(main)
    finally:
        stack.stop()
        click.echo("dev stack stopped", err=True)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def _counts(qm: Transport, spec: AggregateSpec) -> dict[str, int]:
    depth = {q: qm.inquire(q).curdepth for q in (
        spec.response_queue, spec.timeout_queue, spec.late_queue, spec.unknown_queue,
        spec.failure_queue)}  # fmt: skip
    return {
        "completed": depth[spec.response_queue],
        "timed_out": depth[spec.timeout_queue],
        "late": depth[spec.late_queue],
        "unknown": depth[spec.unknown_queue],
        "duplicates": qm.inquire(spec.duplicate_queue).curdepth if spec.duplicate_queue else 0,
        "failures": depth[spec.failure_queue],
    }


@click.command()
@config_option
@click.option("--requests", "n", default=200, show_default=True, help="Requests to drive.")
@click.option("--rate", default=25.0, show_default=True, help="Requests per second.")
@aggregate_option
@click.option("--json", "as_json", is_flag=True, help="Also print the figures as JSON (last line).")
@click.option("--port", "temporal_port", default=7233, show_default=True, help="Temporal port.")
@click.option("--ui-port", default=8233, show_default=True, help="Temporal web UI port.")
@click.option("--state-dir", default=STATE_DIR, show_default=True, help="Files of the demo.")
def demo(
    config_path: str | None,
    n: int,
    rate: float,
    name: str,
    as_json: bool,
    temporal_port: int,
    ui_port: int,
    state_dir: str,
) -> None:
    """The demo: start the dev stack, drive N requests with some dropped, late and duplicate
    replies (plus a few unknown and poison ones), and print what happened to every one."""
    from workers.driver import Rates, expected_counts, plan_requests, put_strays
    from workers.driver import drive as do_drive

    config = load_config(config_path)
    spec = config.aggregate(name)
    state = Path(state_dir)
    qm_file = state / "demo-qm.db"
    for stale in (qm_file, Path(f"{qm_file}-wal"), Path(f"{qm_file}-shm")):
        stale.unlink(missing_ok=True)
    mq = f"local:{qm_file}"
    _define_queues(mq, config)
    late_after = spec.timeout_seconds + 2.0
    stack = DevStack(
        mq=mq, config=config_path, state_dir=state, temporal_port=temporal_port, ui_port=ui_port,
        backends_args=["--aggregate", name, "--late-after", str(late_after)],
    )  # fmt: skip
    console = Console(stderr=True)
    rates = Rates()
    plans = plan_requests(n, spec, rates)
    unknown, poison = round(n * rates.unknown), round(n * rates.poison)
    expected = expected_counts(plans, unknown, poison)

    async def main(stop: asyncio.Event) -> dict[str, Any]:
        client = await _ensure_server(stack, console)
        await ensure_search_attributes(client)
        stack.start_children()
        qm = open_transport(mq)
        try:
            with Progress(
                TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), console=console,
            ) as progress:  # fmt: skip
                ready = progress.add_task("starting the stack", total=None)
                put_strays(qm, spec, unknown, poison)
                await _until_ready(client, qm, spec, stop)
                progress.remove_task(ready)
                sent_bar = progress.add_task("requests sent", total=n)
                done_bar = progress.add_task("gathers finished", total=n)
                sent = await do_drive(
                    client, qm, spec, plans, rate=rate,
                    on_sent=lambda i: progress.update(sent_bar, completed=i),
                )  # fmt: skip
                limit = time.monotonic() + late_after + spec.unknown_timeout_seconds + 60
                while True:
                    counts = _counts(qm, spec)
                    progress.update(done_bar, completed=counts["completed"] + counts["timed_out"])
                    if all(counts[k] >= expected[k] for k in counts):
                        break
                    if stop.is_set() or time.monotonic() > limit:
                        console.print("[red]the demo did not finish in time[/red]")
                        break
                    for line in stack.supervise():
                        console.print(line)
                    await asyncio.sleep(0.25)  # polling queue depths for the progress bar
            latencies = _latencies(qm, spec, sent)
        finally:
            qm.close()
        return {
            "requests": n,
            **counts,
            "latency_ms": {
                "p50": round(_percentile(latencies, 50), 1),
                "p95": round(_percentile(latencies, 95), 1),
                "p99": round(_percentile(latencies, 99), 1),
            },
        }

    try:
        figures = _run(main)
    finally:
        stack.stop()
    _summary(figures, expected, stack.ui_url)
    if as_json:
        click.echo(json.dumps(figures))
    mismatched = [k for k in expected if k != "requests" and figures[k] != expected[k]]
    if mismatched:
        raise MQGatherError(f"the demo's counts differ from the plan for: {', '.join(mismatched)}")


async def _until_ready(
    client: Any, qm: Transport, spec: AggregateSpec, stop: asyncio.Event, limit: float = 120
) -> None:
    """Until a worker polls the task queue and the bridge has taken the first replies,
    so the latency figures measure gathers, not process start-up."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=TASK_QUEUE),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    deadline = time.monotonic() + limit
    while not stop.is_set():
        polled = await client.workflow_service.describe_task_queue(request)
        if polled.pollers and qm.inquire(spec.reply_queue).curdepth == 0:
            return
        if time.monotonic() > deadline:
            raise MQGatherError(
                "the worker or bridge did not start; see the logs in the state directory"
            )
        await asyncio.sleep(0.2)  # polling other processes' progress


def _latencies(qm: Transport, spec: AggregateSpec, sent: dict[bytes, datetime]) -> list[float]:
    out = []
    for response in qm.browse(spec.response_queue):
        start = sent.get(response.correl_id)
        if start is not None and response.put_date_time is not None:
            out.append((response.put_date_time - start).total_seconds() * 1000)
    return out


def _summary(figures: dict[str, Any], expected: dict[str, int], ui_url: str) -> None:
    table = Table(title="mqgather demo")
    table.add_column("")
    table.add_column("count", justify="right")
    table.add_column("planned", justify="right")
    for key in ("requests", "completed", "timed_out", "late", "unknown", "duplicates", "failures"):
        mark = "" if figures[key] == expected[key] else " ✗"
        table.add_row(key.replace("_", " "), str(figures[key]), f"{expected[key]}{mark}")
    lat = figures["latency_ms"]
    table.add_row("latency p50/p95/p99", f"{lat['p50']}/{lat['p95']}/{lat['p99']} ms", "")
    console = Console(file=sys.stdout)
    console.print(table)
    console.print(f"Every gather's history: {ui_url}", soft_wrap=True)
    console.print("(the UI is up while `mqgather dev` runs)")


COMMANDS = [worker, bridge, backends, scatter, drive, status, release, extend, cancel, dev, demo]
