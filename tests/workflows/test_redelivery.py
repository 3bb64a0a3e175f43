"""Telling a redelivery from a new message that reuses a MsgId: keys and their index."""

from __future__ import annotations

from bridge.mq.models import MQMessage, fingerprint
from workflows import redelivery
from workflows.redelivery import Seen

A = MQMessage(msg_id=b"A" * 24, body=b"one")
TWIN = MQMessage(msg_id=b"A" * 24, body=b"two")  # another message, the same MsgId
B = MQMessage(msg_id=b"B" * 24, body=b"one")


def keyed(message: MQMessage) -> str:
    return redelivery.key(message, fingerprint(message))


def test_a_key_is_the_msg_id_then_the_fingerprint_unless_there_is_none_or_it_is_off():
    assert keyed(A) == A.msg_id.hex() + fingerprint(A)
    assert redelivery.key(A, "") == A.msg_id.hex()
    assert redelivery.key(A, fingerprint(A), by_content=False) == A.msg_id.hex()
    assert redelivery.msg_id_of(keyed(A)) == A.msg_id.hex()
    assert redelivery.is_bare(A.msg_id.hex()) and not redelivery.is_bare(keyed(A))


def test_messages_with_fingerprints_are_told_apart_by_content():
    seen = Seen()
    seen.add(keyed(A))
    assert seen.redelivered(keyed(A)) and seen.has(keyed(A))
    assert not seen.redelivered(keyed(TWIN)) and not seen.has(keyed(TWIN))
    assert not seen.redelivered(keyed(B))


def test_a_msg_id_taken_alone_stands_for_every_message_with_it():
    # Taken from a bridge of an earlier release: no fingerprint, so which message it was
    # is unknown, and any message with that MsgId is the one (as it was decided then).
    seen = Seen()
    seen.add(A.msg_id.hex())
    assert seen.redelivered(keyed(A)) and seen.redelivered(keyed(TWIN))
    assert seen.has(keyed(TWIN)) and not seen.has(keyed(B))


def test_a_msg_id_alone_arriving_matches_any_message_taken_with_it():
    seen = Seen()
    seen.add(keyed(A))
    assert seen.redelivered(A.msg_id.hex())
    # Asked (not arriving), a MsgId alone names a message taken with no fingerprint only.
    assert not seen.has(A.msg_id.hex()) and seen.any_with(A.msg_id.hex())


def test_the_index_rebuilds_from_the_carried_list_and_compares_by_value():
    carried = [keyed(A), B.msg_id.hex()]
    one, two = Seen(), Seen()
    one.rebuild(carried)
    for k in carried:
        two.add(k)
    assert one == two and len(one) == 2 and one != Seen()
    assert one.taken([keyed(A), keyed(TWIN), keyed(B)]) == [
        keyed(A), keyed(B)
    ]  # fmt: skip
