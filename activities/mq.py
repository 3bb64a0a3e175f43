"""Activities: merge and PUT the response; forward replies to the aggregate's queues."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial

from temporalio import activity

from activities.merge import LegBodies, Merged, MergeError, merge
from bridge.mq import hold, ledger
from bridge.mq.dlh import dead_letter
from bridge.mq.errors import MQError, SyncpointLimitReached, undeliverable
from bridge.mq.forward import with_reason
from bridge.mq.ledger import final_group, ledger_key, ledger_owner
from bridge.mq.models import (
    MQEI_UNLIMITED,
    MQFB_NAN,
    MQFB_PAN,
    MQFMT_NONE,
    MQFMT_STRING,
    MQMT_REPLY,
    MQMT_REPORT,
    MQRO_NAN,
    MQRO_NONE,
    MQRO_PAN,
    MQRO_PASS_CORREL_ID,
    Match,
    MQMessage,
    PropertyValue,
    PutOptions,
    QueueAddress,
    expiry_tenths,
)
from bridge.mq.transport import Transport
from mqgather import names
from mqgather.config import AggregateSpec
from mqgather.constants import (
    DEFAULT_HELD_MB,
    EARLIER_ATTEMPT_WAIT_SECONDS,
    HELD_BUDGET_WAIT_SECONDS,
    MB,
    TASK_CONFIRM_AFTER_SECONDS,
)
from mqgather.errors import MQGatherError
from mqgather.names import (
    APPL_NAME,
    PROP_ATTEMPT,
    PROP_GATHER_ID,
    PROP_MISSING,
    PROP_REASON,
    PROP_REREQUESTED,
    PROP_STATE,
    PROP_USED,
)
from mqgather.routing import Destination, queue_for
from mqgather.runtime import telemetry
from mqgather.runtime.attempts import (
    OneAtATime,
    check_in_time,
    check_not_cancelled,
    confirm_task,
)
from mqgather.runtime.budget import ByteBudget
from workflows import redelivery
from workflows.models import (
    FINAL_ENDINGS,
    ROUTED_KINDS,
    HeldBody,
    HoldRepliesInput,
    HoldRepliesResult,
    PutResponseInput,
    PutResponseResult,
    ReceivedLeg,
    Reply,
    ReplyTerms,
    RouteInput,
    SendRequestInput,
    as_held,
    held_reference,
)

#: A local attempt that ran this long asks whether its worker still holds its task.
_CONFIRM_TASK_AFTER = timedelta(seconds=TASK_CONFIRM_AFTER_SECONDS)


def response_msg_id(gather: str, outcome: str) -> bytes:
    """MsgId of a response: derived from gather (its :func:`ledger_owner`) and outcome, so
    a retried PUT repeats it."""
    return hashlib.sha256(f"{gather}|{outcome}".encode()).digest()[:24]


def _to_requester(inp: PutResponseInput) -> bool:
    """Whether a response answers its requester (partial results on the timeout queue are
    the operators')."""
    return inp.outcome not in ("TIMEOUT", "CANCELLED")


def requester_queue(inp: PutResponseInput, transport: Transport) -> QueueAddress:
    """The requester's ReplyToQ at its ReplyToQMgr: a requester on another queue manager
    waits on a queue of that one, and a queue of the same name here may be anyone's
    (the ReplyToQMgr of a request put here names this queue manager)."""
    return transport.address(inp.reply_to_q, inp.reply_to_qmgr)


def response_queues(inp: PutResponseInput, transport: Transport) -> list[QueueAddress]:
    """Where a response goes, by outcome and the aggregate's destination mode."""
    spec = inp.aggregate
    if not _to_requester(inp):
        return [QueueAddress(queue_for(spec, Destination.TIMEOUT))]
    requester = requester_queue(inp, transport)
    if spec.destination == "replyToQueue" and inp.reply_to_q:
        return [requester]
    if spec.destination == "destinationList":
        targets = [QueueAddress(queue) for queue in spec.destination_list]
        if inp.reply_to_q and requester not in targets:
            targets.append(requester)
        return targets
    return [QueueAddress(queue_for(spec, Destination.RESPONSE))]


def response_life(inp: PutResponseInput, now: datetime) -> tuple[int, int]:
    """A response's Expiry (tenths of a second) and Report options: what its requester's
    request asked to be passed on (MQRO_PASS_DISCARD_AND_EXPIRY), the Expiry counted to
    ``now``. Partial results on the timeout queue never expire."""
    terms = inp.reply_terms
    if terms is None or not _to_requester(inp):
        return MQEI_UNLIMITED, MQRO_NONE
    return _requester_life(terms, now)


def _requester_life(terms: ReplyTerms, now: datetime) -> tuple[int, int]:
    """What a message to the requester gets of its request's Expiry and Report."""
    if terms.expires_at is None:
        return MQEI_UNLIMITED, terms.report
    # A request that expired meanwhile gets a response with the shortest life MQ takes.
    return expiry_tenths((terms.expires_at - now).total_seconds()), terms.report


def response_id(inp: PutResponseInput) -> bytes:
    """A response's MsgId: the request's, when it asked for it (MQRO_PASS_MSG_ID) and the
    response answers it; else derived from the gather and outcome. The ledger records the
    PUT under the derived one either way."""
    passed = inp.reply_terms.msg_id if inp.reply_terms else None
    if passed is not None and _to_requester(inp):
        return passed
    return response_msg_id(ledger_owner(inp.gather_id, inp.chain), inp.outcome)


def notification(inp: PutResponseInput, now: datetime, *, failed: bool = False) -> MQMessage | None:
    """The action notification the requester asked for (MQRO_PAN, MQRO_NAN), or None: a
    report with Feedback MQFB_PAN when the gather answers it, MQFB_NAN when it does not
    (timed out or cancelled: its partial result goes to the operators' timeout queue; or
    ``failed``: its response refused for good, or its legs not merged), so the requester
    need not wait out its own timeout. It goes to the request's ReplyToQ, correlated as
    the response would be, with the Expiry and MsgId its request asked the response to
    have."""
    terms = inp.reply_terms
    if terms is None or not inp.reply_to_q.strip():
        return None
    answered = _to_requester(inp) and not failed
    if not terms.notify & (MQRO_PAN if answered else MQRO_NAN):
        return None
    expiry, report = _requester_life(terms, now)
    state = "FAILED" if failed else inp.outcome
    return MQMessage(
        msg_id=terms.msg_id or notification_id(ledger_owner(inp.gather_id, inp.chain), state),
        correl_id=inp.request_msg_id or inp.correl_id,
        msg_type=MQMT_REPORT,
        feedback=MQFB_PAN if answered else MQFB_NAN,
        expiry=expiry,
        report=report,
        format=MQFMT_NONE,
        properties={
            PROP_STATE: state,
            PROP_GATHER_ID: inp.gather_id,
            PROP_MISSING: ",".join(inp.missing),
        },
    )


def notification_id(gather: str, state: str) -> bytes:
    """MsgId of a gather's notification in ``state`` (unless its request's MsgId is
    passed on), and the key the ledger records its PUT under when it has a unit of work
    of its own."""
    return response_msg_id(gather, f"{state} notification")


_UNDER_SYNCPOINT = PutOptions(syncpoint=True)
#: A forward keeps the message's context (MQMD) as it came.
_FORWARDING = PutOptions(syncpoint=True, set_all_context=True)


def _final_attempt(inp: PutResponseInput | RouteInput | SendRequestInput) -> bool:
    """Whether this is the last delivery attempt (they count across the workflow's
    rounds: it retries after showing the error)."""
    return inp.attempts_before + activity.info().attempt >= inp.aggregate.delivery_attempts


def _put_or_dead_letter(
    transport: Transport,
    target: QueueAddress,
    message: MQMessage,
    final: bool,
    options: PutOptions = _UNDER_SYNCPOINT,
) -> tuple[MQError, str] | None:
    """PUT under syncpoint; on the last attempt, a message ``target`` refuses for good
    (or that finds no route to its queue manager) goes to the dead-letter queue behind an
    MQDLH naming the reason and the queue and queue manager it was for, and the error and
    that queue are returned. Both PUTs take ``options`` (a forward keeps the context).

    Raises:
        MQError: the PUT failed, and it may succeed on a later attempt.
        DeadLetterRefused: on the last attempt, the dead-letter queue refused it too.
    """
    try:
        transport.put(target.queue, message, options, qmgr=target.qmgr)
    except MQError as exc:
        if not (final and undeliverable(exc)):
            raise
        return exc, put_dead_letter(transport, target, message, exc, options)
    return None


def put_dead_letter(
    transport: Transport,
    target: QueueAddress,
    message: MQMessage,
    refused: MQError,
    options: PutOptions = _UNDER_SYNCPOINT,
) -> str:
    """PUT ``message``, which ``target`` ``refused`` for good, to the dead-letter queue
    behind an MQDLH naming the reason and ``target`` (``mqgather queues retry`` puts it
    back there); that queue.

    Raises:
        MQError: the PUT failed, and it may succeed on a later attempt.
        DeadLetterRefused: the dead-letter queue refused it too.
    """
    dlq = transport.dead_letter_queue()
    owner = target.qmgr or transport.qmgr_name
    dead = dead_letter(message, refused.code, target.queue, owner, APPL_NAME)
    try:
        transport.put(dlq, dead, options)
    except MQError as exc:
        if not undeliverable(exc):
            raise
        raise DeadLetterRefused(
            f"{target} refused it for good ({refused}), and the dead-letter queue "
            f"{dlq or '(none: DEADQ is blank)'} refused it too ({exc})"
        ) from exc
    return dlq


def _notify(
    transport: Transport, requester: QueueAddress, told: MQMessage, final: bool, gather: str
) -> None:
    """PUT a gather's notification (a report of mqgather's own, no message that came in):
    one that neither the requester's queue nor the dead-letter queue takes is left out,
    said in the worker's log, rather than holding the gather's final back for ever."""
    try:
        _put_or_dead_letter(transport, requester, told, final)
    except DeadLetterRefused as exc:
        activity.logger.warning("gather %s: its notification is not sent: %s", gather, exc)


def forward_or_dead_letter(
    transport: Transport,
    queue: str,
    message: MQMessage,
    reason: str,
    source_queue: str,
    final: bool,
    owner: str,
    gather: str = "",
) -> str:
    """Forward ``message`` intact to ``queue`` (as :func:`bridge.mq.forward.forward`);
    on the ``final`` attempt, one ``queue`` refuses for good goes to the dead-letter
    queue, so that a late, duplicate or failure queue that is full, or shorter than the
    message, holds its gather or batch (``owner``) back for a bounded time only. The
    ledger's note of where it went.

    Raises:
        MQError: the PUT failed, and it may succeed on a later attempt.
        DeadLetterRefused: on the final attempt, the dead-letter queue refused it too.
    """
    copy = with_reason(message, reason, source_queue, gather)
    dead = _put_or_dead_letter(transport, QueueAddress(queue), copy, final, _FORWARDING)
    return dead_letter_note(f"{owner} forwarded to {queue}", dead)


def dead_letter_note(note: str, dead: tuple[MQError, str] | None) -> str:
    """The ledger's ``note`` of a PUT, saying (and saying in the worker's log) when
    ``dead``, the refusal and the dead-letter queue, sent it there instead."""
    if dead is None:
        return note
    error, dlq = dead
    activity.logger.warning("%s: put to the dead-letter queue %s instead: %s", note, dlq, error)
    return f"{note}, put to the dead-letter queue {dlq} ({error})"


class DeadLetterRefused(MQGatherError):
    """A message refused for good, on its last attempt, that the dead-letter queue
    refused too (longer than its MAXMSGL, full, PUT(DISABLED), not defined)."""


class MQActivities:
    """The activities that PUT; each worker thread keeps its own MQ connection."""

    def __init__(
        self,
        connect: Callable[[], Transport],
        held_bytes: int = DEFAULT_HELD_MB * MB,
        task_lost: Callable[[str, str], str | None] | None = None,
    ) -> None:
        """Activities over the MQ connections ``connect`` opens.

        Args:
            connect: Opens one MQ connection.
            held_bytes: Held-reply bytes read into memory at once.
            task_lost: For a local activity's attempt slow enough to have lost its
                workflow task: why its worker no longer holds the task of (workflow id,
                run id), or None. Without it, such an attempt commits unasked.
        """
        self._connect = connect
        self._task_lost = task_lost
        self._local = threading.local()
        self.budget = ByteBudget(held_bytes)
        self.attempts = OneAtATime()

    def _held_unit_of_work(
        self, owner: str, held: int, work: Callable[[Transport, hold.HeldReader], None]
    ) -> None:
        """A unit of work that reads ``held`` bytes of held replies into memory, through
        the reader it gives ``work``."""

        def reading(transport: Transport) -> None:
            reader = hold.HeldReader(transport)
            work(transport, reader)
            reader.put_back()

        # The turn first: an attempt waiting for it holds none of the budget.
        with (
            self.attempts.hold(owner, EARLIER_ATTEMPT_WAIT_SECONDS),
            self.budget.hold(held, HELD_BUDGET_WAIT_SECONDS),
        ):
            self._run_unit(owner, reading)

    def close(self) -> None:
        """Close this thread's MQ connection, if it has one."""
        transport = getattr(self._local, "transport", None)
        self._local.transport = None
        if transport is not None:
            transport.close()

    def _transport(self) -> Transport:
        transport = getattr(self._local, "transport", None)
        if transport is None:
            transport = self._local.transport = self._connect()
            self._local.maxumsgs = None
        return transport

    def _maxumsgs(self) -> int:
        """The queue manager's MAXUMSGS, read once per connection."""
        transport = self._transport()
        if self._local.maxumsgs is None:
            try:
                self._local.maxumsgs = transport.max_uncommitted()
            except MQError:
                self._local.transport = None
                transport.close()
                raise
        return int(self._local.maxumsgs)

    def _unit_of_work(
        self, owner: str, work: Callable[[Transport], None], *, in_time: bool = True
    ) -> None:
        """Run ``work`` and commit, or back out, in one unit of work, while no earlier
        attempt of ``owner``'s (a gather's or a collector's) runs in this worker: its
        ledger look and its commit then cannot interleave with another's. Without
        ``in_time``, it commits even when the attempt was cancelled or outlived its
        timeout (a repair that is right whoever runs it, and as often)."""
        with self.attempts.hold(owner, EARLIER_ATTEMPT_WAIT_SECONDS):
            self._run_unit(owner, work, in_time=in_time)

    def _run_unit(
        self, owner: str, work: Callable[[Transport], None], *, in_time: bool = True
    ) -> None:
        transport = self._transport()
        try:
            work(transport)
            if in_time and activity.in_activity():  # salvage runs the same work outside one
                self._still_in_time(owner, activity.info())
            transport.commit()
        except BaseException as exc:
            try:
                transport.backout()
            finally:
                # A broken connection is replaced on the next attempt.
                self._local.transport = None
                transport.close()
            if isinstance(exc, SyncpointLimitReached):
                raise SyncpointLimitReached(
                    f"{exc.detail}. This activity's unit of work holds more messages than "
                    "the queue manager's MAXUMSGS; it is retried, and succeeds once MAXUMSGS "
                    "is raised (ALTER QMGR MAXUMSGS)"
                ) from exc
            raise

    def _still_in_time(self, owner: str, info: activity.Info) -> None:
        """Raise unless this attempt may commit: not cancelled, within its timeout and, for
        a local activity slow enough to have lost its workflow task, with the task held."""
        check_not_cancelled(owner, activity.is_cancelled())
        ran = check_in_time(owner, info.started_time, info.start_to_close_timeout)
        # An activity the server schedules is retried only past the timeout just checked.
        if ran >= _CONFIRM_TASK_AFTER and info.is_local and self._task_lost is not None:
            confirm_task(owner, self._task_lost(info.workflow_id or "", info.workflow_run_id or ""))

    @activity.defn(name=names.ACTIVITY_PUT_RESPONSE, no_thread_cancel_exception=True)
    def put_response(self, inp: PutResponseInput) -> PutResponseResult:
        """Merge the legs and PUT one response under syncpoint, exactly once.

        A destination that refuses it for good (unknown queue, Q_FULL, put inhibited,
        ...) is retried ``delivery_attempts`` times; then the response goes to the
        dead-letter queue behind an MQDLH naming the reason and that destination, and the
        gather ends FAILED.
        """
        result = self._respond(inp)
        # Only a gather that moved replies, or a run after a reset, had moves to race.
        if inp.moved_to_hold or inp.after_reset:
            self._withdraw_after_final(inp)
        return result

    def _respond(self, inp: PutResponseInput) -> PutResponseResult:
        """The final of ``put_response``, committed once."""
        spec = inp.aggregate
        owner = ledger_owner(inp.gather_id, inp.chain)
        msg_id = response_msg_id(owner, inp.outcome)  # the PUT's ledger key
        sent_id = response_id(inp)
        targets: list[QueueAddress] = []
        properties: dict[str, PropertyValue] = {
            PROP_STATE: inp.outcome,
            PROP_GATHER_ID: inp.gather_id,
            PROP_MISSING: ",".join(inp.missing),
            PROP_USED: ",".join(leg.leg.name for leg in inp.legs),
        }
        if inp.reason:
            properties[PROP_REASON] = inp.reason
        if inp.rerequested:
            properties[PROP_REREQUESTED] = ",".join(inp.rerequested)
        telemetry.inject(properties)  # the requester can continue the gather's trace
        final = _final_attempt(inp)
        refused: list[tuple[QueueAddress, MQError]] = []
        dlq = ""
        before: MQMessage | None = None

        def work(transport: Transport, reader: hold.HeldReader) -> None:
            nonlocal dlq, before
            refused.clear()
            targets[:] = response_queues(inp, transport)
            before = _final_before(transport, spec.ledger_queue, inp, msg_id)
            if before is not None:
                return  # committed by an earlier attempt, or by a run before a reset
            # Held bodies leave the hold queue in this unit of work, with the PUT.
            # Only a gather that moved replies, or a run after a reset, looks for moves.
            look = inp.moved_to_hold or inp.after_reset
            kept = partial(_as_kept, transport, spec, owner, look=True) if look else None
            try:
                merged = _merged(inp, _bodies(reader, inp, kept))
            except hold.HeldReplyError:
                # Retried after a final that sent the replies to the failure queue (the
                # merge failed, or the response had nowhere to go): their held bodies
                # left with them, and that final stands.
                key = Match(msg_id=_failed_final_key(inp))
                before = ledger.find(transport, spec.ledger_queue, key)
                if before is None:
                    raise
                return
            expiry, report = response_life(inp, datetime.now(UTC))
            response = MQMessage(
                msg_id=sent_id,
                correl_id=inp.request_msg_id or inp.correl_id,
                msg_type=MQMT_REPLY,  # a reply, though it names the requester's ReplyToQ
                expiry=expiry,
                report=report,
                format=merged.format,
                coded_char_set_id=merged.ccsid,
                reply_to_q=inp.reply_to_q,
                reply_to_qmgr=inp.reply_to_qmgr,
                properties=properties,
                body=merged.body,
            )
            for target in targets:
                # Refused by the dead-letter queue too, DeadLetterRefused sends the
                # replies to the failure queue (notifications catch their own).
                dead = _put_or_dead_letter(transport, target, response, final)
                if dead:
                    error, dlq = dead
                    refused.append((target, error))
            told = notification(inp, datetime.now(UTC), failed=bool(refused))
            if told is not None:
                # Undeliverable, it is dead-lettered and the gather's outcome stands.
                _notify(transport, requester_queue(inp, transport), told, final, inp.gather_id)
            note = f"{inp.gather_id} {inp.outcome} response"
            if refused:
                note += f", put to the dead-letter queue {dlq}"
            _mark_final_in(transport, inp, msg_id, "FAILED" if refused else inp.outcome, note)

        held = sum(r.size for leg in inp.legs for r in leg.replies if r.held)
        try:
            self._held_unit_of_work(inp.gather_id, held, work)
        except MergeError as exc:
            return self._replies_to_failure(inp, "merge failed", str(exc))
        except DeadLetterRefused as exc:
            return self._replies_to_failure(inp, "response undeliverable", str(exc))
        if before is not None and (closed := self._closed_before(inp, before)) is not None:
            return closed
        if refused:
            error = "; ".join(f"{target}: {exc}" for target, exc in refused)
            _record_close(inp, "FAILED")
            gone = dict(refused)
            taken = [str(t) for t in targets if t not in gone]
            return PutResponseResult(
                outcome="FAILED",
                queues=[*taken, dlq],
                msg_id=sent_id.hex(),
                error=f"response undeliverable after {spec.delivery_attempts} attempts, put "
                f"to the dead-letter queue {dlq}: {error}",
            )
        _record_close(inp, inp.outcome)
        return PutResponseResult(
            outcome=inp.outcome, queues=[str(t) for t in targets], msg_id=sent_id.hex()
        )

    @activity.defn(name=names.ACTIVITY_SEND_REQUEST, no_thread_cancel_exception=True)
    def send_request(self, inp: SendRequestInput) -> str:
        """PUT a leg's request again, exactly once per attempt: the message scatter sent,
        with a MsgId of its own and the same CorrelId, asking the back end to pass the
        CorrelId on (MQRO_PASS_CORREL_ID). Returns the new MsgId (hex)."""
        spec = inp.aggregate
        owner = ledger_owner(inp.gather_id, inp.chain)
        key = ledger_key("request", owner, inp.leg, str(inp.attempt))
        sent = inp.request.message
        properties = {**sent.properties, PROP_ATTEMPT: inp.attempt, PROP_REASON: inp.reason}
        update: dict[str, object] = {
            "msg_id": key,
            "report": sent.report | MQRO_PASS_CORREL_ID,
            "properties": properties,
        }
        if inp.expires_at is not None:
            # Nobody waits for the leg's reply past then: MQ discards the request unread.
            update["expiry"] = expiry_tenths((inp.expires_at - datetime.now(UTC)).total_seconds())
        message = sent.model_copy(update=update)
        final = _final_attempt(inp)

        def work(transport: Transport) -> None:
            if ledger.done(transport, spec.ledger_queue, key):
                return  # committed by an earlier attempt
            note = f"{inp.gather_id} re-request {inp.attempt} of {inp.leg}"
            # Refused for good on its last attempt, it is dead-lettered and the gather
            # waits on for the leg as it would have (it was retried past its deadline).
            dead = _put_or_dead_letter(transport, QueueAddress(inp.request.queue), message, final)
            note = dead_letter_note(note, dead)
            ledger.mark(transport, spec.ledger_queue, key, note, spec.ledger_hours)

        self._unit_of_work(inp.gather_id, work)
        telemetry.instruments().rerequests.add(1, {"aggregate": spec.name, "leg": inp.leg})
        return key.hex()

    @activity.defn(name=names.ACTIVITY_HOLD_REPLIES, no_thread_cancel_exception=True)
    def hold_replies(self, inp: HoldRepliesInput) -> HoldRepliesResult:
        """Put replies a gather took inline on its hold queue, intact, each exactly once
        across retries (the ledger records each move), in as few units of work as MAXUMSGS
        allows (a put and its marker each), none its final carried already; returns the
        references its state keeps."""
        spec = inp.aggregate
        owner = ledger_owner(inp.gather_id, inp.chain)
        per_unit = max(self._maxumsgs() // 2, 1)
        for start in range(0, len(inp.replies), per_unit):
            chunk = inp.replies[start : start + per_unit]

            def work(transport: Transport) -> None:
                # A move whose thread ran on past a cancel may get its turn after the
                # gather's final, which carried these bodies inline: a copy put now would
                # belong to no one.
                carried = _carried_by_final(transport, spec.ledger_queue, owner)
                for reply in chunk:  # noqa: B023 - run in this iteration
                    key = _move_key(owner, reply)
                    if _final_key(reply) in carried or ledger.done(
                        transport, spec.ledger_queue, key
                    ):
                        continue  # answered already, or moved by an earlier attempt
                    hold.hold(transport, spec.hold_queue, reply.message)
                    note = f"{inp.gather_id} moved a reply to {spec.hold_queue}"
                    # Findable from the gather id, with what names the reply in its
                    # final, its copy and whose final that is: `hold check` tells a copy
                    # the final carried, its gather's history there or gone.
                    names = [_final_key(reply), hold.copy_id(reply.message), owner]
                    ledger.mark(transport, spec.ledger_queue, key, note, spec.ledger_hours,
                                group=ledger.move_group(inp.gather_id), lines=names)  # fmt: skip

            self._unit_of_work(inp.gather_id, work)
            # A final on another worker may have looked for these moves before they were
            # committed, and committed since: what it carried is now on the hold queue
            # too. Looked for after the commit, as the final looks for the moves after
            # its own, so one of the two sees the other (_withdraw_after_final).
            took = partial(_carried_of, spec=spec, owner=owner, replies=chunk)
            self._withdraw_copies(inp.gather_id, spec.hold_queue, took)
        return HoldRepliesResult(
            held=[held_reference(spec.hold_queue, reply.message) for reply in inp.replies]
        )

    def _withdraw_after_final(self, inp: PutResponseInput) -> None:
        """After a gather's final, in a gather that moved replies or a run after a reset:
        withdraw from the hold queue each copy of a reply the final carried inline whose
        move committed after the final looked for it (a cancelled move's thread running
        on, on another worker). The move looks for the final after its own commit, so
        whichever commits last sees the other."""
        spec = inp.aggregate
        owner = ledger_owner(inp.gather_id, inp.chain)
        inline = [r for leg in inp.legs for r in leg.replies if r.held is None]
        if not inline:
            return

        def moved(transport: Transport) -> list[Reply]:
            return [r for r in inline
                    if ledger.done(transport, spec.ledger_queue, _move_key(owner, r))]  # fmt: skip

        self._withdraw_copies(inp.gather_id, spec.hold_queue, moved)

    def _withdraw_copies(
        self, gather: str, hold_queue: str, copies: Callable[[Transport], list[Reply]]
    ) -> None:
        """Get off ``hold_queue``, in one unit of work, the copy there of each reply
        ``copies`` names: each is in its one place already, its gather's final. None there
        is fine: the final took it, or the move never put it. It commits even when the
        attempt was cancelled meanwhile: a move that ran on is, most likely."""
        withdrawn: list[Reply] = []

        def work(transport: Transport) -> None:
            withdrawn.clear()
            reader = hold.HeldReader(transport)
            for reply in copies(transport):
                ref = held_reference(hold_queue, reply.message)
                try:
                    reader.take(ref.queue, ref.msg_id, ref.correl_id, ref.sha256, wait_ms=0)
                except hold.HeldReplyError:
                    continue
                withdrawn.append(reply)
            reader.put_back()

        self._unit_of_work(gather, work, in_time=False)
        for reply in withdrawn:  # logged once committed
            activity.logger.warning(
                "gather %s: the copy of reply MsgId %s on %s is withdrawn: its final carried "
                "the reply, and a move committed after it looked",
                gather, reply.message.msg_id.hex(), hold_queue,
            )  # fmt: skip

    def _closed_before(self, inp: PutResponseInput, marker: MQMessage) -> PutResponseResult | None:
        """After this gather's final was committed: None when it is this input's (an
        attempt retried after its commit). Else it is an earlier run's (an operator reset
        the closed gather), or the final failed: that final stands, and the replies it did
        not carry go to the late queue, where they would have gone had the gather not
        been reset."""
        record = _final_record(marker)
        if record is None:
            return None  # a marker from before finals recorded their replies
        note, ended, carried = record
        fresh = [r for leg in inp.legs for r in leg.replies if _final_key(r) not in carried]
        if not fresh and ended == inp.outcome:
            return None
        late = queue_for(inp.aggregate, Destination.LATE)
        reason = f"gather {inp.gather_id} already closed"
        self.forward_once(inp.aggregate, inp.gather_id, [(late, r, reason) for r in fresh],
                          chain=inp.chain, moved_to_hold=inp.moved_to_hold,
                          final=_final_attempt(inp))  # fmt: skip
        error = f"its final was committed before, {ended} ({note})"
        if fresh:
            error += f"; {len(fresh)} reply(ies) it did not carry went to {late}"
        # A FAILED final delivered no response (dead-lettered, or the merge failed).
        earlier = inp.model_copy(update={"outcome": ended})
        answered = "" if ended == "FAILED" else response_id(earlier).hex()
        return PutResponseResult(
            outcome=ended,  # checked against FINAL_ENDINGS
            queues=[late] if fresh else [],
            msg_id=answered,
            error=error,
        )

    def _mark_final(self, inp: PutResponseInput, key: bytes, ended: str, note: str) -> None:
        """Record, once, a final that was no response (the merge failed), as a response's
        PUT records its own: with what it carried."""
        spec = inp.aggregate

        def work(transport: Transport) -> None:
            if not ledger.done(transport, spec.ledger_queue, key):
                _mark_final_in(transport, inp, key, ended, note)

        self._unit_of_work(inp.gather_id, work)

    def _replies_to_failure(
        self, inp: PutResponseInput, why: str, detail: str
    ) -> PutResponseResult:
        """A bad leg body, or a response with nowhere to go: every reply of the gather
        goes, intact, to the failure queue, its reason ``why: detail``, and the gather
        ends FAILED."""
        reason = f"{why}: {detail}"
        failure_queue = queue_for(inp.aggregate, Destination.FAILURE)
        replies = [reply for leg in _distinct(inp) for reply in leg.replies]
        self.forward_once(
            inp.aggregate,
            inp.gather_id,
            [(failure_queue, r, reason) for r in replies],
            chain=inp.chain,
            moved_to_hold=inp.moved_to_hold,
            final=_final_attempt(inp),
        )
        told = notification(inp, datetime.now(UTC), failed=True)
        if told is not None:
            self._notify_once(inp, told)
        self._mark_final(inp, _failed_final_key(inp), "FAILED", f"{inp.gather_id} {why}")
        _record_close(inp, "FAILED")
        return PutResponseResult(outcome="FAILED", queues=[failure_queue], msg_id="", error=reason)

    def _notify_once(self, inp: PutResponseInput, told: MQMessage) -> None:
        """PUT a notification of its own, exactly once across retries (the ledger records
        it under a key of its own)."""
        spec = inp.aggregate
        key = notification_id(ledger_owner(inp.gather_id, inp.chain), "FAILED")
        final = _final_attempt(inp)

        def work(transport: Transport) -> None:
            if ledger.done(transport, spec.ledger_queue, key):
                return
            _notify(transport, requester_queue(inp, transport), told, final, inp.gather_id)
            note = f"{inp.gather_id} FAILED notification"
            ledger.mark(transport, spec.ledger_queue, key, note, spec.ledger_hours)

        self._unit_of_work(inp.gather_id, work)

    @activity.defn(name=names.ACTIVITY_ROUTE_REPLIES, no_thread_cancel_exception=True)
    def route_replies(self, inp: RouteInput) -> int:
        """Forward replies intact to the late, unknown, duplicate or failure queue."""
        spec = inp.aggregate
        items = [(queue_for(spec, item.kind), item.reply, item.reason) for item in inp.items]
        # "" for duplicates the aggregate discards; a held one still leaves the hold queue,
        # as one moved there does.
        kept = [item for item in items if item[0] or item[1].held is not None or inp.moved_to_hold]
        self.forward_once(spec, inp.gather_id, kept, after_reset=inp.after_reset, chain=inp.chain,
                          moved_to_hold=inp.moved_to_hold, final=_final_attempt(inp))  # fmt: skip
        for item in inp.items:
            telemetry.instruments().routed.add(1, {"aggregate": spec.name, "kind": item.kind.value})
        return len(inp.items)

    def forward_once(
        self,
        spec: AggregateSpec,
        gather: str,
        items: list[tuple[str, Reply, str]],
        *,
        after_reset: bool = False,
        chain: str = "",
        moved_to_hold: bool = False,
        final: bool = False,
    ) -> None:
        """Forward each (queue, reply, reason) intact, each exactly once across retries
        (the ledger records every forward, under the gather and its ``chain``), in as few
        units of work as MAXUMSGS allows: a reply may need a get from the hold queue, its
        forward, the COA the forward causes when the reply asks for one, and its ledger
        marker. After a reset, or with ``moved_to_hold``, a reply the gather moved to the
        hold queue is taken from there, though it carries its body. On the ``final``
        attempt, a reply its queue refuses for good goes to the dead-letter queue.

        Raises:
            DeadLetterRefused: on the final attempt, the dead-letter queue refused it too.
        """
        per_unit = max(self._maxumsgs() // 4, 1)
        start = 0
        while start < len(items):
            chunk = items[start : start + per_unit]
            try:
                self._forward_unit(spec, gather, chunk, after_reset, chain, moved_to_hold, final)
            except SyncpointLimitReached:
                # More than four each (a held reply got past others that share its
                # MsgId, which are put back): the chunk was backed out whole, and its
                # forwards are ledgered, so a smaller one is tried.
                if per_unit == 1:
                    raise
                per_unit = max(per_unit // 2, 1)
                continue
            start += len(chunk)

    def _forward_unit(
        self,
        spec: AggregateSpec,
        gather: str,
        items: list[tuple[str, Reply, str]],
        after_reset: bool,
        chain: str,
        moved_to_hold: bool,
        final: bool,
    ) -> None:
        owner = ledger_owner(gather, chain)
        look = after_reset or moved_to_hold

        def work(transport: Transport, reader: hold.HeldReader) -> None:
            # A reply the gather's final carried is in its one place already: a run
            # after a reset may count it a duplicate of one it took since.
            placed = (
                _carried_by_final(transport, spec.ledger_queue, owner) if after_reset else set()
            )
            for queue, given, reason in items:
                if _final_key(given) in placed:
                    continue
                if _forwarded(transport, spec.ledger_queue, owner, queue, given):
                    continue
                reply = _as_kept(transport, spec, owner, given, look)
                key = ledger_key("forward", owner, queue, _reply_key(reply))
                # A held reply moves from the hold queue, intact, in this unit of work.
                message = _held(reader, reply) if reply.held else reply.message
                if queue:
                    note = forward_or_dead_letter(
                        transport, queue, message, reason, reply.source_queue, final, gather,
                        gather,
                    )  # fmt: skip
                else:
                    note = f"{gather} discarded a held duplicate"
                ledger.mark(transport, spec.ledger_queue, key, note, spec.ledger_hours)

        # One message in memory at a time, so the largest held one is what it holds.
        held = max((reply.size for _, reply, _ in items if reply.held), default=0)
        self._held_unit_of_work(gather, held, work)


def _final_before(
    transport: Transport, ledger_queue: str, inp: PutResponseInput, msg_id: bytes
) -> MQMessage | None:
    """The marker of this gather's final, if one was committed: this outcome's (also
    from before finals were grouped), else, in a run after a reset, any other's."""
    found = ledger.find(transport, ledger_queue, Match(msg_id=msg_id))
    if found is None and inp.after_reset:
        group = final_group(ledger_owner(inp.gather_id, inp.chain))
        found = ledger.find(transport, ledger_queue, Match(correl_id=group))
    return found


def _carried_by_final(transport: Transport, ledger_queue: str, gather: str) -> set[str]:
    """The keys of the replies this gather's final carried (none before its final)."""
    return ledger.carried_by_final(transport, ledger_queue, gather, FINAL_ENDINGS)


def placed(
    transport: Transport,
    spec: AggregateSpec,
    gather: str,
    replies: Sequence[tuple[Reply, bool]],
    chain: str = "",
) -> list[str]:
    """Where each of a gather's replies (with whether its legs hold it) is already, ""
    where nowhere: carried by the gather's final, forwarded or discarded by the gather,
    or (held) no longer on its hold queue. A final written by a release before finals
    recorded their replies counts as carrying every reply of the legs."""
    gather = ledger_owner(gather, chain)
    final = ledger.find(transport, spec.ledger_queue, Match(correl_id=final_group(gather)))
    if final is None:
        keyed = (ledger.find(transport, spec.ledger_queue, Match(msg_id=key))
                 for key in _final_keys(gather))  # fmt: skip
        final = next((marker for marker in keyed if marker is not None), None)
    record = _final_record(final)
    carried = record[2] if record is not None else set()
    queues = sorted({queue_for(spec, kind) for kind in ROUTED_KINDS} | {""})
    out = []
    for reply, in_a_leg in replies:
        done = [q for q in queues if _forwarded(transport, spec.ledger_queue, gather, q, reply)]
        if _final_key(reply) in carried or (in_a_leg and final is not None and record is None):
            out.append("carried by its final")
        elif done:
            out.append(f"forwarded to {done[0]}" if done[0] else "discarded as a duplicate")
        elif reply.held is not None and not _still_held(transport, reply.held):
            out.append(f"no longer on {reply.held.queue}")
        else:
            out.append("")
    return out


def _failed_final_key(inp: PutResponseInput) -> bytes:
    """The ledger key of a final that sent the gather's replies to the failure queue."""
    return ledger_key("merge failed", ledger_owner(inp.gather_id, inp.chain))


def _final_keys(gather: str) -> list[bytes]:
    """The ledger keys a gather's final may have been recorded under, whatever it was."""
    return [*(response_msg_id(gather, ended) for ended in sorted(FINAL_ENDINGS)),
            ledger_key("merge failed", gather)]  # fmt: skip


def _still_held(transport: Transport, held: HeldBody) -> bool:
    """Whether the body a reference names is on its hold queue (by its digest: another
    message there may share its MsgId and CorrelId)."""
    match = Match(msg_id=held.msg_id, correl_id=held.correl_id)
    return any(hold.digest(m.body) == held.sha256 for m in transport.browse(held.queue, match))


def _final_record(marker: MQMessage | None) -> tuple[str, str, set[str]] | None:
    """A final's marker read (:func:`bridge.mq.ledger.final_record`)."""
    return ledger.final_record(marker, FINAL_ENDINGS)


def _final_key(reply: Reply) -> str:
    """What a final's marker keeps of a reply it carried."""
    return ledger.digest(_reply_key(reply))


def _mark_final_in(
    transport: Transport, inp: PutResponseInput, key: bytes, ended: str, note: str
) -> None:
    """The ledger marker of a gather's final, in the caller's unit of work: under the
    gather's final group, with how it ended and what it carried, for a run after a
    reset to read (:meth:`MQActivities._closed_before`)."""
    spec = inp.aggregate
    carried = " ".join(_final_key(r) for leg in inp.legs for r in leg.replies)
    ledger.mark(transport, spec.ledger_queue, key, note, spec.ledger_hours,
                group=final_group(ledger_owner(inp.gather_id, inp.chain)),
                lines=[ended, carried])  # fmt: skip


def _reply_key(reply: Reply) -> str:
    """What names a reply in the ledger: its MsgId and fingerprint, since two replies may
    share a MsgId (workflows.redelivery)."""
    return redelivery.key(reply.message, reply.fingerprint)


def _carried_of(
    transport: Transport, *, spec: AggregateSpec, owner: str, replies: Sequence[Reply]
) -> list[Reply]:
    """Those of ``replies`` the gather's final carried (none before its final)."""
    carried = _carried_by_final(transport, spec.ledger_queue, owner)
    return [r for r in replies if _final_key(r) in carried]


def _move_key(owner: str, reply: Reply) -> bytes:
    """The ledger key of a reply's move to its gather's hold queue (``hold_replies``)."""
    return ledger_key("hold", owner, _reply_key(reply))


def _as_kept(
    transport: Transport, spec: AggregateSpec, owner: str, reply: Reply, look: bool
) -> Reply:
    """``reply`` as it is kept: by reference when ``look`` finds on the ledger that it
    was moved to the hold queue though it still carries its body (the move's result never
    reached the gather's state: it was cancelled, reset or ended meanwhile)."""
    if not look or reply.held is not None:
        return reply
    if not ledger.done(transport, spec.ledger_queue, _move_key(owner, reply)):
        return reply
    return as_held(reply, held_reference(spec.hold_queue, reply.message))


def _forwarded(transport: Transport, ledger_queue: str, gather: str, queue: str,
               reply: Reply) -> bool:  # fmt: skip
    """Whether this reply's forward to ``queue`` was committed before: recorded under its
    key, or (by a release before fingerprints, on a retry across an upgrade) its MsgId."""
    keys = dict.fromkeys((_reply_key(reply), reply.message.msg_id.hex()))  # one if the same
    return any(ledger.done(transport, ledger_queue, ledger_key("forward", gather, queue, k))
               for k in keys)  # fmt: skip


def _held(reader: hold.HeldReader, reply: Reply) -> MQMessage:
    """The whole message of a held reply, as it came, got from the hold queue under
    syncpoint."""
    assert reply.held is not None
    return reader.take_held(reply.held, reply.message)


def _bodies(
    reader: hold.HeldReader, inp: PutResponseInput, kept: Callable[[Reply], Reply] | None = None
) -> list[LegBodies]:
    """Each leg's bodies in reply order, held ones (as ``kept`` finds them) read from the
    hold queue; a leg named twice (a registration taken before such were refused) once,
    as its replies are."""

    def body(reply: Reply) -> bytes:
        if kept is not None:
            reply = kept(reply)
        return _held(reader, reply).body if reply.held else reply.message.body

    return [
        LegBodies(
            name=leg.leg.name,
            sequence=leg.leg.sequence,
            bodies=tuple(body(r) for r in leg.replies),
            ccsids=tuple(r.message.coded_char_set_id for r in leg.replies),
        )
        for leg in _distinct(inp)
    ]


def _distinct(inp: PutResponseInput) -> list[ReceivedLeg]:
    """The gather's received legs, each name once (the first)."""
    first: dict[str, ReceivedLeg] = {}
    for leg in inp.legs:
        first.setdefault(leg.leg.name, leg)
    return list(first.values())


def _merged(inp: PutResponseInput, legs: list[LegBodies]) -> Merged:
    """The response body of these legs, in the aggregate's merge format.

    Raises:
        MergeError: a body is not valid for the format.
    """
    all_text = all(r.message.format == MQFMT_STRING for leg in inp.legs for r in leg.replies)
    return merge(
        inp.aggregate,
        legs,
        correl_id=inp.correl_id.hex(),
        state=inp.outcome,
        missing=inp.missing,
        all_text=all_text,
    )


def _record_close(inp: PutResponseInput, outcome: str) -> None:
    """Metrics of a gather that ended: outcome, completion and per-leg latency."""
    m = telemetry.instruments()
    labels = {"aggregate": inp.aggregate.name, "outcome": outcome}
    m.gathers_closed.add(1, labels)
    if inp.started_at is None:
        return
    m.completion_latency.record(_ms(inp.started_at, datetime.now(UTC)), labels)
    for leg in inp.legs:
        first = min(r.received_at for r in leg.replies)
        m.leg_latency.record(
            max(_ms(inp.started_at, first), 0.0),
            {"aggregate": inp.aggregate.name, "leg": leg.leg.name},
        )


def _ms(start: datetime, end: datetime) -> float:
    return (end - start).total_seconds() * 1000
