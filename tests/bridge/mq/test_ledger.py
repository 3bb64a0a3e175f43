"""The ledger's move markers, found from the gather id alone, on every transport."""

from __future__ import annotations

from bridge.mq import ledger


def test_moves_are_found_by_gather_with_the_chain_that_made_them(connect, make_queue):
    qm = connect()
    queue = make_queue(qm)
    gather, owner, other = "g-1", "g-1 run-a", "g-1 run-b"
    # Grouped by gather, naming their chain: this one's and that of a gather that used
    # the CorrelId before it, whose history is gone.
    ledger.mark(qm, queue, ledger.ledger_key("1"), "moved", 1, group=ledger.move_group(gather),
                lines=["r1", "copy1", owner])  # fmt: skip
    ledger.mark(qm, queue, ledger.ledger_key("2"), "moved", 1, group=ledger.move_group(gather),
                lines=["r2", "copy2", other])  # fmt: skip
    # Grouped by owner, naming none (made before markers named their chain).
    ledger.mark(qm, queue, ledger.ledger_key("3"), "moved", 1, group=ledger.move_group(owner),
                lines=["r3", "copy3"])  # fmt: skip
    # A move's marker from before markers recorded their replies, and another gather's.
    ledger.mark(qm, queue, ledger.ledger_key("4"), "moved", 1, group=ledger.move_group(gather))
    ledger.mark(qm, queue, ledger.ledger_key("5"), "moved", 1, group=ledger.move_group("g-2"),
                lines=["r5", "copy5", "g-2 run-c"])  # fmt: skip
    qm.commit()

    assert sorted(ledger.moved_copies(qm, queue, gather)) == [
        (owner, "r1", "copy1"),
        (other, "r2", "copy2"),
    ]
    assert sorted(ledger.moved_copies(qm, queue, gather, [owner])) == [
        (owner, "r1", "copy1"),
        (owner, "r3", "copy3"),
        (other, "r2", "copy2"),
    ]
