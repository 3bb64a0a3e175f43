"""``mqgather stack``: the production stack's secrets and certificates."""

from __future__ import annotations

import os
from pathlib import Path

import click

from mqgather.errors import ConfigError


@click.group()
def stack() -> None:
    """The production stack of docker-compose.yml: its secrets and certificates.

    `stack init` writes .env with a random password for every part (run once, on the
    machine that starts the stack); the stack's one-shot `certs` service runs `stack
    certs` to make its TLS certificates in a volume.
    """


@stack.command("init")
@click.option(
    "--dir",
    "root",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="Where docker-compose.yml is; .env is written there.",
)
@click.option("--force", is_flag=True, help="Replace every secret, not only missing ones "
              "(a database made with the old password then refuses the new one).")  # fmt: skip
def init(root: Path, force: bool) -> None:
    """Write .env with a random value for each secret the stack requires."""
    from mqgather.runtime.stack import SECRET_NAMES, init_env

    made = init_env(root, force=force)
    for path in made.written:
        click.echo(f"wrote {path} (mode 600): {', '.join(SECRET_NAMES)}")
    for path in made.kept:
        click.echo(f"kept {path}: every secret is set (--force replaces them)")
    click.echo("next: docker compose up -d --build  (the UI signs in as `operator` with "
               "UI_PASSWORD from .env)")  # fmt: skip


@stack.command("certs")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="The certificates volume.",
)
@click.option("--force", is_flag=True, help="Make a new authority and new certificates.")
def certs(directory: Path, force: bool) -> None:
    """Make the stack's certificate authority and each part's certificate and key.

    Each part gets a directory of its own, owned by the user its image runs as when
    this runs as root (as the stack's `certs` service does). The UI proxy's sign-in
    file takes its password from UI_PASSWORD.
    """
    from mqgather.runtime.stack import init_certs

    password = os.environ.get("UI_PASSWORD", "")
    if len(password) < 16:
        raise ConfigError("UI_PASSWORD", "set it (16 characters at least): mqgather stack init")
    made = init_certs(directory, password, force=force)
    for path in made.written:
        click.echo(f"made the stack's certificates in {path}")
    for path in made.kept:
        click.echo(f"kept the certificates in {path} (--force makes new ones)")


COMMANDS = [stack]
