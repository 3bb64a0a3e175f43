"""The configuration file (TOML): queue definitions, and later the aggregates.

Without a file, the embedded defaults below define everything the demo needs.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mqgather import constants as k
from mqgather.errors import ConfigError


class QueueDefinition(BaseModel):
    """One ``[queues."NAME"]`` table: DEFINE QLOCAL attributes."""

    model_config = ConfigDict(extra="forbid")

    maxdepth: int = Field(default=k.DEFAULT_MAXDEPTH, ge=0)
    maxmsgl: int = Field(default=k.DEFAULT_MAXMSGL, ge=0)
    bothresh: int = Field(default=0, ge=0)
    boqname: str = Field(default="", max_length=48)
    descr: str = Field(default="", max_length=64)


class MQGatherConfig(BaseModel):
    """The whole configuration file."""

    model_config = ConfigDict(extra="forbid")

    queues: dict[str, QueueDefinition] = Field(default_factory=dict)


def default_queues() -> dict[str, QueueDefinition]:
    """The queues the embedded defaults define (room for a demo of thousands of gathers)."""
    deep = 100_000
    queues = {
        k.GATHER_IN: QueueDefinition(
            maxdepth=deep,
            bothresh=3,
            boqname=k.GATHER_BACKOUT,
            descr="replies from the back ends",
        ),
        k.ORDER_RESPONSE: QueueDefinition(maxdepth=deep, descr="merged responses"),
        k.GATHER_TIMEOUT: QueueDefinition(maxdepth=deep, descr="partial responses on timeout"),
        k.GATHER_LATE: QueueDefinition(maxdepth=deep, descr="replies after the gather closed"),
        k.GATHER_UNKNOWN: QueueDefinition(maxdepth=deep, descr="replies nobody registered"),
        k.GATHER_FAILURE: QueueDefinition(maxdepth=deep, descr="bad input, with the reason"),
        k.GATHER_BACKOUT: QueueDefinition(maxdepth=deep, descr="replies backed out BOTHRESH times"),
        k.GATHER_DUPLICATE: QueueDefinition(maxdepth=deep, descr="duplicate leg replies"),
    }
    return queues


def _flatten_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"])
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def parse_config(data: dict[str, Any], source: str) -> MQGatherConfig:
    """Validate a configuration mapping; errors name the key at fault and the file."""
    try:
        return MQGatherConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, _flatten_error(exc)) from exc


def load_config(path: str | os.PathLike[str] | None = None) -> MQGatherConfig:
    """Read the configuration: ``path``, else ``$MQGATHER_CONFIG``, else ``mqgather.toml``
    in the working directory if present, else the embedded defaults.

    Raises:
        ConfigError: the file is missing (when named), unreadable or invalid.
    """
    named = path or os.environ.get(k.ENV_CONFIG)
    file = Path(named) if named else Path(k.DEFAULT_CONFIG_FILE)
    if not file.exists():
        if named:
            raise ConfigError(str(file), "configuration file not found")
        return MQGatherConfig(queues=default_queues())
    try:
        data = tomllib.loads(file.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(file), f"cannot read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(file), f"not valid TOML: {exc}") from exc
    config = parse_config(data, str(file))
    if not config.queues:
        config.queues = default_queues()
    return config
