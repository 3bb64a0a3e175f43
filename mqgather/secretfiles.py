"""Secrets read from files: passwords and bearer tokens, named by a variable or option."""

from __future__ import annotations

import stat
from pathlib import Path

from mqgather.errors import ConfigError


def read_secret(path: Path, key: str) -> str:
    """The text of a file that holds a secret (a password, a bearer token).

    A file others may write is refused: whoever can write it chooses the secret (a token
    of their own would open every sealed payload to them). One readable by others, as
    container platforms mount their secrets, is taken.

    Raises:
        ConfigError: naming ``key`` (the variable or option that named the file) when the
            file cannot be read or others may write it; never the secret.
    """
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(key, f"cannot read {path} ({exc.strerror})") from exc
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            key,
            f"{path} may be written by others (mode {stat.S_IMODE(mode):o}), who could "
            f"put a secret of their own there; chmod go-w {path}",
        )
    return text
