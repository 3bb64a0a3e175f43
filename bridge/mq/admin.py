"""Queue administration from the configuration (like a runmqsc script of DEFINE QLOCALs)."""

from __future__ import annotations

from bridge.mq.models import QueueAttributes
from bridge.mq.transport import Transport
from mqgather.config import MQGatherConfig, referenced_queues
from mqgather.constants import QMGR_MAXMSGL

#: MAXDEPTH of a referenced queue the configuration does not define itself.
REFERENCED_QUEUE_MAXDEPTH = 100_000
#: MAXDEPTH of a ledger queue the configuration does not define itself.
LEDGER_MAXDEPTH = 1_000_000
#: MAXMSGL of such a ledger queue: a marker is a few hundred bytes.
LEDGER_MAXMSGL = 4096


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
