"""Large bodies on the embedded queue manager: kept apart from their message's row, so
neither a put nor a get under syncpoint copies or rewrites them whole."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from bridge.mq.local_qm import _BODY_APART, _INSERT, LocalQueueManager
from bridge.mq.models import Match, MQMessage, PutOptions, QueueAttributes

MB = 1024 * 1024


def _qm(tmp_path: Path) -> LocalQueueManager:
    qm = LocalQueueManager(tmp_path / "qm.db")
    qm.define(QueueAttributes(name="Q", maxmsgl=100 * MB))
    return qm


def _stored(path: Path) -> list[tuple[int, int, int | None]]:
    """(row's body length, the bodies table's length or None) per message, queue order."""
    with sqlite3.connect(path) as db:
        return db.execute(
            "SELECT m.id, length(m.body), length(b.body) FROM messages m "
            "LEFT JOIN bodies b ON b.id = m.id ORDER BY m.id"
        ).fetchall()


def test_mixed_sizes_in_one_unit_of_work_keep_their_order_and_bytes(tmp_path):
    qm = _qm(tmp_path)
    sizes = [10, 3 * MB, 1000, _BODY_APART + 1, _BODY_APART, 2 * MB]
    bodies = [os.urandom(n) for n in sizes]
    for body in bodies:
        qm.put("Q", MQMessage(body=body), PutOptions(syncpoint=True))
    qm.commit()
    stored = _stored(tmp_path / "qm.db")
    assert [(row, apart) for _, row, apart in stored] == [
        (n, None) if n <= _BODY_APART else (0, n) for n in sizes
    ]
    assert [qm.get("Q", syncpoint=False).body for _ in sizes] == bodies
    assert _stored(tmp_path / "qm.db") == []  # no body left behind its message


def test_a_backed_out_get_keeps_the_body_and_a_committed_one_removes_it(tmp_path):
    qm = _qm(tmp_path)
    body = os.urandom(5 * MB)
    put = qm.put("Q", MQMessage(body=body), PutOptions(syncpoint=False))
    got = qm.get("Q", match=Match(msg_id=put.msg_id))
    assert got.body == body
    qm.backout()
    assert qm.get("Q").body == body
    qm.commit()
    with sqlite3.connect(tmp_path / "qm.db") as db:
        assert db.execute("SELECT COUNT(*) FROM bodies").fetchone() == (0,)


def test_a_backed_out_put_leaves_nothing(tmp_path):
    qm = _qm(tmp_path)
    qm.put("Q", MQMessage(body=os.urandom(2 * MB)), PutOptions(syncpoint=True))
    qm.backout()
    qm.commit()
    assert _stored(tmp_path / "qm.db") == []


def test_a_large_body_kept_in_its_row_by_an_earlier_release_is_still_read(tmp_path):
    qm = _qm(tmp_path)
    body = os.urandom(2 * MB)
    row = list(LocalQueueManager._row("Q", MQMessage(body=body)))
    with sqlite3.connect(tmp_path / "qm.db") as db:  # the row as earlier releases wrote it
        db.execute(_INSERT, row)
    assert qm.get("Q", syncpoint=False).body == body
