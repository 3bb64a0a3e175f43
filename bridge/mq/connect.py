"""One setting selects the transport: ``local:PATH`` or ``ibmmq://...``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from bridge.mq.transport import Transport
from mqgather.config import state_file
from mqgather.constants import DEFAULT_MQ
from mqgather.errors import ConfigError
from mqgather.names import ENV_MQ

if TYPE_CHECKING:
    from bridge.mq.ibmmq_adapter import IBMMQSettings

_FORMS = "use local:PATH or ibmmq://QMGR@host(port)/CHANNEL"


def mq_url(explicit: str | None = None) -> str:
    """The transport URL: ``explicit`` if given, else ``$MQGATHER_MQ``, else the default."""
    return explicit or os.environ.get(ENV_MQ) or DEFAULT_MQ


def _target(url: str, source: str) -> str | IBMMQSettings:
    """What a URL names: the embedded queue manager's file, or IBM MQ settings.

    A ``local:`` file may be created, but not its directory: a typo in the directory
    must not silently give an empty queue manager. Only mqgather's own state directory
    is created on demand.

    Raises:
        ConfigError: naming ``source`` and what is wrong.
    """
    if url.startswith("local:"):
        path = url[len("local:") :]
        if not path:
            raise ConfigError(source, "local: needs a file path, e.g. local:.mqgather/qm.db")
        state_file(path, source, "an embedded queue manager file")
        return path
    if url.startswith("ibmmq://"):
        from bridge.mq.ibmmq_adapter import parse_ibmmq_url

        try:
            return parse_ibmmq_url(url)
        except ConfigError as exc:
            raise ConfigError(source if exc.key == ENV_MQ else exc.key, exc.reason) from exc
    raise ConfigError(source, f"{url!r} is not a queue manager URL; {_FORMS}")


def check_mq_url(url: str, source: str = ENV_MQ) -> None:
    """Check a transport URL without connecting.

    Args:
        url: the URL to check.
        source: where it came from (an option or a variable), named in the error.

    Raises:
        ConfigError: naming ``source`` and what is wrong.
    """
    _target(url, source)


def open_transport(url: str | None = None) -> Transport:
    """Connect to the queue manager a URL names.

    Args:
        url: ``local:PATH`` (embedded queue manager in an SQLite file) or
            ``ibmmq://QMGR@host(port)[,host(port)]/CHANNEL[?options]``; ``None`` reads
            ``MQGATHER_MQ``.

    Raises:
        ConfigError: the URL has neither form, or names a missing directory.
        MQError: the queue manager could not be opened.
    """
    target = _target(mq_url(url), ENV_MQ)
    if isinstance(target, str):
        from bridge.mq.local_qm import LocalQueueManager

        return LocalQueueManager(target)
    from bridge.mq.ibmmq_adapter import IBMMQTransport

    return IBMMQTransport(target)
