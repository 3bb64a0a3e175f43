"""Options and helpers every command group shares."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from bridge.mq.connect import check_mq_url, open_transport
from bridge.mq.transport import Transport
from mqgather.constants import (
    BRIDGE_BACKOUT_THRESHOLD,
    DEFAULT_DEPLOYMENT,
    DEFAULT_MQ,
    MAX_QUEUE_DEPTH,
    SALVAGE_PROGRESS_SECONDS,
)
from mqgather.errors import ConfigError, MQGatherError
from mqgather.limits import queue_name_problem
from mqgather.names import ENV_CONFIG, ENV_DEPLOYMENT, ENV_MQ, TASK_QUEUE

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

#: The aggregate commands use when none is named: the demo's.
DEFAULT_AGGREGATE = "orders"


def finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A click callback refusing NaN, which click's ranges let through."""
    if value is not None and math.isnan(value):
        raise click.BadParameter("not a number")
    return value


def utf8_text(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback refusing text the terminal gave as bytes that are not UTF-8:
    Python holds them as lone surrogates, which no payload or MQ property carries."""
    if value is not None:
        try:
            value.encode()
        except UnicodeEncodeError:
            raise click.BadParameter("not UTF-8 text (the terminal gave other bytes)") from None
    return value


def queue_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback refusing a queue name MQ refuses (:func:`queue_name_problem`),
    before the queue manager is asked."""
    if value and (problem := queue_name_problem(value)):
        raise click.BadParameter(f"{value!r}: {problem}")
    return value


#: A share of the requests (0 to 1).
SHARE = click.FloatRange(0, 1)
#: Requests per second.
RATE = click.FloatRange(0, 10_000, min_open=True)
#: A simulated back end's delay, in ms (at most a minute).
WAIT_MS = click.FloatRange(0, 60_000)


def share_option(name: str, default: float, help_text: str) -> Callable[[F], F]:
    """A ``name`` option that is a share (of requests, of legs): 0 to 1, NaN refused."""
    return click.option(
        name, default=default, show_default=True, type=SHARE, callback=finite, help=help_text
    )


def _checked_mq(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Reject a bad queue manager URL at once, naming where it came from."""
    came_from = ctx.get_parameter_source(param.name or "mq")
    source = ENV_MQ if came_from is click.core.ParameterSource.ENVIRONMENT else "--mq"
    try:
        check_mq_url(value, source)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    return value


def mq_option(fn: F) -> F:
    """The ``--mq`` option every command that talks to MQ takes."""
    return click.option(
        "--mq",
        "mq",
        envvar=ENV_MQ,
        default=DEFAULT_MQ,
        show_default=True,
        metavar="URL",
        callback=_checked_mq,
        help="Queue manager: local:PATH (embedded) or ibmmq://QMGR@host(port)/CHANNEL "
        f"[env {ENV_MQ}].",
    )(fn)


def config_option(fn: F) -> F:
    """The ``--config`` option: the TOML configuration file."""
    return click.option(
        "--config",
        "config_path",
        envvar=ENV_CONFIG,
        default=None,
        metavar="FILE",
        help=f"Configuration file (TOML) [env {ENV_CONFIG}; default ./mqgather.toml if present, "
        "else the embedded defaults].",
    )(fn)


def task_queue_option(fn: F) -> F:
    """The ``--task-queue`` option."""
    return click.option(
        "--task-queue", default=TASK_QUEUE, show_default=True, help="Temporal task queue."
    )(fn)


def aggregate_option(fn: F) -> F:
    """The ``--aggregate`` option (default: the demo's aggregate)."""
    return click.option(
        "--aggregate", "name", default=DEFAULT_AGGREGATE, show_default=True, help="Aggregate name."
    )(fn)


def fanout_options(fn: F) -> F:
    """``--mq``, ``--config``, ``--task-queue`` and ``--aggregate``: what a command that
    registers gathers needs."""
    for option in (aggregate_option, task_queue_option, config_option, mq_option):
        fn = option(fn)
    return fn


def fail_fast_option(fn: F) -> F:
    """``--fail-fast``: exit when Temporal or MQ is not reachable, instead of waiting."""
    return click.option(
        "--fail-fast",
        is_flag=True,
        help="Exit at once if Temporal or the queue manager cannot be reached (default: "
        "wait for them, retrying with backoff and logging each attempt).",
    )(fn)


def backout_threshold_option(fn: F) -> F:
    """``--backout-threshold``: a bridge's BOTHRESH for input queues that have none."""
    return click.option(
        "--backout-threshold",
        default=BRIDGE_BACKOUT_THRESHOLD,
        show_default=True,
        type=click.IntRange(0, MAX_QUEUE_DEPTH),
        help="Backouts after which a message is moved aside (to BOQNAME, else the "
        "dead-letter queue) when its input queue has BOTHRESH(0), MQ's default; a queue's "
        "own BOTHRESH wins. 0: none, so a message that fails every time is backed out for "
        "ever and holds back those behind it.",
    )(fn)


def deployment_option(fn: F) -> F:
    """``--deployment``: the worker deployment a rollout command acts on."""
    return click.option(
        "--deployment",
        envvar=ENV_DEPLOYMENT,
        default=DEFAULT_DEPLOYMENT,
        show_default=True,
        metavar="NAME",
        help=f"Worker deployment [env {ENV_DEPLOYMENT}].",
    )(fn)


def setup_logging(verbose: bool = False) -> None:
    """Log lines with time, logger and level on stderr."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )


def run(main: Callable[[asyncio.Event], Awaitable[T]]) -> T:
    """Run ``main(stop)``; SIGINT and SIGTERM set ``stop`` for a clean shutdown."""

    async def runner() -> T:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await main(stop)

    return asyncio.run(runner())


def connector(mq: str) -> Callable[[], Transport]:
    """A function that opens a new connection to the queue manager ``mq`` names."""
    return lambda: open_transport(mq)


def show_fields(data: dict[str, Any], as_json: bool) -> None:
    """A status as one JSON object, or as a two-column table (lists joined, objects as
    JSON)."""
    if as_json:
        click.echo(json.dumps(data))
        return
    table = Table(show_header=False)
    for key, value in data.items():
        if isinstance(value, list):
            shown = ", ".join(str(v) for v in value)
        elif isinstance(value, dict):
            shown = json.dumps(value)
        else:
            shown = str(value)
        table.add_row(key, shown)
    Console().print(table)


def salvage_options(force_help: str, done: str, one: str) -> Callable[[F], F]:
    """``--force`` (past the ledger's memory: ``force_help``), ``--dry-run`` (list what
    would be ``done``, "sent") and ``--json`` (one object per ``one``) of a salvage."""

    def decorate(fn: F) -> F:
        fn = click.option("--json", "as_json", is_flag=True,
                          help=f"One JSON object per {one}.")(fn)  # fmt: skip
        fn = click.option("--dry-run", is_flag=True,
                          help=f"Only list what would be {done}, and do nothing.")(fn)  # fmt: skip
        return click.option("--force", is_flag=True, help=force_help)(fn)

    return decorate


def with_progress(
    check: Callable[[], None], what: str, every: float = SALVAGE_PROGRESS_SECONDS
) -> Callable[[], None]:
    """``check`` (what a salvage calls before each message it sends), telling on stderr
    how many it has come to, at most once every ``every`` seconds: a long salvage (a
    flood, a slow channel) shows it is going."""
    began = last = time.monotonic()
    count = 0

    def checked() -> None:
        nonlocal last, count
        check()
        count += 1
        now = time.monotonic()
        if now - last >= every:
            last = now
            click.echo(f"{what}: sending message {count} ({now - began:.0f} s)", err=True)

    return checked


def salvage_summary(head: str, verdicts: list[str], dry_run: bool, done: str) -> None:
    """Print what a salvage did (``done``: what it does to a message, "sent"); fail,
    naming how many, where held messages could not be taken from their hold queue, or
    where the salvage stopped before its end."""
    from workers.salvage import STOPPED

    sent = sum(v == ("to send" if dry_run else "sent") for v in verdicts)
    failed = sum(v.startswith("not sent") for v in verdicts)
    stopped = sum(v == STOPPED for v in verdicts)
    click.echo(f"{head}; {sent} {'would be ' if dry_run else ''}{done}, "
               f"{len(verdicts) - sent - failed - stopped} in a place already"
               + (f", {stopped} left" if stopped else ""))  # fmt: skip
    if failed:
        raise MQGatherError(
            f"{failed} held message(s) could not be {done} (see the table); "
            "`mqgather hold check` lists what the hold queues hold"
        )
    if stopped:
        raise MQGatherError(
            f"the salvage stopped before its end, {stopped} message(s) not {done} yet (the "
            f"reason above); run it again to send the rest: nothing is {done} twice"
        )
