"""Upper limits of configuration keys: what a timer, an MQ Expiry or a Temporal payload
can still carry, and the names IBM MQ takes for a message property and for a queue.

They are checked where a configuration enters (the file, scatter), never where a
recorded history is read back: a gather started under an earlier release, with a value
that is past a limit now, replays as it ran.
"""

from __future__ import annotations

import re
import unicodedata
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


#: MQ_MAX_PROPERTY_NAME_LENGTH: the longest name MQSETMP takes (MQRC_PROPERTY_NAME_LENGTH_ERR).
MAX_PROPERTY_NAME_LENGTH = 4095
#: The JMS names the MQI may set (every other name beginning "JMS" is refused).
_JMS_SETTABLE = frozenset(
    {"JMSCorrelationID", "JMSReplyTo", "JMSType", "JMSXGroupID", "JMSXGroupSeq"}
)
#: Selector keywords: no property may be called one, in any case, alone or after "usr.".
_KEYWORDS = frozenset(
    {"NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE"}
)
#: Unicode categories of what may begin a Java identifier (letters, letter numbers,
#: currency signs, connectors such as "_"), and of what may follow besides.
_STARTS = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Nl", "Sc", "Pc"})
_FOLLOWS = _STARTS | {"Nd", "Mn", "Mc", "Cf"}


def _java_part(char: str) -> bool:
    # Java also lets the controls it ignores in identifiers stand inside one.
    code = ord(char)
    ignorable = code <= 0x08 or 0x0E <= code <= 0x1B or 0x7F <= code <= 0x9F
    return ignorable or unicodedata.category(char) in _FOLLOWS


def property_name_problem(name: str) -> str | None:
    """Why IBM MQ refuses ``name`` for a message property it is asked to set (MQSETMP:
    MQRC_PROPERTY_NAME_ERROR, or MQRC_PROPERTY_NAME_LENGTH_ERR for its length), or None.

    MQ's rules: a Java identifier in which "." may separate parts; no name beginning
    "JMS" but the five the MQI sets, nor "usr.JMS"; no selector keyword; nothing
    beginning "Body" or "Root" but "Root.MQMD."; one "." at most after a leading "mq" (in
    any case) unless it is "mq_usr"; nothing beyond Unicode's Basic Multilingual Plane.
    """
    if not 0 < len(name) <= MAX_PROPERTY_NAME_LENGTH:
        return (
            f"a property name is 1 to {MAX_PROPERTY_NAME_LENGTH:,} characters, not "
            f"{len(name):,} (MQRC_PROPERTY_NAME_LENGTH_ERR)"
        )
    refused = "MQRC_PROPERTY_NAME_ERROR"
    beyond = next((c for c in name if ord(c) > 0xFFFF), None)
    if beyond is not None:
        return f"{beyond!r} is beyond what MQ takes in a property name (U+FFFF) ({refused})"
    if unicodedata.category(name[0]) not in _STARTS:
        return f"a property name cannot begin with {name[0]!r}; begin with a letter ({refused})"
    odd = next((c for c in name if c != "." and not _java_part(c)), None)
    if odd is not None:
        return (
            f"{odd!r} cannot stand in a property name: letters, digits, _ and $, with "
            f"dots between parts ({refused})"
        )
    if ".." in name or name.endswith("."):
        return f"a dot in a property name stands between two parts ({refused})"
    if (name.startswith("JMS") and name not in _JMS_SETTABLE) or name.startswith("usr.JMS"):
        return f"names beginning JMS are the JMS properties' ({refused})"
    if name.removeprefix("usr.").upper() in _KEYWORDS:
        return f"{name!r} is a selector keyword ({refused})"
    if name.startswith(("Body", "Root")) and not name.startswith("Root.MQMD."):
        return f"names beginning Body or Root are MQ's message tree ({refused})"
    lowered = name.lower()
    if lowered.startswith("mq") and not lowered.startswith("mq_usr") and name.count(".") > 1:
        return f"a name beginning mq has one dot at most ({refused})"
    return None


_NOT_IN_MQ_NAMES = re.compile(f"[^{k.MQ_NAME_CHARACTERS}]")


def queue_name_problem(name: str) -> str | None:
    """Why IBM MQ refuses ``name`` for a queue (DEFINE: MQRCCF_OBJECT_NAME_ERROR; an
    MQOPEN finds no such queue), or None. An empty name is the caller's to judge (an
    optional queue left blank).

    MQ's rule: at most 48 characters, of A-Z, a-z, 0-9, period, forward slash, underscore
    and percent; no blank. A queue manager's name follows the same rule.
    """
    if len(name) > k.MQ_NAME_LENGTH:
        return f"{len(name)} characters; MQ names are at most {k.MQ_NAME_LENGTH}"
    bad = _NOT_IN_MQ_NAMES.search(name)
    if bad is None:
        return None
    return f"{bad.group()!r} cannot stand in an MQ queue name: only A-Z, a-z, 0-9 and . / _ %"
