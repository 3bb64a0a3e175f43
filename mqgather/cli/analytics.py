"""``mqgather export`` and ``mqgather analyze``."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from analytics.windows import window_seconds
from mqgather.errors import ConfigError


def _when(text: str | None, option: str) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ConfigError(option, f"{text!r} is not an ISO date/time") from exc
    return value if value.tzinfo else value.astimezone()


@click.command()
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--aggregate", default=None, help="Only this aggregate.")
@click.option("--since", default=None, help="Closed at or after (ISO); default: last run.")
@click.option("--until", default=None, help="Closed at or before (ISO).")
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="Histories per file.")  # fmt: skip
@click.option(
    "--keep-encrypted", is_flag=True,
    help="Write sealed payloads as they are [default: open them with the key ring of "
    "MQGATHER_KEYS / MQGATHER_KEYS_FILE; `analyze` opens them then].",
)  # fmt: skip
def export(
    out: Path,
    aggregate: str | None,
    since: str | None,
    until: str | None,
    batch_size: int,
    keep_encrypted: bool,
) -> None:
    """Export closed gather and collector histories to OUT (NDJSON, one history per line,
    by close date).

    Incremental: a re-run exports only what closed since the last one, never twice. A
    collector's run closes when it continues as new; with --aggregate, gathers only.
    """
    from analytics.export import export_histories
    from mqgather.runtime.codec import PayloadCipher, load_key_ring
    from mqgather.runtime.temporal import connect

    cipher = None if keep_encrypted else PayloadCipher(load_key_ring())
    # Before Temporal is reached: a bad time is the operator's to mend, whatever the link.
    after, before = _when(since, "--since"), _when(until, "--until")

    console = Console(stderr=True)

    async def main() -> None:
        client = await connect()
        with Progress(
            TextColumn("exporting histories"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=console,
        ) as progress:  # fmt: skip
            bar = progress.add_task("export", total=None)
            result = await export_histories(
                client, out, aggregate=aggregate, since=after, until=before,
                batch_size=batch_size, cipher=cipher,
                on_total=lambda n: progress.update(bar, total=n),
                on_progress=lambda n: progress.update(bar, completed=n),
            )  # fmt: skip
        click.echo(
            f"exported {result.exported} histories in {len(result.files)} file(s) to {out}; "
            f"{result.skipped_known} already exported; watermark {result.watermark}"
        )

    asyncio.run(main())


#: How a master Spark takes begins ("yarn" aside), as Spark checks it.
SPARK_MASTERS = ("local", "spark", "k8s")


def _window(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    # Checked before Spark starts: a typo would otherwise fail only after the whole pass.
    if value is not None:
        try:
            window_seconds(value)
        except ConfigError as exc:
            raise click.BadParameter(exc.reason, ctx, param) from exc
    return value


def _master(ctx: click.Context, param: click.Parameter, value: str) -> str:
    # Spark's own rule, checked before its JVM starts (which then only says it exited).
    if value != "yarn" and not value.startswith(SPARK_MASTERS):
        raise click.BadParameter(
            f"{value!r} is not a Spark master: local[*], local[N], spark://HOST:PORT, yarn or "
            "k8s://…",
            ctx,
            param,
        )
    return value


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", default="analytics-out", show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the facts, trends, charts and report.")  # fmt: skip
@click.option(
    "--window",
    default=None,
    callback=_window,
    help="Trend window, e.g. '15 minutes' or '1 hour 30 minutes' (weeks, days, hours, "
    "minutes, seconds, milliseconds) [default: picked from the data's span, at most 48 "
    "windows].",
)
@click.option(
    "--master", default="local[*]", show_default=True, callback=_master,
    help="Spark master: local[*], local[N], spark://HOST:PORT, yarn or k8s://….",
)  # fmt: skip
def analyze(paths: tuple[Path, ...], out: Path, window: str | None, master: str) -> None:
    """Mine gather histories (export files, `temporal workflow show -o json` files or Cloud
    export files) for timeout and latency trends: Parquet facts, CSV trends, PNG charts and
    an HTML report."""
    try:
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkRuntimeError

        from analytics.job import analyze as run
        from analytics.job import format_summary, spark_session
    except ImportError as exc:
        raise ConfigError(
            "analytics", f"install the analytics extra: pip install -e '.[analytics]' ({exc})"
        ) from exc

    console = Console(stderr=True)
    try:
        spark = spark_session(master)
    except (PySparkRuntimeError, Py4JJavaError) as exc:
        # The JVM logs its own reason above (a master unresponsive, a master it refuses).
        raise ConfigError(
            "--master",
            f"Spark did not start with master {master!r}: {str(exc).strip().splitlines()[0]}; "
            "its log above says why",
        ) from exc
    try:
        with console.status("starting") as status:
            result = run(spark, list(paths), out, window=window,
                         progress=lambda step: status.update(step))  # fmt: skip
    except FileNotFoundError as exc:
        raise ConfigError("PATH", str(exc)) from exc
    finally:
        spark.stop()
    click.echo(format_summary(result))


COMMANDS = [export, analyze]
