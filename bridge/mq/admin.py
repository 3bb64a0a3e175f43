"""Queue administration from the configuration (like a runmqsc script of DEFINE QLOCALs)."""

from __future__ import annotations

from bridge.mq.models import QueueAttributes
from bridge.mq.transport import Transport
from mqgather.config import MQGatherConfig

#: MAXDEPTH of a leg request queue the configuration does not define itself.
LEG_QUEUE_MAXDEPTH = 100_000


def setup_queues(qm: Transport, config: MQGatherConfig) -> list[str]:
    """Define every queue of the configuration (REPLACE), then each aggregate leg's
    request queue that does not exist yet.

    Returns:
        The queues defined, in that order.
    """
    defined = []
    for name, definition in config.queues.items():
        qm.define(QueueAttributes(name=name, **definition.model_dump()), replace=True)
        defined.append(name)
    for spec in config.aggregates.values():
        for leg in spec.legs:
            queue = leg.queue()
            if queue not in defined and not qm.list_queues(queue):
                qm.define(QueueAttributes(name=queue, maxdepth=LEG_QUEUE_MAXDEPTH))
                defined.append(queue)
    return defined
