"""The ``ibmmq`` package over a stand-in for IBM's C library (see :mod:`.ibmmqc`).

``install()`` puts the stand-in where ``ibmmq`` imports its C extension from, before
``ibmmq`` is imported, so the real Python layer of ``ibmmq`` runs over it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.mqi_standin import ibmmqc
from tests.mqi_standin.ibmmqc import QueueManagerConfig


def install() -> None:
    """Make ``import ibmmq`` load the stand-in as its C extension (``ibmmq`` itself is
    imported later, by the adapter, as in production)."""
    loaded = sys.modules.get("ibmmq.ibmmqc")
    if loaded is not None and loaded is not ibmmqc:
        raise RuntimeError("the real ibmmq C extension is already loaded")
    sys.modules["ibmmq.ibmmqc"] = ibmmqc


def serve(name: str, path: Path, **rules: object) -> QueueManagerConfig:
    """Serve the embedded queue manager at ``path`` as IBM MQ queue manager ``name``."""
    config = QueueManagerConfig(path=path, **rules)  # type: ignore[arg-type]
    ibmmqc.QUEUE_MANAGERS[name] = config
    return config
