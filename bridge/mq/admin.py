"""Queue administration from the configuration (like a runmqsc script of DEFINE QLOCALs)."""

from __future__ import annotations

from dataclasses import dataclass

from bridge.mq.errors import MQError, UnknownObjectName
from bridge.mq.models import QueueAttributes
from bridge.mq.transport import Transport
from mqgather.config import SET_ASIDE, MQGatherConfig, referenced_queues
from mqgather.constants import (
    LEAST_MAXUMSGS_COLLECTOR,
    LEAST_MAXUMSGS_GATHER,
    LEDGER_MAXMSGL,
    QMGR_MAXMSGL,
)

#: MAXDEPTH of a referenced queue the configuration does not define itself.
REFERENCED_QUEUE_MAXDEPTH = 100_000
#: MAXDEPTH of a ledger queue the configuration does not define itself.
LEDGER_MAXDEPTH = 1_000_000


def setup_queues(qm: Transport, config: MQGatherConfig) -> list[str]:
    """Define every queue of the configuration (REPLACE), then every other queue it
    references (BOQNAMEs, aggregate reply, output, hold, ledger and leg request queues)
    that does not exist yet, with MAXMSGL as large as the queue manager takes.

    Returns:
        The queues defined, in that order.
    """
    defined = []
    for name, definition in config.queues.items():
        qm.define(QueueAttributes(name=name, **definition.model_dump()), replace=True)
        defined.append(name)
    ledgers = {spec.ledger_queue for spec in config.aggregates.values()}
    for queue, purpose in referenced_queues(config).items():
        if queue in defined or qm.list_queues(queue):
            continue
        if queue in ledgers:
            attrs = QueueAttributes(name=queue, maxdepth=LEDGER_MAXDEPTH, maxmsgl=LEDGER_MAXMSGL)
        else:
            # Replies and responses may be as large as the queue manager takes (IBM MQ's
            # MAXMSGL of a new queue, 4 MB, would refuse a back end's 5 MB document).
            attrs = QueueAttributes(
                name=queue, maxdepth=REFERENCED_QUEUE_MAXDEPTH, maxmsgl=QMGR_MAXMSGL
            )
        qm.define(attrs.model_copy(update={"descr": purpose[:64]}))
        defined.append(queue)
    return defined


#: Where a finding about the queue manager itself is listed.
QMGR_ROW = "(queue manager)"


@dataclass(frozen=True)
class Finding:
    """One thing about a queue (or the queue manager) that will stop mqgather working."""

    queue: str
    purpose: str
    problem: str


def check_queues(
    qm: Transport,
    config: MQGatherConfig,
    more: dict[str, str] | None = None,
    batch_bytes: dict[str, tuple[int, str]] | None = None,
) -> list[Finding]:
    """What on the queue manager the configuration's queues need and do not have: each
    referenced queue defined, open to put (and to get, for the queues read), its
    backouts bounded, large enough for what is set aside there, a dead-letter queue, and
    a MAXUMSGS a unit of work fits in. Reads only; changes nothing.

    Args:
        qm: the queue manager.
        config: the configuration.
        more: other queues mqgather puts to, with what for (collector rules' targets).
        batch_bytes: for a collector's target queue, the largest max_bytes of the rules
            that send it batches, and which rule that is.
    """
    configured = referenced_queues(config)
    # The configuration's own purpose wins where a rule targets one of its queues.
    purposes = {**{q: p for q, p in (more or {}).items() if q}, **configured}
    found: list[Finding] = []
    attrs: dict[str, QueueAttributes] = {}
    for queue, purpose in purposes.items():
        try:
            attrs[queue] = qm.inquire(queue)
        except UnknownObjectName:
            how = "`mqgather queues setup`" if queue in configured else "`mqgather queues define`"
            found.append(Finding(queue, purpose, f"not defined: run {how} or DEFINE QLOCAL"))
        except MQError as exc:
            found.append(Finding(queue, purpose, f"cannot be inquired: {exc}"))
    inputs = {spec.reply_queue for spec in config.aggregates.values()}
    inputs |= {spec.input_queue for spec in config.collectors.values()}
    read = inputs | {spec.hold_queue for spec in config.aggregates.values()}
    read |= {spec.ledger_queue for spec in config.aggregates.values()}
    read |= {c.hold_queue for c in config.collectors.values()}
    read |= {c.ledger_queue for c in config.collectors.values()}
    for queue, a in attrs.items():
        where = purposes[queue]
        if queue in read and a.get == "disabled":
            found.append(Finding(queue, where, "GET(DISABLED): nothing is got or browsed "
                                 "there until GET(ENABLED)"))  # fmt: skip
        if queue not in inputs and a.put == "disabled":
            found.append(Finding(queue, where, "PUT(DISABLED): nothing is put there until "
                                 "PUT(ENABLED)"))  # fmt: skip
        if a.usage == "xmitq":
            found.append(Finding(queue, where, "USAGE(XMITQ): a transmission queue, whose "
                                 "messages wait for a channel behind an MQXQH; define it "
                                 "USAGE(NORMAL)"))  # fmt: skip
        if queue in inputs:
            found += _backouts(qm, queue, where, a)
    found += _set_aside_room(config, attrs, purposes)
    found += _ledger_room(config, attrs, purposes)
    found += _batch_room(batch_bytes or {}, attrs, purposes)
    return found + _qmgr(qm, config)


def _ledger_room(
    config: MQGatherConfig, attrs: dict[str, QueueAttributes], purposes: dict[str, str]
) -> list[Finding]:
    """Each ledger queue takes the largest marker: one too long for it fails its PUT on
    every attempt (MQRC_MSG_TOO_BIG_FOR_Q), and the response or batch with it."""
    ledgers = {spec.ledger_queue for spec in config.aggregates.values()}
    ledgers |= {c.ledger_queue for c in config.collectors.values()}
    return [
        Finding(queue, purposes[queue],
                f"MAXMSGL({attrs[queue].maxmsgl}) is below {LEDGER_MAXMSGL}: the marker of a "
                "gather of many replies, or of a large batch, would not fit (17 bytes a "
                f"message), and its PUT would fail each time; ALTER QLOCAL({queue}) "
                f"MAXMSGL({LEDGER_MAXMSGL})")
        for queue in sorted(ledgers)
        if queue in attrs and attrs[queue].maxmsgl < LEDGER_MAXMSGL
    ]  # fmt: skip


def _batch_room(
    batch_bytes: dict[str, tuple[int, str]],
    attrs: dict[str, QueueAttributes],
    purposes: dict[str, str],
) -> list[Finding]:
    """Each target queue takes the batches its rules close: one longer than its MAXMSGL
    is put in parts, and a message longer than MAXMSGL goes to the failure queue."""
    return [
        Finding(queue, purposes.get(queue, "a collector's batches"),
                f"MAXMSGL({attrs[queue].maxmsgl}) is below max_bytes ({most}) of {rule}: its "
                "batches are put in parts that fit, and a message longer than MAXMSGL goes "
                f"to the failure queue; ALTER QLOCAL({queue}) MAXMSGL({most}) or lower "
                "max_bytes")
        for queue, (most, rule) in sorted(batch_bytes.items())
        if queue in attrs and attrs[queue].maxmsgl < most
    ]  # fmt: skip


def _backouts(qm: Transport, queue: str, where: str, a: QueueAttributes) -> list[Finding]:
    """An input queue's BOTHRESH and BOQNAME: a message that fails each time must end
    somewhere."""
    if not a.bothresh:
        return [Finding(queue, where, "BOTHRESH(0): a message that fails every time is set "
                        "aside (BOQNAME, else the dead-letter queue) after the bridge's "
                        "--backout-threshold; set BOTHRESH and BOQNAME to choose when and "
                        "where")]  # fmt: skip
    if a.boqname and not qm.list_queues(a.boqname):
        return [Finding(queue, where, f"BOQNAME({a.boqname}) is not defined")]
    return []


def _set_aside_room(
    config: MQGatherConfig, attrs: dict[str, QueueAttributes], purposes: dict[str, str]
) -> list[Finding]:
    """Each queue a message is set aside on takes one as long as its input does."""
    pairs = [(spec.reply_queue, getattr(spec, field))
             for spec in config.aggregates.values() for field in SET_ASIDE
             if field != "ledger_queue"]  # fmt: skip
    pairs += [(c.input_queue, queue) for c in config.collectors.values()
              for queue in (c.failure_queue, c.hold_queue)]  # fmt: skip
    found = []
    for source, target in dict.fromkeys(pairs):
        if source in attrs and target in attrs and attrs[target].maxmsgl < attrs[source].maxmsgl:
            found.append(Finding(
                target, purposes[target],
                f"MAXMSGL({attrs[target].maxmsgl}) is below {source}'s "
                f"({attrs[source].maxmsgl}): a longer message from there cannot be set aside "
                "here, and is backed out to BOQNAME instead",
            ))  # fmt: skip
    return found


def _dead_letter_queue(qm: Transport, dlq: str) -> list[Finding]:
    """The queue DEADQ names: there, and open to puts. A response, forward, re-request
    or collector batch refused for good is dead-lettered in the unit of work of its last
    attempt, which fails with it."""
    try:
        a = qm.inquire(dlq)
    except UnknownObjectName:
        problem = (
            f"DEADQ({dlq}) is not defined: a response, forward, re-request or collector "
            "batch refused for good cannot be set aside, and is retried for ever"
        )
        return [Finding(QMGR_ROW, "DEADQ", problem)]
    except MQError as exc:
        return [Finding(dlq, "the dead-letter queue", f"cannot be inquired: {exc}")]
    if a.put == "disabled":
        return [Finding(dlq, "the dead-letter queue", "PUT(DISABLED): a response, forward, "
                        "re-request or collector batch refused for good is retried until "
                        "PUT(ENABLED)")]  # fmt: skip
    return []


def _qmgr(qm: Transport, config: MQGatherConfig) -> list[Finding]:
    """The queue manager's DEADQ and MAXUMSGS."""
    found = []
    dlq = qm.dead_letter_queue()
    if not dlq:
        found.append(Finding(QMGR_ROW, "DEADQ", "no dead-letter queue: a response, "
                             "forward, re-request or collector batch refused for good has "
                             "nowhere to go"))  # fmt: skip
    else:
        found += _dead_letter_queue(qm, dlq)
    least = LEAST_MAXUMSGS_COLLECTOR if config.collectors else LEAST_MAXUMSGS_GATHER
    maxumsgs = qm.max_uncommitted()
    if maxumsgs < least:
        found.append(Finding(QMGR_ROW, "MAXUMSGS", f"MAXUMSGS({maxumsgs}): a bridge needs "
                             f"at least {least} messages in one unit of work"))  # fmt: skip
    for spec in config.aggregates.values():
        if len(spec.legs) > maxumsgs:
            found.append(Finding(QMGR_ROW, "MAXUMSGS", f"MAXUMSGS({maxumsgs}): scatter puts "
                                 f"the {len(spec.legs)} requests of aggregate {spec.name} in "
                                 "one unit of work"))  # fmt: skip
    return found
