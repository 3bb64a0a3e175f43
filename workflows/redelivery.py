"""Telling a redelivery from a new message that reuses a MsgId.

A message the bridge signalled and could not commit comes back with the same MsgId and
content; it must change nothing. Another message may carry the same MsgId (an
application sets it, or passes the request's on), and must be taken. So a message is
remembered by its **key**: its MsgId in hex followed by its fingerprint
(:func:`bridge.mq.models.fingerprint`, computed by the bridge). A message known only by
its MsgId (from a bridge or a gather of a release before fingerprints) has its MsgId as
its key, and stands for every message with that MsgId, as it did then.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

from bridge.mq.models import ID_LENGTH, MQMessage

#: Hex digits of a MsgId, which begin every key.
MSG_ID_HEX = 2 * ID_LENGTH


def key(message: MQMessage, fingerprint: str, by_content: bool = True) -> str:
    """A message's key: its MsgId (hex) followed by its fingerprint when there is one and
    messages are told apart by content (``by_content``), else its MsgId alone."""
    msg_id = message.msg_id.hex()
    if by_content and fingerprint:  # the models keep it to FINGERPRINT_HEX digits or none
        return msg_id + fingerprint
    return msg_id


def msg_id_of(key: str) -> str:
    """The MsgId (hex) a key begins with."""
    return key[:MSG_ID_HEX]


def is_bare(key: str) -> bool:
    """Whether a key is a MsgId alone (no fingerprint)."""
    return len(key) <= MSG_ID_HEX


class Seen:
    """An index over the keys of the messages taken so far (the list in the state is
    what is carried; this is rebuilt from it)."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.msg_ids: set[str] = set()

    def __len__(self) -> int:
        return len(self.keys)

    def __eq__(self, other: object) -> bool:
        # States compare equal by their private parts too (pydantic), so by value here.
        return isinstance(other, Seen) and self.keys == other.keys

    __hash__ = None  # type: ignore[assignment]  # mutable

    def rebuild(self, keys: Iterable[str]) -> None:
        """Index ``keys`` afresh."""
        self.keys = set(keys)
        self.msg_ids = {msg_id_of(k) for k in self.keys}

    def add(self, key: str) -> None:
        """Remember one more message."""
        self.keys.add(key)
        self.msg_ids.add(msg_id_of(key))

    def has(self, key: str) -> bool:
        """Whether the message of ``key`` was taken: the same message, or its MsgId taken
        with no fingerprint (which stands for every message of that MsgId)."""
        return key in self.keys or msg_id_of(key) in self.keys

    def taken(self, keys: Iterable[str]) -> list[str]:
        """Those of ``keys`` whose message was taken (:meth:`has`)."""
        return [k for k in keys if self.has(k)]

    def redelivered(self, key: str) -> bool:
        """Whether a message arriving with ``key`` is one taken before: as :meth:`has`,
        and a MsgId alone also matches any message taken with that MsgId."""
        return self.has(key) or (is_bare(key) and key in self.msg_ids)

    def any_with(self, msg_id: str) -> bool:
        """Whether any message with this MsgId (hex) was taken."""
        return msg_id in self.msg_ids


class _Kept(Protocol):
    """A reply or an item as its workflow keeps it."""

    message: MQMessage
    held: Any
    fingerprint: str

    def model_copy(self, *, update: dict[str, Any]) -> Any: ...


K = TypeVar("K", bound=_Kept)


def with_body(kept: K, came: K) -> K:
    """``kept`` with the body ``came`` brings, when ``kept`` is held by a reference and
    ``came`` is the same message (by content) inline: the bridge held it for its
    workflow's bytes, and its put on the hold queue backed out with its get, so the
    reference names nothing and the body is kept instead. Else ``kept`` as it is."""
    if kept.held is None or came.held is not None or not came.fingerprint:
        return kept
    if key(kept.message, kept.fingerprint) != key(came.message, came.fingerprint):
        return kept
    return kept.model_copy(update={"message": came.message, "held": None})
