"""The embedded queue manager's matched gets on deep queues.

The ledger check before every PUT browses the ledger queue for one MsgId, and the ledger
keeps a marker per PUT for days. The work of that browse must not grow with the queue's
depth. It is counted in SQLite virtual-machine steps, which do not depend on the
machine's speed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from bridge.mq import ledger
from bridge.mq.errors import NoMessageAvailable
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import Match, MQMessage, PutOptions, QueueAttributes

#: SQLite calls the progress handler every this many virtual-machine steps.
_STEP = 100


def _steps(qm: LocalQueueManager, action: Callable[[], object]) -> int:
    """Virtual-machine steps (in units of ``_STEP``) the connection spends on ``action``."""
    counted = [0]

    def tick() -> int:
        counted[0] += 1
        return 0  # go on

    db: sqlite3.Connection = qm._db  # the connection the queue manager runs its SQL on
    db.set_progress_handler(tick, _STEP)
    try:
        action()
    finally:
        db.set_progress_handler(None, _STEP)
    return counted[0]


def _fill(qm: LocalQueueManager, queue: str, count: int) -> None:
    for i in range(count):
        key = ledger.ledger_key("fill", str(i))
        qm.put(
            queue,
            MQMessage(msg_id=key, correl_id=key, group_id=key, body=b"marker"),
            PutOptions(syncpoint=True),
        )
    qm.commit()


@pytest.mark.parametrize("field", ["msg_id", "correl_id", "group_id"])
def test_a_matched_browse_costs_the_same_on_a_deep_queue(tmp_path: Path, field: str) -> None:
    qm = LocalQueueManager(tmp_path / "qm.db")
    qm.define(QueueAttributes(name="SHALLOW", maxdepth=100_000))
    qm.define(QueueAttributes(name="DEEP", maxdepth=100_000))
    _fill(qm, "SHALLOW", 10)
    _fill(qm, "DEEP", 2_000)
    wanted = ledger.ledger_key("fill", "7")  # on both queues
    missing = ledger.ledger_key("not", "there")

    def browse(queue: str, key: bytes) -> Callable[[], object]:
        def run() -> object:
            try:
                return qm.get(queue, match=Match(**{field: key}), browse="first")
            except NoMessageAvailable as exc:
                return exc

        return run

    for key in (wanted, missing):
        shallow = _steps(qm, browse("SHALLOW", key))
        deep = _steps(qm, browse("DEEP", key))
        # Scanning the deep queue would cost thousands of steps more; an index lookup costs
        # a few more at most (one more level of the b-tree).
        assert deep <= shallow + 5, (field, key == wanted, shallow, deep)
    found = browse("DEEP", wanted)()
    assert isinstance(found, MQMessage) and getattr(found, field) == wanted
    qm.close()


def test_the_ledger_check_is_an_index_lookup_on_a_ledger_of_many_markers(tmp_path: Path) -> None:
    qm = LocalQueueManager(tmp_path / "qm.db")
    qm.define(QueueAttributes(name="LEDGER", maxdepth=100_000))
    _fill(qm, "LEDGER", 20)
    few = _steps(qm, lambda: ledger.done(qm, "LEDGER", ledger.ledger_key("x")))
    _fill(qm, "LEDGER", 2_000)
    many = _steps(qm, lambda: ledger.done(qm, "LEDGER", ledger.ledger_key("x")))
    assert many <= few + 5, (few, many)
    assert ledger.done(qm, "LEDGER", ledger.ledger_key("fill", "1999"))
    qm.close()


def test_a_file_with_the_old_indexes_gets_the_ordered_ones(tmp_path: Path) -> None:
    path = tmp_path / "qm.db"
    LocalQueueManager(path).close()
    with sqlite3.connect(path) as db:
        # The indexes files had before: the planner passed over them for queue order.
        for name in ("correl", "msgid", "group"):
            db.execute(f"DROP INDEX messages_{name}_order")
        db.execute("CREATE INDEX messages_msgid ON messages (queue, msg_id)")
        db.execute("CREATE INDEX messages_correl ON messages (queue, correl_id)")
        db.execute("CREATE INDEX messages_group ON messages (queue, group_id)")
    LocalQueueManager(path).close()
    with sqlite3.connect(path) as db:
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"messages_msgid_order", "messages_correl_order", "messages_group_order"} <= names
    assert not {"messages_msgid", "messages_correl", "messages_group"} & names
