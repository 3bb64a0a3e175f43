"""Queue administration from the configuration (like a runmqsc script of DEFINE QLOCALs)."""

from __future__ import annotations

from bridge.mq.models import QueueAttributes
from bridge.mq.transport import Transport
from mqgather.config import MQGatherConfig, referenced_queues

#: MAXDEPTH of a referenced queue the configuration does not define itself.
REFERENCED_QUEUE_MAXDEPTH = 100_000
#: MAXDEPTH of a ledger queue the configuration does not define itself.
LEDGER_MAXDEPTH = 1_000_000


def setup_queues(qm: Transport, config: MQGatherConfig) -> list[str]:
    """Define every queue of the configuration (REPLACE), then every other queue it
    references (BOQNAMEs, aggregate reply, output, ledger and leg request queues) that
    does not exist yet.

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
        maxdepth = LEDGER_MAXDEPTH if queue in ledgers else REFERENCED_QUEUE_MAXDEPTH
        qm.define(QueueAttributes(name=queue, maxdepth=maxdepth, descr=purpose[:64]))
        defined.append(queue)
    return defined
