"""The long-running processes: ``mqgather worker | bridge | backends``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import click
from temporalio.client import Client
from temporalio.service import RPCError

from bridge.inbound import QueueBridge
from bridge.mq.connect import open_transport
from bridge.mq.errors import ConnectionBroken, QueueManagerUnavailable
from mqgather.cli.options import (
    WAIT_MS,
    backout_threshold_option,
    config_option,
    connector,
    fail_fast_option,
    finite,
    mq_option,
    run,
    setup_logging,
    share_option,
    task_queue_option,
)
from mqgather.config import load_config
from mqgather.constants import (
    BRIDGE_BATCH_SIZE,
    DEFAULT_DEPLOYMENT,
    DEFAULT_HELD_MB,
    DEFAULT_MAX_CACHED_GATHERS,
    DEFAULT_METRICS_HOST,
)
from mqgather.errors import MQGatherError
from mqgather.names import (
    ENV_BUILD_ID,
    ENV_DEPLOYMENT,
    ENV_HELD_MB,
    ENV_MAX_CACHED_GATHERS,
    ENV_METRICS_HOST,
    ENV_METRICS_PORT,
)
from mqgather.runtime import telemetry
from mqgather.runtime.memory import freeze_startup_objects, return_large_buffers
from mqgather.runtime.prometheus import MetricsEndpoint
from mqgather.runtime.temporal import (
    TemporalUnavailable,
    connect,
    connect_config,
    count_open_gathers,
    ensure_search_attributes,
    process_runtime,
)
from mqgather.runtime.waiting import until_reachable

log = logging.getLogger("mqgather")
#: How often ``backends`` looks whether a back end stopped on an MQ error.
BACKEND_CHECK_SECONDS = 0.5
F = TypeVar("F", bound=Callable[..., Any])


#: How often the worker counts open gathers for the ``mqgather.gathers.open`` gauge.
OPEN_GATHERS_REFRESH_SECONDS = 10.0


def metrics_port_option(fn: F) -> F:
    """``--metrics-port`` and ``--metrics-host``: Prometheus text on /metrics."""
    fn = click.option(
        "--metrics-host",
        envvar=ENV_METRICS_HOST,
        default=DEFAULT_METRICS_HOST,
        show_default=True,
        metavar="ADDRESS",
        help=f"The address /metrics listens on [env {ENV_METRICS_HOST}]. Loopback unless "
        "you choose otherwise: give the container network's address (or 0.0.0.0 inside a "
        "container) so a Prometheus elsewhere can scrape it.",
    )(fn)
    return click.option(
        "--metrics-port",
        type=click.IntRange(1, 65535),
        envvar=ENV_METRICS_PORT,
        default=None,
        help=f"Serve Prometheus metrics on this port at /metrics: mqgather's own and the "
        f"Temporal SDK's [env {ENV_METRICS_PORT}; default: off].",
    )(fn)


def start_metrics(
    service: str, port: int | None, host: str = DEFAULT_METRICS_HOST
) -> MetricsEndpoint | None:
    """Telemetry per MQGATHER_OTEL, plus the Prometheus endpoint when a port is given."""
    endpoint = MetricsEndpoint(port, host) if port else None
    telemetry.configure(service, extra_readers=[endpoint.reader] if endpoint else ())
    if endpoint is not None:
        try:
            endpoint.start()
        except OSError as exc:
            raise click.UsageError(str(exc)) from exc
    return endpoint


async def _count_open_gathers(client: Client, stop: asyncio.Event) -> None:
    """Keep the open-gathers gauge current until stopped."""
    latest: list[int | None] = [None]
    telemetry.observe_open_gathers(lambda: latest[0])
    while not stop.is_set():
        try:
            latest[0] = await count_open_gathers(client)
        except RPCError as exc:
            log.warning("cannot count open gathers for the metrics: %s", exc.message)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), OPEN_GATHERS_REFRESH_SECONDS)


async def wait_for_parts(
    mq: str, stop: asyncio.Event, fail_fast: bool, endpoint: MetricsEndpoint | None
) -> Client | None:
    """Temporal and the queue manager, waited for; None when stopped while waiting. The
    client's runtime sends the SDK's logs to Python logging, and its metrics to
    ``endpoint`` if given."""
    runtime = process_runtime(endpoint.sdk_address if endpoint else None)

    def probe() -> bool:
        open_transport(mq).close()
        return True

    reached = await until_reachable(
        f"the queue manager {mq}", lambda: asyncio.to_thread(probe), stop,
        retry_on=(QueueManagerUnavailable, ConnectionBroken), fail_fast=fail_fast,
    )  # fmt: skip
    if reached is None:
        return None
    address = connect_config()["target_host"]
    return await until_reachable(
        f"Temporal at {address}", lambda: connect(runtime=runtime), stop,
        retry_on=(TemporalUnavailable,), fail_fast=fail_fast,
    )  # fmt: skip


async def registered(client: Client, stop: asyncio.Event, fail_fast: bool) -> bool:
    """The gathers' search attributes registered on the namespace, retried while the
    server drops the call (it restarts, say); False when stopped while waiting."""

    async def register() -> bool:
        await ensure_search_attributes(client)
        return True

    address = client.service_client.config.target_host
    done = await until_reachable(f"Temporal at {address}", register, stop,
                                 retry_on=(TemporalUnavailable,), fail_fast=fail_fast)  # fmt: skip
    return bool(done)


@click.command()
@mq_option
@config_option
@task_queue_option
@click.option("--threads", default=8, show_default=True, type=click.IntRange(1, 256),
              help="Activity threads (MQ connections).")  # fmt: skip
@click.option(
    "--deployment",
    envvar=ENV_DEPLOYMENT,
    default=None,
    metavar="NAME",
    help=f"Join this worker deployment as one version; gathers stay on the version they "
    f"started on [env {ENV_DEPLOYMENT}; with --build-id alone: {DEFAULT_DEPLOYMENT}]. "
    "Without either, the worker is unversioned.",
)
@click.option(
    "--build-id",
    envvar=ENV_BUILD_ID,
    default=None,
    metavar="ID",
    help=f"This worker's version in the deployment [env {ENV_BUILD_ID}; default: the "
    "package version and a hash of the gather code].",
)
@click.option(
    "--max-cached-gathers",
    envvar=ENV_MAX_CACHED_GATHERS,
    default=DEFAULT_MAX_CACHED_GATHERS,
    show_default=True,
    type=click.IntRange(min=1),
    metavar="N",
    help=f"Gathers kept in memory between their workflow tasks [env "
    f"{ENV_MAX_CACHED_GATHERS}]. Memory stays bounded by N however many gathers are open; "
    "a gather not kept is replayed from its history when its next reply or timer comes "
    "(CPU and server reads). Raise it when most open gathers get replies soon.",
)
@click.option(
    "--held-mb",
    envvar=ENV_HELD_MB,
    default=DEFAULT_HELD_MB,
    show_default=True,
    type=click.IntRange(min=0),
    metavar="MB",
    help=f"Held replies (those too large for a signal) the worker reads into memory at "
    f"once, in MB [env {ENV_HELD_MB}]. Its peak for them is about twice this (the bodies "
    "and the response); a gather larger than it is merged alone. 0: no limit.",
)
@click.option(
    "--sandbox/--no-sandbox",
    default=False,
    show_default=True,
    help="Run the workflow code in Temporal's sandbox. It re-imports that code for every "
    "gather (about 8 ms of CPU each) to refuse non-deterministic calls; the shipped "
    "workflows pass the test suite inside it, every recorded history replayed there, so "
    "production runs without it unless asked.",
)
@fail_fast_option
@metrics_port_option
def worker(
    mq: str,
    config_path: str | None,
    task_queue: str,
    threads: int,
    deployment: str | None,
    build_id: str | None,
    max_cached_gathers: int,
    held_mb: int,
    sandbox: bool,
    fail_fast: bool,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Run gather workflows and the merge/PUT activities until Ctrl-C.

    With --deployment (or --build-id) the worker is one version of a Temporal worker
    deployment: promote it with `mqgather deploy promote`, and each gather finishes on
    the version it started on.
    """
    from temporalio.common import WorkerDeploymentVersion

    from workers.worker import build_worker, default_build_id, serve

    load_config(config_path)  # fail at start on a bad file
    setup_logging()
    return_large_buffers()
    endpoint = start_metrics("mqgather-worker", metrics_port, metrics_host)

    async def main(stop: asyncio.Event) -> None:
        client = await wait_for_parts(mq, stop, fail_fast, endpoint)
        if client is None or not await registered(client, stop, fail_fast):
            return
        counting = asyncio.create_task(_count_open_gathers(client, stop)) if endpoint else None
        version = None
        if deployment or build_id:
            version = WorkerDeploymentVersion(
                deployment or DEFAULT_DEPLOYMENT, build_id or default_build_id()
            )
        w = build_worker(
            client, connector(mq), task_queue=task_queue, activity_threads=threads,
            version=version, max_cached_gathers=max_cached_gathers, sandboxed=sandbox,
            held_mb=held_mb,
        )  # fmt: skip
        where = (
            f"version {version.build_id} of deployment {version.deployment_name}"
            if version
            else "unversioned"
        )
        log.info("worker on task queue %s (%s), MQ %s", task_queue, where, mq)
        freeze_startup_objects()
        await serve(w, stop)
        if counting is not None:
            await counting

    run(main)


@click.command()
@mq_option
@config_option
@task_queue_option
@click.option("--batch-size", default=BRIDGE_BATCH_SIZE, show_default=True,
              type=click.IntRange(1, 10_000),
              help="Messages per MQ unit of work (at most a quarter of the queue "
                   "manager's MAXUMSGS: each may be got and put, and ask for a COD and a "
                   "COA).")  # fmt: skip
@backout_threshold_option
@fail_fast_option
@metrics_port_option
def bridge(
    mq: str,
    config_path: str | None,
    task_queue: str,
    batch_size: int,
    backout_threshold: int,
    fail_fast: bool,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Feed gathers from the reply queues until Ctrl-C (one signal per gather per batch)."""
    from bridge.inbound import InboundBridge

    config = load_config(config_path)
    serve_bridge(
        "mqgather-bridge", mq, fail_fast, (metrics_host, metrics_port),
        lambda client: InboundBridge(
            client, connector(mq), list(config.aggregates.values()),
            task_queue=task_queue, batch_size=batch_size, backout_threshold=backout_threshold,
        ),
    )  # fmt: skip


def serve_bridge(
    service: str,
    mq: str,
    fail_fast: bool,
    metrics: tuple[str, int | None],
    make: Callable[[Client], QueueBridge],
) -> None:
    """Run a bridge until Ctrl-C: logging and metrics, the queue manager and Temporal
    waited for, then ``make(client)`` served; its counters are logged at the end."""
    setup_logging()
    return_large_buffers()
    endpoint = start_metrics(service, metrics[1], metrics[0])

    async def main(stop: asyncio.Event) -> None:
        client = await wait_for_parts(mq, stop, fail_fast, endpoint)
        if client is None:
            return
        b = make(client)
        log.info("%s serving %s", service, ", ".join(b.queues()))
        freeze_startup_objects()
        await b.run(stop)
        log.info("%s stopped: %s", service, b.stats)

    run(main)


@click.command()
@mq_option
@config_option
@click.option("--aggregate", "names", multiple=True, help="Serve these aggregates' legs (all).")
@click.option("--latency-ms", default=100.0, show_default=True, type=WAIT_MS, callback=finite,
              help="Milliseconds before each leg's reply.")  # fmt: skip
@click.option("--jitter-ms", default=50.0, show_default=True, type=WAIT_MS, callback=finite,
              help="Up to this many milliseconds more, set by each request's MsgId.")  # fmt: skip
@share_option("--drop-rate", 0.0, "Share of legs never answered.")
@share_option("--late-rate", 0.0, "Share answered after --late-after.")
@share_option("--duplicate-rate", 0.0, "Share answered twice.")
@click.option("--late-after", default=5.0, show_default=True, type=click.FloatRange(0, 3600),
              callback=finite, help="Seconds before a late reply.")  # fmt: skip
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
    from workers.demo.backends import BackendBehaviour, start_backends

    config = load_config(config_path)
    specs = [config.aggregate(n) for n in names] if names else list(config.aggregates.values())
    queues = sorted({leg.queue() for spec in specs for leg in spec.legs})
    behaviour = BackendBehaviour(
        latency_ms=latency_ms, jitter_ms=jitter_ms, drop_rate=drop_rate, late_rate=late_rate,
        duplicate_rate=duplicate_rate, late_after_seconds=late_after,
        timeout_queues={spec.name: spec.timeout_queue for spec in specs},
        reply_format="xml" if specs and specs[0].merge == "xml" else "json",
    )  # fmt: skip
    setup_logging()

    async def main(stop: asyncio.Event) -> None:
        halt, stats, threads = start_backends(connector(mq), queues, behaviour)
        log.info("back ends serving %s", ", ".join(queues))
        # Until Ctrl-C, or until a back end stops on an MQ error (it sets ``halt``).
        while not stop.is_set() and not halt.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), BACKEND_CHECK_SECONDS)
        halt.set()
        for thread in threads:
            await asyncio.to_thread(thread.join, 5)
        log.info("back ends stopped: %s", stats)
        if stats.failure:
            raise MQGatherError(f"{stats.failure}; define the leg request queues with "
                                "`mqgather queues setup` if they are missing")  # fmt: skip

    run(main)


COMMANDS = [worker, bridge, backends]
