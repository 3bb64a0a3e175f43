"""Every transport against a model of MQ's queue semantics, by random sequences of calls
and random messages.

Two connections put, get, browse, commit, back out, inquire and reconnect on one small
queue, while its PUT and GET are enabled and disabled; after every call the queue manager
must agree with the model: what a get or a browse returns (priority, then arrival;
CorrelId matched), what is refused (MQRC_NO_MSG_AVAILABLE, MQRC_Q_FULL,
MQRC_PUT_INHIBITED, MQRC_GET_INHIBITED, MQRC_SYNCPOINT_LIMIT_REACHED past a small
MAXUMSGS), CURDEPTH, and BackoutCount. At the end every committed message is taken off
once, none twice and none missing.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from bridge.mq.errors import (
    NoMessageAvailable,
    QueueFull,
    QueueInhibited,
    SyncpointLimitReached,
)
from bridge.mq.models import Match, MQMessage, MsgFlags, PutOptions, QueueAttributes, parse_id

MAXDEPTH = 4
#: MAXUMSGS where the test owns the queue manager (a real IBM MQ keeps its own).
UOW_LIMIT = 3
#: Random sequences of calls per state machine, and calls per sequence.
MACHINES = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
#: Random messages per round trip.
ROUND_TRIPS = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
CONNECTIONS = (0, 1)
CORREL_IDS = (parse_id("C-0"), parse_id("C-1"))


def _refusals(*reasons: tuple[type[Exception], bool]) -> tuple[type[Exception], ...]:
    """The errors a call may end with: each whose condition holds. Where more than one
    does, MQ documents no order among them, so any of them is taken."""
    return tuple(error for error, applies in reasons if applies)


def _end_gets(messages: list[Any], conn: int, commit: bool) -> None:
    """A unit of work's gets end: committed, its messages are gone; backed out, they are
    back where they were with BackoutCount + 1."""
    for m in list(messages):
        if m.got_by == conn:
            if commit:
                messages.remove(m)
            else:
                m.got_by = None
                m.backout_count += 1


@dataclass
class Held:
    """A message as the model keeps it."""

    body: bytes
    priority: int
    correl_id: bytes
    #: Order of the put, and of its commit (None until committed).
    put_seq: int
    commit_seq: int | None = None
    backout_count: int = 0
    #: The connection whose unit of work got it, not yet committed.
    got_by: int | None = None


@dataclass
class Model:
    """MQ's rules for one queue."""

    messages: list[Held] = field(default_factory=list)
    #: Uncommitted puts per connection, in put order.
    puts: dict[int, list[Held]] = field(default_factory=lambda: {c: [] for c in CONNECTIONS})
    seq: int = 0
    put_inhibited: bool = False
    get_inhibited: bool = False
    #: MAXUMSGS: messages a unit of work may get and put under syncpoint.
    limit: int = UOW_LIMIT

    def depth(self) -> int:
        """CURDEPTH: committed messages not got under syncpoint, and every uncommitted put."""
        return sum(m.got_by is None for m in self.messages) + sum(map(len, self.puts.values()))

    def room(self, conn: int) -> int:
        """Messages ``conn``'s unit of work may still get or put under syncpoint."""
        held = len(self.puts[conn]) + sum(m.got_by == conn for m in self.messages)
        return self.limit - held

    def eligible(self, correl_id: bytes | None) -> list[Held]:
        return [
            m
            for m in self.messages
            if m.got_by is None and (correl_id is None or m.correl_id == correl_id)
        ]

    def firsts(self, correl_id: bytes | None) -> set[bytes]:
        """The messages a get may return: the highest priority, the first to arrive.

        Where a message put under syncpoint takes its place among those of the same
        priority (at its put, or at its commit) MQ does not document, so either is taken.
        """
        found = self.eligible(correl_id)
        if not found:
            return set()
        top = max(m.priority for m in found)
        first = [m for m in found if m.priority == top]
        by_commit = min(first, key=lambda m: (m.commit_seq or 0, m.put_seq))
        by_put = min(first, key=lambda m: m.put_seq)
        return {by_commit.body, by_put.body}

    def end(self, conn: int, commit: bool) -> None:
        for m in self.puts[conn]:
            if commit:
                self.seq += 1
                m.commit_seq = self.seq
                self.messages.append(m)
        self.puts[conn] = []
        _end_gets(self.messages, conn, commit)


def _machine(connect, make_queue, maxumsgs) -> type[RuleBasedStateMachine]:
    class Queue(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.conns = [connect() for _ in CONNECTIONS]
            self.queue = make_queue(self.conns[0], maxdepth=MAXDEPTH)
            self.model = Model(limit=maxumsgs(self.conns[0], UOW_LIMIT))
            self.next_body = 0

        @rule(
            conn=st.sampled_from(CONNECTIONS),
            priority=st.sampled_from((0, 5)),
            correl=st.sampled_from(CORREL_IDS),
            syncpoint=st.booleans(),
        )
        def put(self, conn: int, priority: int, correl: bytes, syncpoint: bool) -> None:
            self.next_body += 1
            self.model.seq += 1
            held = Held(f"m{self.next_body}".encode(), priority, correl, self.model.seq)
            message = MQMessage(body=held.body, priority=priority, correl_id=correl)
            refused = _refusals(
                (QueueInhibited, self.model.put_inhibited),
                (QueueFull, self.model.depth() >= MAXDEPTH),
                (SyncpointLimitReached, syncpoint and self.model.room(conn) < 1),
            )
            if refused:
                with pytest.raises(refused):
                    self.conns[conn].put(self.queue, message, PutOptions(syncpoint=syncpoint))
                return
            self.conns[conn].put(self.queue, message, PutOptions(syncpoint=syncpoint))
            if syncpoint:
                self.model.puts[conn].append(held)
            else:
                held.commit_seq = self.model.seq
                self.model.messages.append(held)

        @rule(
            conn=st.sampled_from(CONNECTIONS),
            correl=st.none() | st.sampled_from(CORREL_IDS),
            syncpoint=st.booleans(),
            browse=st.booleans(),
        )
        def get(self, conn: int, correl: bytes | None, syncpoint: bool, browse: bool) -> None:
            match = None if correl is None else Match(correl_id=correl)
            expected = self.model.firsts(correl)
            qm = self.conns[conn]
            refused = _refusals(
                (QueueInhibited, self.model.get_inhibited),
                (NoMessageAvailable, not expected),
                (SyncpointLimitReached, syncpoint and not browse and self.model.room(conn) < 1),
            )
            if refused:
                with pytest.raises(refused):
                    qm.get(self.queue, match=match, syncpoint=syncpoint,
                           browse="first" if browse else None)  # fmt: skip
                return
            got = qm.get(
                self.queue, match=match, syncpoint=syncpoint, browse="first" if browse else None
            )
            assert got.body in expected
            held = next(m for m in self.model.messages if m.body == got.body)
            assert (got.priority, got.correl_id) == (held.priority, held.correl_id)
            assert got.backout_count == held.backout_count
            if browse:
                return
            if syncpoint:
                held.got_by = conn
            else:
                self.model.messages.remove(held)

        @rule(conn=st.sampled_from(CONNECTIONS), most=st.integers(1, 3))
        def get_batch(self, conn: int, most: int) -> None:
            """The bridge's get: up to ``most`` under syncpoint, in get order."""
            if self.model.get_inhibited:
                with pytest.raises(QueueInhibited):
                    self.conns[conn].get_batch(self.queue, most)
                return
            there, room = len(self.model.eligible(None)), self.model.room(conn)
            if room < 1:
                # Full, the unit of work takes none; with nothing there, either reason.
                with contextlib.suppress(SyncpointLimitReached):
                    assert self.conns[conn].get_batch(self.queue, most) == [] and not there
                return
            batch = self.conns[conn].get_batch(self.queue, most)
            assert len(batch) == min(most, there, room)
            for got in batch:
                assert got.body in self.model.firsts(None)
                held = next(m for m in self.model.messages if m.body == got.body)
                assert got.backout_count == held.backout_count
                held.got_by = conn

        @rule(conn=st.sampled_from(CONNECTIONS))
        def commit(self, conn: int) -> None:
            self.conns[conn].commit()
            self.model.end(conn, commit=True)

        @rule(conn=st.sampled_from(CONNECTIONS))
        def backout(self, conn: int) -> None:
            self.conns[conn].backout()
            self.model.end(conn, commit=False)

        @rule(put=st.booleans(), get=st.booleans())
        def inhibit(self, put: bool, get: bool) -> None:
            """PUT and GET switched while units of work are open: what they did before
            still commits or backs out."""
            self.conns[1].define(
                QueueAttributes(
                    name=self.queue,
                    maxdepth=MAXDEPTH,
                    put="disabled" if put else "enabled",
                    get="disabled" if get else "enabled",
                ),
                replace=True,
            )
            self.model.put_inhibited, self.model.get_inhibited = put, get

        @rule(conn=st.sampled_from(CONNECTIONS))
        def reconnect(self, conn: int) -> None:
            """Closing a connection backs out its unit of work."""
            self.conns[conn].close()
            self.conns[conn] = connect()
            self.model.end(conn, commit=False)

        @invariant()
        def depth_agrees(self) -> None:
            for qm in self.conns:
                assert qm.inquire(self.queue).curdepth == self.model.depth()

        def teardown(self) -> None:
            self.inhibit(put=False, get=False)
            for conn in CONNECTIONS:
                self.conns[conn].backout()
                self.model.end(conn, commit=False)
            left = []
            while True:
                try:
                    left.append(self.conns[0].get(self.queue, syncpoint=False).body)
                except NoMessageAvailable:
                    break
            assert sorted(left) == sorted(m.body for m in self.model.messages)
            for qm in self.conns:
                qm.close()

    return Queue


# ------------------------------------------------------------------ logical groups

#: Messages per group.
GROUP_SIZE = 3
IN_GROUP, LAST_IN_GROUP = int(MsgFlags.MSG_IN_GROUP), int(MsgFlags.LAST_MSG_IN_GROUP)


@dataclass
class Placed:
    """A message on the queue, as the group model keeps it."""

    body: bytes
    priority: int
    arrival: int
    #: Its group (None for a message in no group), number, and whether it is the last.
    group: str | None = None
    seq: int = 1
    last: bool = False
    backout_count: int = 0
    #: The connection whose unit of work got it, not yet committed.
    got_by: int | None = None


@dataclass
class Groups:
    """MQ's rules for getting in logical order from one queue."""

    messages: list[Placed] = field(default_factory=list)
    #: Per connection, the group it is inside and the number it gets next.
    inside: dict[int, tuple[str, int] | None] = field(
        default_factory=lambda: dict.fromkeys(CONNECTIONS)
    )
    #: Per connection, where it stood when its unit of work began (a backout returns it
    #: there); absent while it has none open.
    began: dict[int, tuple[str, int] | None] = field(default_factory=dict)
    #: Numbers already put, per group.
    put: dict[str, set[int]] = field(default_factory=dict)
    arrivals: int = 0

    def there(self) -> list[Placed]:
        return [m for m in self.messages if m.got_by is None]

    def complete(self, group: str) -> bool:
        return {m.seq for m in self.there() if m.group == group} == set(range(1, GROUP_SIZE + 1))

    def next_for(self, conn: int, all_available: bool) -> Placed | None:
        """The message a get in logical order returns, or None."""
        position = self.inside[conn]
        if position is not None:
            group, seq = position
            return next((m for m in self.there() if (m.group, m.seq) == (group, seq)), None)
        starts = [
            m
            for m in self.there()
            if m.group is None or (m.seq == 1 and (not all_available or self.complete(m.group)))
        ]
        if not starts:
            return None
        return min(starts, key=lambda m: (-m.priority, m.arrival))

    def take(self, conn: int, message: Placed, syncpoint: bool) -> None:
        if syncpoint:
            self.began.setdefault(conn, self.inside[conn])
            message.got_by = conn
        else:
            self.messages.remove(message)
        if message.group is None or message.last:
            self.inside[conn] = None
        else:
            self.inside[conn] = (message.group, message.seq + 1)

    def end(self, conn: int, commit: bool) -> None:
        _end_gets(self.messages, conn, commit)
        if conn in self.began:
            began = self.began.pop(conn)
            if not commit:
                self.inside[conn] = began


def _groups_machine(connect, make_queue, _maxumsgs) -> type[RuleBasedStateMachine]:
    class GroupQueue(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.conns = [connect() for _ in CONNECTIONS]
            self.queue = make_queue(self.conns[0])
            self.model = Groups()
            self.next_body = 0

        @rule(
            group=st.none() | st.sampled_from(("G-A", "G-B", "G-C")),
            seq=st.integers(1, GROUP_SIZE),
            priority=st.sampled_from((0, 5)),
        )
        def put(self, group: str | None, seq: int, priority: int) -> None:
            """A message in no group, or one of a group's, in any order (physical order)."""
            self.next_body += 1
            self.model.arrivals += 1
            body = f"m{self.next_body}".encode()
            if group is None:
                self.conns[1].put(self.queue, MQMessage(body=body, priority=priority),
                                  PutOptions(syncpoint=False))  # fmt: skip
                self.model.messages.append(Placed(body, priority, self.model.arrivals))
                return
            if seq in self.model.put.setdefault(group, set()):
                return  # each number of a group is put once
            self.model.put[group].add(seq)
            last = seq == GROUP_SIZE
            self.conns[1].put(
                self.queue,
                MQMessage(
                    body=body,
                    priority=priority,
                    group_id=parse_id(group),
                    msg_seq_number=seq,
                    msg_flags=IN_GROUP | (LAST_IN_GROUP if last else 0),
                ),
                PutOptions(syncpoint=False),
            )
            self.model.messages.append(
                Placed(body, priority, self.model.arrivals, group, seq, last)
            )

        @rule(conn=st.sampled_from(CONNECTIONS))
        def get(self, conn: int) -> None:
            """Connection 0 gets whole groups only (all messages available), outside
            syncpoint; 1 gets them as they come, under syncpoint."""
            all_available, syncpoint = conn == 0, conn == 1
            expected = self.model.next_for(conn, all_available)
            qm = self.conns[conn]
            if expected is None:
                with pytest.raises(NoMessageAvailable):
                    qm.get(self.queue, logical_order=True, all_available=all_available,
                           syncpoint=syncpoint)  # fmt: skip
                return
            got = qm.get(
                self.queue, logical_order=True, all_available=all_available, syncpoint=syncpoint
            )
            assert (got.body, got.backout_count) == (expected.body, expected.backout_count)
            status = (
                "not-in-group"
                if expected.group is None
                else "last-in-group"
                if expected.last
                else "in-group"
            )
            assert (got.group_status, got.msg_seq_number) == (status, expected.seq)
            self.model.take(conn, expected, syncpoint)

        @rule(commit=st.booleans())
        def end(self, commit: bool) -> None:
            """Connection 1 commits, or backs out and starts its group over."""
            (self.conns[1].commit if commit else self.conns[1].backout)()
            self.model.end(1, commit)

        @invariant()
        def depth_agrees(self) -> None:
            assert self.conns[0].inquire(self.queue).curdepth == len(self.model.there())

        def teardown(self) -> None:
            for qm in self.conns:
                qm.close()

    return GroupQueue


@pytest.mark.parametrize(
    "machine", [_machine, _groups_machine], ids=["units-of-work", "logical-groups"]
)
def test_the_queue_manager_keeps_mqs_rules(machine, connect, make_queue, maxumsgs) -> None:
    run_state_machine_as_test(machine(connect, make_queue, maxumsgs), settings=MACHINES)


# ------------------------------------------------------------------ message properties

_NAMES = st.from_regex(r"x[a-z0-9]{0,12}", fullmatch=True)
_VALUES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
    | st.text(max_size=40)
    | st.binary(max_size=40)
)


#: The edges, always tried: int64's ends, float's specials and -0.0, a NUL inside a
#: string, empty text and bytes.
_EDGES = {
    "xmax": 2**63 - 1, "xmin": -(2**63), "xnegzero": -0.0, "xnan": math.nan,
    "xinf": math.inf, "xneginf": -math.inf, "xtiny": 5e-324, "xnul": "a\x00b",
    "xempty": "", "xnobytes": b"", "xtrue": True, "xnone": None,
}  # fmt: skip


def _same(got: object, sent: object, booleans_as_int: bool) -> bool:
    if isinstance(sent, bool) and booleans_as_int:
        return got == int(sent) and type(got) is int
    if isinstance(sent, float) and math.isnan(sent):
        return isinstance(got, float) and math.isnan(got)
    if isinstance(sent, float):
        return (
            type(got) is float and math.copysign(1, got) == math.copysign(1, sent) and got == sent
        )
    return type(got) is type(sent) and got == sent


def test_any_properties_come_back_as_they_were_put(connect, make_queue) -> None:
    """Property values of every type and edge (int64's ends, NaN, infinities, -0.0, NUL
    in a string, empty bytes), through a put and a get, typed as they went in."""
    qm = connect()
    q = make_queue(qm)

    @ROUND_TRIPS
    @given(st.dictionaries(_NAMES, _VALUES, max_size=6))
    @example(_EDGES)
    def round_trip(props: dict[str, object]) -> None:
        qm.put(q, MQMessage(body=b"p", properties=props), PutOptions(syncpoint=False))
        got = qm.get(q, syncpoint=False).properties
        assert got.keys() == props.keys()
        for name, sent in props.items():
            assert _same(got[name], sent, qm.booleans_read_as_int), (name, sent, got[name])

    round_trip()


# ------------------------------------------------------------------ the descriptor

_ID = st.binary(min_size=24, max_size=24)
_NAME = st.from_regex(r"[A-Z][A-Z0-9._]{0,20}", fullmatch=True)


@st.composite
def _descriptors(draw: st.DrawFn) -> MQMessage:
    return MQMessage(
        body=draw(st.binary(max_size=64)),
        msg_id=draw(_ID.filter(lambda b: b != bytes(24))),
        correl_id=draw(_ID),
        format=draw(st.sampled_from(("", "MQSTR", "MQHRF2", "APPFMT"))),
        coded_char_set_id=draw(st.sampled_from((1208, 819, 37, 500, 1047, 850))),
        encoding=draw(st.sampled_from((273, 546, 785))),
        persistence=draw(st.sampled_from((0, 1))),
        priority=draw(st.integers(0, 9)),
        reply_to_q=draw(st.just("") | _NAME),
        reply_to_qmgr=draw(st.just("") | _NAME),
    )


def test_any_descriptor_comes_back_as_it_was_put(connect, make_queue) -> None:
    """Random MsgIds and CorrelIds (NULs and blanks at their ends too), formats, character
    sets, encodings, persistence, priorities and reply-to names, through a put and a get;
    a blank ReplyToQMgr comes back as the queue manager's name, as MQ stores it."""
    qm = connect()
    q = make_queue(qm)

    @ROUND_TRIPS
    @given(_descriptors())
    @example(MQMessage(body=b"", msg_id=b"ID" + bytes(22), correl_id=b"C" + b" " * 23,
                       reply_to_q="Q.", reply_to_qmgr="QM_1"))  # fmt: skip
    def round_trip(sent: MQMessage) -> None:
        qm.put(q, sent, PutOptions(syncpoint=False))
        got = qm.get(q, syncpoint=False)
        for name in ("body", "msg_id", "correl_id", "format", "coded_char_set_id",
                     "encoding", "persistence", "priority", "reply_to_q"):  # fmt: skip
            assert getattr(got, name) == getattr(sent, name), name
        assert got.reply_to_qmgr == (sent.reply_to_qmgr or qm.qmgr_name)

    round_trip()
