"""One setting selects the transport: ``local:PATH`` or ``ibmmq://...``."""

from __future__ import annotations

import os

from bridge.mq.transport import Transport
from mqgather.constants import DEFAULT_MQ
from mqgather.errors import ConfigError
from mqgather.names import ENV_MQ


def mq_url(explicit: str | None = None) -> str:
    """The transport URL: ``explicit`` if given, else ``$MQGATHER_MQ``, else the default."""
    return explicit or os.environ.get(ENV_MQ) or DEFAULT_MQ


def open_transport(url: str | None = None) -> Transport:
    """Connect to the queue manager a URL names.

    Args:
        url: ``local:PATH`` (embedded queue manager in an SQLite file) or
            ``ibmmq://QMGR@host(port)[,host(port)]/CHANNEL[?options]``; ``None`` reads
            ``MQGATHER_MQ``.

    Raises:
        ConfigError: the URL has neither form.
        MQError: the queue manager could not be opened.
    """
    url = mq_url(url)
    if url.startswith("local:"):
        path = url[len("local:") :]
        if not path:
            raise ConfigError(ENV_MQ, "local: needs a file path, e.g. local:.mqgather/qm.db")
        from bridge.mq.local_qm import LocalQueueManager

        return LocalQueueManager(path)
    if url.startswith("ibmmq://"):
        from bridge.mq.ibmmq_adapter import IBMMQTransport, parse_ibmmq_url

        return IBMMQTransport(parse_ibmmq_url(url))
    raise ConfigError(
        ENV_MQ,
        f"{url!r} is not a queue manager URL; use local:PATH or ibmmq://QMGR@host(port)/CHANNEL",
    )
