"""Queue administration from the configuration (like a runmqsc script of DEFINE QLOCALs)."""

from __future__ import annotations

from bridge.mq.models import QueueAttributes
from bridge.mq.transport import Transport
from mqgather.config import MQGatherConfig

#: MAXDEPTH of a leg request queue the configuration does not define itself.
LEG_QUEUE_MAXDEPTH = 100_000
#: MAXDEPTH of a ledger queue the configuration does not define itself.
LEDGER_MAXDEPTH = 1_000_000


def setup_queues(qm: Transport, config: MQGatherConfig) -> list[str]:
    """Define every queue of the configuration (REPLACE), then each aggregate's ledger
    queue and leg request queues that do not exist yet.

    Returns:
        The queues defined, in that order.
    """
    defined = []
    for name, definition in config.queues.items():
        qm.define(QueueAttributes(name=name, **definition.model_dump()), replace=True)
        defined.append(name)
    for spec in config.aggregates.values():
        wanted = [(spec.ledger_queue, LEDGER_MAXDEPTH)]
        wanted += [(leg.queue(), LEG_QUEUE_MAXDEPTH) for leg in spec.legs]
        for queue, maxdepth in wanted:
            if queue not in defined and not qm.list_queues(queue):
                qm.define(QueueAttributes(name=queue, maxdepth=maxdepth))
                defined.append(queue)
    return defined
