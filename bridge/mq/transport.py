"""The transport interface: the only way mqgather talks to a queue manager."""

from __future__ import annotations

import abc
from collections.abc import Iterator
from types import TracebackType
from typing import Literal, Self

from bridge.mq.errors import NoMessageAvailable, SyncpointLimitReached
from bridge.mq.models import Match, MQMessage, PutOptions, QueueAddress, QueueAttributes

#: MQWI_UNLIMITED: a get that waits until a message comes.
WAIT_UNLIMITED = -1

Browse = Literal["first", "next"]


class Transport(abc.ABC):
    """A connection to one queue manager, with at most one unit of work open at a time.

    Gets and puts under syncpoint join the connection's unit of work, which ends with
    :meth:`commit` or :meth:`backout`. Closing a connection backs out what is uncommitted.
    """

    qmgr_name: str
    #: Whether boolean message properties come back as the integers 0 / 1 (IBM MQ through
    #: the ``ibmmq`` library, whose C layer returns MQTYPE_BOOLEAN values as integers and
    #: does not report a property's type).
    booleans_read_as_int: bool = False

    @abc.abstractmethod
    def put(
        self,
        queue: str,
        message: MQMessage,
        options: PutOptions | None = None,
        *,
        qmgr: str = "",
    ) -> MQMessage:
        """Put a message; returns it as put (MsgId generated if it was MQMI_NONE). A blank
        ReplyToQMgr is stored as this queue manager's name, as MQ stores it.

        Args:
            queue: the queue's name on the queue manager that owns it.
            message: what to put.
            options: syncpoint, context and group options.
            qmgr: the queue manager that owns ``queue`` (MQOD ObjectQMgrName): blank or
                this one's name for a queue of its own; another name the queue manager
                resolves to a route there (a transmission queue, a queue manager alias,
                a cluster), failing with MQRC_UNKNOWN_REMOTE_Q_MGR where it has none.
        """

    def is_local(self, qmgr: str) -> bool:
        """Whether a queue manager name (a ReplyToQMgr, an ObjectQMgrName) means this one:
        blank, or its own name."""
        name = qmgr.rstrip(" \x00")
        return not name or name == self.qmgr_name

    def address(self, queue: str, qmgr: str) -> QueueAddress:
        """``queue`` at queue manager ``qmgr``, as :meth:`put` takes it: the queue
        manager blank when it is this one (:meth:`is_local`)."""
        return QueueAddress(queue, "" if self.is_local(qmgr) else qmgr.strip(" \x00"))

    @abc.abstractmethod
    def get(
        self,
        queue: str,
        *,
        wait_ms: int = 0,
        syncpoint: bool = True,
        match: Match | None = None,
        browse: Browse | None = None,
        logical_order: bool = False,
        all_available: bool = False,
    ) -> MQMessage:
        """Get (or browse) the first matching message in priority then arrival order.

        Args:
            queue: queue name.
            wait_ms: how long to wait for a message; ``WAIT_UNLIMITED`` waits forever.
            syncpoint: join the unit of work (ignored when browsing).
            match: only messages with these MsgId / CorrelId / GroupId.
            browse: ``"first"`` or ``"next"`` to look without removing.
            logical_order: MQGMO_LOGICAL_ORDER. Outside a group only a first message
                (MsgSeqNumber 1, or a message in no group) is eligible; once one is got,
                this connection gets that group's next message in sequence, whatever its
                priority or arrival, until the last in the group. Browsing keeps its own
                group position.
            all_available: MQGMO_ALL_MSGS_AVAILABLE: a group's messages stay invisible
                until every one from 1 to the last-in-group is on the queue.

        Raises:
            NoMessageAvailable: no matching message within the wait.
            GroupOrderError: a match that is not the group's next message, or a group got
                partly in and partly out of syncpoint.
        """

    def get_batch(
        self, queue: str, max_messages: int, *, wait_ms: int = 0, match: Match | None = None
    ) -> list[MQMessage]:
        """Get up to ``max_messages`` under syncpoint, waiting only for the first; fewer
        when the unit of work reaches MAXUMSGS.

        Returns an empty list when nothing came within the wait.

        Raises:
            SyncpointLimitReached: the unit of work had no room for even one message.
        """
        batch: list[MQMessage] = []
        wait = wait_ms
        while len(batch) < max_messages:
            try:
                batch.append(self.get(queue, wait_ms=wait, syncpoint=True, match=match))
            except NoMessageAvailable:
                break
            except SyncpointLimitReached:
                if not batch:
                    raise
                break
            wait = 0
        return batch

    @abc.abstractmethod
    def commit(self) -> None:
        """Commit the unit of work (MQCMIT)."""

    @abc.abstractmethod
    def backout(self) -> None:
        """Back out the unit of work (MQBACK): got messages return with BackoutCount + 1."""

    @abc.abstractmethod
    def inquire(self, queue: str) -> QueueAttributes:
        """Read a queue's attributes, CURDEPTH, BOTHRESH and BOQNAME among them."""

    @abc.abstractmethod
    def define(self, attrs: QueueAttributes, *, replace: bool = False) -> None:
        """Define a local queue (DEFINE QLOCAL); ``replace`` updates an existing one."""

    @abc.abstractmethod
    def list_queues(self, pattern: str = "*") -> list[QueueAttributes]:
        """The queues whose names match a generic pattern (``*`` at the end), with depths."""

    @abc.abstractmethod
    def max_uncommitted(self) -> int:
        """The queue manager's MAXUMSGS: the most messages one unit of work may get and
        put under syncpoint; one more fails with MQRC_SYNCPOINT_LIMIT_REACHED."""

    @abc.abstractmethod
    def dead_letter_queue(self) -> str:
        """The queue manager's dead-letter queue name (DEADQ), or ``""`` if none."""

    @abc.abstractmethod
    def close(self) -> None:
        """Disconnect; uncommitted work is backed out."""

    def browse(
        self,
        queue: str,
        match: Match | None = None,
        *,
        logical_order: bool = False,
        all_available: bool = False,
    ) -> Iterator[MQMessage]:
        """Every matching message, in get order, without removing any (in logical order:
        each group whole and in sequence, at the place of its first message)."""
        mode: Browse = "first"
        while True:
            try:
                yield self.get(
                    queue,
                    match=match,
                    browse=mode,
                    logical_order=logical_order,
                    all_available=all_available,
                )
            except NoMessageAvailable:
                return
            mode = "next"

    def clear(self, queue: str) -> int:
        """Remove every available message from a queue; returns how many (committed
        every 500, or sooner where MAXUMSGS is lower)."""
        count = held = 0
        outside = False
        while True:
            try:
                self.get(queue, syncpoint=not outside)
            except NoMessageAvailable:
                break
            except SyncpointLimitReached:
                if held:
                    self.commit()
                    held = 0
                else:
                    # Even an empty unit of work has no room for the message and the COD
                    # it asks for (MAXUMSGS 1): that one goes outside syncpoint.
                    outside = True
                continue
            count += 1
            if outside:
                outside = False
                continue
            held += 1
            if held == 500:
                self.commit()
                held = 0
        self.commit()
        return count

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
