"""``mqgather keys ...`` (the key ring) and ``mqgather codec-server``."""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mqgather.cli.options import setup_logging
from mqgather.errors import ConfigError, MQGatherError
from mqgather.names import ENV_CODEC_TOKEN, ENV_CODEC_TOKEN_FILE, ENV_KEYS, ENV_KEYS_FILE
from mqgather.runtime.codec import (
    KEY_ID_PATTERN,
    KeyRing,
    PayloadCipher,
    key_ring_changes,
    load_key_ring,
    new_key,
    read_key_ring_file,
    write_key_ring_file,
)
from mqgather.runtime.keyuse import KeyUsage
from mqgather.secretfiles import read_secret

_FILE_HELP = f"The key-ring file [env {ENV_KEYS_FILE}]."


def _file_option(fn):  # type: ignore[no-untyped-def]
    return click.option(
        "--file", "path", envvar=ENV_KEYS_FILE, required=True,
        type=click.Path(dir_okay=False, path_type=Path), help=_FILE_HELP,
    )(fn)  # fmt: skip


@click.group()
def keys() -> None:
    """The key ring that seals every payload sent to Temporal.

    Encryption is on when MQGATHER_KEYS (the ring as JSON) or MQGATHER_KEYS_FILE (a file
    of mode 600 holding it) is set for the worker, bridge and every other command. The
    ring's active key seals; every key in it opens. Rotate: `keys add --activate`,
    restart the processes with the new ring, wait until `keys status` no longer lists
    the old key, then `keys retire` it. Keys never appear on the command line or in logs.
    """


@keys.command()
@_file_option
@click.option("--id", "key_id", default=None, help="The new key's id [default: k<n>].")
@click.option("--activate/--no-activate", default=True, show_default=True,
              help="Seal new payloads with it.")  # fmt: skip
def add(path: Path, key_id: str | None, activate: bool) -> None:
    """Add a fresh random key to the ring (the file is created, mode 600, if missing)."""
    with key_ring_changes(path):
        _add(path, key_id, activate)


def _add(path: Path, key_id: str | None, activate: bool) -> None:
    ring = read_key_ring_file(path) if path.exists() else None
    held = dict(ring.keys) if ring else {}
    if key_id is None:
        key_id = next(f"k{n}" for n in range(len(held) + 1, len(held) + 10_000)
                      if f"k{n}" not in held)  # fmt: skip
    elif key_id in held:
        raise ConfigError("--id", f"{key_id!r} is in the ring already; keys are never replaced")
    if not KEY_ID_PATTERN.match(key_id):
        raise ConfigError("--id", f"{key_id!r}: letters, digits, '.', '_' and '-', at most 64")
    held[key_id] = new_key()
    active = key_id if activate or ring is None else ring.active
    write_key_ring_file(path, KeyRing(active, held))
    click.echo(f"added key {key_id} to {path}; active key: {active}")
    if ring is not None and active != ring.active:
        click.echo("restart the worker, bridge and collector with this ring to seal with it")


@keys.command()
@_file_option
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also make a codec-server bearer token here (mode 600) if missing.")  # fmt: skip
def init(path: Path, token_file: Path | None) -> None:
    """Make a key ring with one key, unless the file exists (for a stack's first start;
    run again, it changes nothing)."""
    with key_ring_changes(path):
        if path.exists():
            ring = read_key_ring_file(path)
            click.echo(f"{path}: key ring present (active key {ring.active}); unchanged")
        else:
            write_key_ring_file(path, KeyRing("k1", {"k1": new_key()}))
            click.echo(f"{path}: key ring made (active key k1)")
    if token_file is not None and not token_file.exists():
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32) + "\n")
        click.echo(f"{token_file}: codec-server token made")


@keys.command()
@_file_option
@click.argument("key_id")
def activate(path: Path, key_id: str) -> None:
    """Seal new payloads with KEY_ID (already in the ring)."""
    with key_ring_changes(path):
        ring = _ring_holding(path, key_id)
        write_key_ring_file(path, KeyRing(key_id, ring.keys))
    click.echo(f"active key: {key_id}; restart the processes with this ring")


def _ring_holding(path: Path, key_id: str) -> KeyRing:
    """The ring in ``path``, which must hold ``key_id``."""
    ring = read_key_ring_file(path)
    if key_id not in ring.keys:
        raise ConfigError(str(path), f"no key {key_id!r} in the ring ({', '.join(ring.keys)})")
    return ring


def _usage(query: str | None) -> KeyUsage:
    from mqgather.runtime.keyuse import open_key_usage
    from mqgather.runtime.temporal import connect

    console = Console(stderr=True)

    async def main() -> KeyUsage:
        client = await connect()
        with Progress(
            TextColumn("reading open histories"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=console, transient=True,
        ) as progress:  # fmt: skip
            bar = progress.add_task("read", total=None)
            return await open_key_usage(
                client, query=query,
                on_total=lambda n: progress.update(bar, total=n),
                on_progress=lambda n: progress.update(bar, completed=n),
            )  # fmt: skip

    return asyncio.run(main())


@keys.command()
@click.option("--query", default=None, help="Narrow to these open workflows (visibility).")
def status(query: str | None) -> None:
    """Which key ids the open gathers' and collectors' histories use.

    A key may be retired once no open workflow uses it (closed histories that are still
    read, by `export` or `replay`, need it as long as they are kept).
    """
    ring = load_key_ring()
    usage = _usage(query)
    click.echo(f"{usage.workflows} open gather(s) and collector(s)")
    known = dict.fromkeys(ring.keys if ring else [], 0) | usage.workflows_by_key
    if not known:
        click.echo("no key ring here and no sealed payload in the open histories")
    for key_id, count in sorted(known.items()):
        marks = []
        if ring and key_id == ring.active:
            marks.append("active")
        if not ring or key_id not in ring.keys:
            marks.append("NOT IN THIS RING")
        note = f" ({', '.join(marks)})" if marks else ""
        verdict = "in use" if count else "may be retired"
        click.echo(f"  {key_id}{note}: {count} open workflow(s) — {verdict}")


@keys.command()
@_file_option
@click.argument("key_id")
@click.option("--force", is_flag=True, help="Retire it even though open workflows use it.")
def retire(path: Path, key_id: str, force: bool) -> None:
    """Take KEY_ID out of the ring, once no open gather or collector uses it."""
    # Held while the open histories are read: a key activated meanwhile is not lost.
    with key_ring_changes(path):
        ring = _ring_holding(path, key_id)
        if key_id == ring.active:
            raise MQGatherError(f"{key_id} is the active key: activate another one first")
        using = _usage(None).workflows_by_key.get(key_id, 0)
        if using and not force:
            raise MQGatherError(
                f"refused: {using} open workflow(s) hold payloads sealed with {key_id}; "
                "without it they cannot go on. Wait until `mqgather keys status` shows none "
                "(or --force)"
            )
        kept = {k: v for k, v in ring.keys.items() if k != key_id}
        write_key_ring_file(path, KeyRing(ring.active, kept))
    click.echo(f"retired {key_id}; restart the processes with this ring")


def codec_tokens() -> list[str]:
    """The codec server's bearer tokens (one per line in the file, or comma-separated in
    the variable).

    Raises:
        ConfigError: none is set, or one is too short to be a secret.
    """
    text, file = os.environ.get(ENV_CODEC_TOKEN, ""), os.environ.get(ENV_CODEC_TOKEN_FILE, "")
    source = ENV_CODEC_TOKEN
    if file:
        source = ENV_CODEC_TOKEN_FILE
        text = read_secret(Path(file), ENV_CODEC_TOKEN_FILE)
    tokens = [t.strip() for t in text.replace(",", "\n").splitlines() if t.strip()]
    if not tokens:
        raise ConfigError(
            ENV_CODEC_TOKEN,
            f"the codec server needs a bearer token: set {ENV_CODEC_TOKEN} or "
            f"{ENV_CODEC_TOKEN_FILE} (e.g. `openssl rand -hex 32`)",
        )
    if any(len(t) < 16 for t in tokens):
        raise ConfigError(source, "a token must be at least 16 characters")
    return tokens


@click.command("codec-server")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8089, show_default=True, type=click.IntRange(1, 65535),
              help="Port to listen on.")  # fmt: skip
@click.option("--ui-origin", "origins", multiple=True, metavar="URL",
              help="A Web UI origin allowed to call it from the browser (repeatable), "
              "e.g. http://localhost:8233.")  # fmt: skip
@click.option("--namespace", "namespaces", multiple=True,
              help="Serve only these namespaces (repeatable) [default: any].")  # fmt: skip
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Serve HTTPS with this certificate (PEM, chain first).",
)
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="The certificate's private key (PEM).")  # fmt: skip
def codec_server(
    host: str,
    port: int,
    origins: tuple[str, ...],
    namespaces: tuple[str, ...],
    tls_cert: Path | None,
    tls_key: Path | None,
) -> None:
    """Open and seal payloads for the Temporal Web UI and CLI with this key ring.

    Point the UI at it (its codec endpoint setting; `temporal server start-dev
    --ui-codec-endpoint URL`) and the CLI (`temporal workflow show --codec-endpoint URL
    --codec-auth "Bearer $TOKEN"`). Every request needs a bearer token from
    MQGATHER_CODEC_TOKEN or MQGATHER_CODEC_TOKEN_FILE; the key ring comes from
    MQGATHER_KEYS / MQGATHER_KEYS_FILE.
    """
    from mqgather.runtime.codec_server import (
        CodecServer,
        namespace_problem,
        origin_problem,
        server_tls,
    )

    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("give --tls-cert and --tls-key together")
    for flag, values, problem_of in (("--ui-origin", origins, origin_problem),
                                     ("--namespace", namespaces, namespace_problem)):  # fmt: skip
        for value in values:
            if problem := problem_of(value):
                raise click.BadParameter(f"{value!r}: {problem}", param_hint=flag)
    setup_logging()
    ring = load_key_ring()
    if ring is None:
        raise ConfigError(ENV_KEYS, f"the codec server needs the key ring: set {ENV_KEYS} "
                          f"or {ENV_KEYS_FILE}")  # fmt: skip
    tls = server_tls(tls_cert, tls_key) if tls_cert and tls_key else None
    try:
        server = CodecServer(
            (host, port), PayloadCipher(ring), codec_tokens(), origins, namespaces, tls=tls
        )
    except OSError as exc:  # no such address here, or the port is taken
        raise ConfigError(
            "--host/--port",
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); give an address of "
            "this machine and a free port",
        ) from exc
    click.echo(f"codec server on {server.url} (keys: {', '.join(ring.keys)}; active "
               f"{ring.active}); UI origins: {', '.join(origins) or 'none'}", err=True)  # fmt: skip
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


COMMANDS = [keys, codec_server]
