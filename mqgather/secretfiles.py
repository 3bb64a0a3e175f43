"""Secrets read from files: passwords, bearer tokens, the key ring, named by a variable or
an option."""

from __future__ import annotations

import codecs
import stat
from pathlib import Path

from mqgather.errors import ConfigError


def read_secret(path: Path, key: str, *, private: bool = False) -> str:
    """The text of a file that holds a secret.

    A file others may write is refused: whoever can write it chooses the secret (a token
    of their own would open every sealed payload to them). One readable by others, as
    container platforms mount their secrets, is taken unless ``private`` (a file
    mqgather writes itself, mode 600, such as the key ring).

    Raises:
        ConfigError: naming ``key`` (the variable or option that named the file) when the
            file cannot be read or others may write it (or, ``private``, read it); never
            the secret.
    """
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(key, f"cannot read {path} ({exc.strerror})") from exc
    if private and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            key, f"{path} is open to others (mode {stat.S_IMODE(mode):o}); chmod 600 {path}"
        )
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            key,
            f"{path} may be written by others (mode {stat.S_IMODE(mode):o}), who could "
            f"put a secret of their own there; chmod go-w {path}",
        )
    try:
        return _text(data)
    except UnicodeDecodeError:
        # Never the bytes themselves: they are the secret.
        raise ConfigError(
            key, f"{path} is not text in UTF-8 (or UTF-16 with a byte-order mark)"
        ) from None


def _text(data: bytes) -> str:
    """A secret file's text whatever the locale: UTF-8, with a byte-order mark or without,
    or UTF-16 with one (what Windows PowerShell's ``>`` writes)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16")
    return data.decode("utf-8-sig")
