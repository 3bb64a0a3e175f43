"""Upper limits of configuration keys: what a timer, an MQ Expiry or a Temporal payload
can still carry.

They are checked where a configuration enters (the file, scatter), never where a
recorded history is read back: a gather started under an earlier release, with a value
that is past a limit now, replays as it ran.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from mqgather import constants as k

#: The longest a batch may gather: its first message waits no longer than this.
MAX_BATCH_DELAY_SECONDS = 7 * 24 * 3600

#: A leg's keys (``legs = [{...}]``).
LEG: Mapping[str, float] = {
    "timeout_seconds": k.MAX_WAIT_SECONDS,
    "retry_after_seconds": k.MAX_WAIT_SECONDS,
}
#: An aggregate's keys (``[aggregates.NAME]``); for ``legs``, how many.
AGGREGATE: Mapping[str, float] = {
    "legs": k.MAX_LEGS,
    "max_group_size": k.MAX_LEGS,
    "timeout_seconds": k.MAX_WAIT_SECONDS,
    "unknown_timeout_seconds": k.MAX_WAIT_SECONDS,
    "late_window_seconds": k.MAX_WAIT_SECONDS,
    "ledger_hours": k.MAX_LEDGER_HOURS,
}
#: A collector's keys (``[collectors.NAME]``): its defaults within its rules' own limits.
COLLECTOR: Mapping[str, float] = {
    "default_max_delay_seconds": MAX_BATCH_DELAY_SECONDS,
    "default_max_bytes": k.QMGR_MAXMSGL,
    "ledger_hours": k.MAX_LEDGER_HOURS,
}


def shown(number: float) -> str:
    """A number as a limit's message writes it: whole ones with thousands separators."""
    if float(number).is_integer() and abs(number) < 1e15:
        return f"{int(number):,}"
    return f"{number:,g}"


def first_over(model: BaseModel, limits: Mapping[str, float]) -> tuple[str, str] | None:
    """The first key of ``model`` past its limit and why (infinity is past every limit),
    or None."""
    for key, limit in limits.items():
        value = getattr(model, key)
        if isinstance(value, tuple | list):
            if len(value) > limit:
                return key, f"{len(value):,} of them, more than {shown(limit)}"
        elif value is not None and not value <= limit:
            return key, f"{shown(value)} is more than {shown(limit)}"
    return None
