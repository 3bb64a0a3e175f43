"""The gather workflow: one per aggregate and CorrelId.

OPEN (0 of N) -> PARTIAL (1..N-1) -> COMPLETE (N) | TIMEOUT (deadline), or RELEASED /
CANCELLED by an operator, or UNKNOWN when replies came and no registration ever did.
The rules live in :mod:`workflows.logic`; this class holds the handlers, the durable
timer and the activities.
"""

# No `from __future__ import annotations` here: the SDK resolves handler annotations for
# every workflow instance, and string annotations would be compiled each time.

import asyncio
import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from mqgather import names
    from mqgather.constants import MQ_ATTEMPT_SECONDS
    from workflows import legs, logic, settling
    from workflows.models import (
        CancelInput,
        ExtendInput,
        GatherInput,
        GatherResult,
        GatherState,
        GatherStatus,
        HoldRepliesInput,
        HoldRepliesResult,
        Outcome,
        PutResponseInput,
        PutResponseResult,
        Registration,
        ReleaseInput,
        Reply,
        ReplyBatch,
        RerequestInput,
        RouteInput,
        SendRequestInput,
        Undelivered,
        UnplacedReplies,
        UpdateResult,
        gather_id,
    )
    from workflows.timing import after

#: The inputs of MQ work that dead-letters what is refused for good on its last attempt.
_Counted = TypeVar("_Counted", RouteInput, SendRequestInput)

# One round of attempts inside the worker; between rounds the workflow records the error
# (status, current details) and waits on a durable timer (logic.attempt_failed).
ACTIVITY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_attempts=logic.ATTEMPTS_PER_ROUND,
)
# The MQ work takes milliseconds, so it runs as local activities: no activity task round
# trips through the server. Still at-least-once; the ledger makes each PUT happen once.
ACTIVITY_TIMEOUT = timedelta(seconds=MQ_ATTEMPT_SECONDS)
#: Re-requests of lost legs (a command the gather did not issue before): recorded as a
#: patch marker the first time a gather makes one.
PATCH_REREQUEST = "rerequest-lost-legs"
#: Replies moved to the hold queue from a state too large to carry into a new run (a
#: command the gather did not issue before): recorded the first time a gather moves some.
PATCH_MOVE_TO_HOLD = "move-replies-to-hold"
#: Patch: a move to the hold queue that fails gives way once the gather would end.
PATCH_MOVE_GIVES_WAY = "move-gives-way-to-the-end"
#: The task a closed gather leaves waiting for its eviction (:meth:`GatherWorkflow.run`).
EVICTION_WATCH = "let go of the state when evicted"


def unwound(exc: BaseException) -> BaseException:
    """``exc`` without its traceback and the exception it was raised during, to be raised
    again where it was caught.

    Evicting a gather that waits under its durable timer, the SDK cancels the wait, and
    the cancelled timer asks for a command the SDK refuses while it evicts. Its refusal,
    raised deep in asyncio's ``wait_for``, would keep every frame of the gather's
    coroutines alive in a reference cycle until a full collection, which at 10,000 open
    gathers stops the worker for 0.2-0.4 s (``bench.evictions``: 156 objects left per
    evicted gather with them, 114 without; 96 once ``run`` also lets go of the state).
    """
    exc.__context__ = None
    exc.__cause__ = None
    return exc.with_traceback(None)


def evicting(exc: BaseException) -> bool:
    """Whether ``exc`` is the SDK's refusal of a command while it evicts the workflow.

    Told by the name of the SDK's own class, which it does not export: were it renamed,
    the refusal is raised again as it came, which the SDK handles as before."""
    kind = type(exc)
    return kind.__name__ == "_WorkflowBeingEvictedError" and kind.__module__.startswith(
        "temporalio."
    )


# The versioning behavior (pinned) is the versioned worker's default, not set here: the
# SDK refuses a behavior on the definition when the worker runs unversioned.
@workflow.defn(name=names.GATHER_WORKFLOW)
class GatherWorkflow:
    """Collects the replies of one CorrelId and PUTs one merged response."""

    @workflow.init
    def __init__(self, inp: GatherInput) -> None:
        self._input = inp
        self.spec = inp.aggregate
        self.correl_id = inp.correl_id
        self.id = gather_id(inp.aggregate.name, inp.correl_id)
        self.s: GatherState = inp.carried or GatherState()
        self.settle = inp.settle
        self._wake = False
        # History length when the latest MQ work started (see ``_settled``).
        self._work_started = -1
        # Whether an attempt of MQ work is under way (for salvage, ``unplaced``).
        self._in_mq_work = False

    @workflow.signal(name=names.SIGNAL_EXPECT)
    def expect(self, reg: Registration) -> None:
        """A registration from the fan-out side: legs, where to reply, the timer."""
        refused = logic.registration_refusal(self.spec, reg) if self._input.legs_bounded else None
        if refused is not None:
            # A signal has no sender to answer: the worker's log says why it was left.
            workflow.logger.warning("registration of %s left: %s", self.id, refused)
            return
        logic.register(self.spec, self.s, reg, workflow.now())
        self._wake = True

    @workflow.signal(name=names.SIGNAL_REPLIES)
    def replies(self, batch: ReplyBatch) -> None:
        """Replies from the bridge (one signal per gather per bridge batch)."""
        logic.take_replies(self.spec, self.s, batch.replies, workflow.now(), self.id,
                           by_content=self._input.redelivery_by_content)  # fmt: skip
        self._wake = True

    @workflow.signal(name=names.SIGNAL_UNDELIVERED)
    def undelivered(self, inp: Undelivered) -> None:
        """MQ reported a leg's request undelivered (from the bridge): ask the leg again now
        if it has a re-request left."""
        if logic.is_closed(self.s) or not self.s.registered:
            return
        made = legs.rerequest_reported(self.s, inp.leg_index, inp.reason, inp.report,
                                       workflow.now())  # fmt: skip
        if made is not None:
            self._wake = True

    @workflow.query(name=names.QUERY_STATUS)
    def status(self) -> GatherStatus:
        """What the gather has and lacks now."""
        return logic.status(self.spec, self.s, self.correl_id, self.id, workflow.now())

    @workflow.query(name=names.QUERY_CONSUMED)
    def consumed(self, msg_ids: list[str]) -> list[str]:
        """Which of these MsgIds (hex) the gather has taken a message of (merged, held or
        routed): the question of bridges of earlier releases."""
        return logic.consumed(self.s, msg_ids)

    @workflow.query(name=names.QUERY_TAKEN)
    def taken(self, keys: list[str]) -> list[str]:
        """Which of these messages, by key (:mod:`workflows.redelivery`), the gather took."""
        return logic.taken(self.s, keys)

    @workflow.query(name=names.QUERY_UNPLACED)
    def unplaced(self) -> UnplacedReplies:
        """The replies the gather took that are in no place yet: for an operator to send
        where they belong when the gather ended without answering (terminated)."""
        s = self.s
        legs = [reply for replies in s.received.values() for reply in replies]
        return UnplacedReplies(gather_id=self.id, aggregate=self.spec, outbox=s.outbox,
                               legs=legs, waiting=s.held, chain=s.chain,
                               mq_work=self._in_mq_work)  # fmt: skip

    def _operated(self, result: UpdateResult) -> UpdateResult:
        """Wake the run loop when an operator's change was applied."""
        if result.accepted:
            self._wake = True
        return result

    @staticmethod
    def _checked(inp: ExtendInput | ReleaseInput | CancelInput | RerequestInput) -> None:
        """Refuse an update before it is taken (and recorded): what it asks for could not
        be kept (:func:`~workflows.logic.update_refusal`)."""
        problem = logic.update_refusal(inp)
        if problem is not None:
            raise ApplicationError(problem, type="UpdateRefused", non_retryable=True)

    @workflow.update(name=names.UPDATE_RELEASE)
    def release(self, inp: ReleaseInput) -> UpdateResult:
        """PUT what has arrived now."""
        return self._operated(logic.release(self.spec, self.s, inp.reason, workflow.now()))

    @release.validator
    def _release_checked(self, inp: ReleaseInput) -> None:
        self._checked(inp)

    @workflow.update(name=names.UPDATE_EXTEND)
    def extend(self, inp: ExtendInput) -> UpdateResult:
        """Move the deadline to ``seconds`` from now."""
        return self._operated(logic.extend(self.spec, self.s, inp.seconds, workflow.now()))

    @extend.validator
    def _extend_checked(self, inp: ExtendInput) -> None:
        self._checked(inp)

    @workflow.update(name=names.UPDATE_REREQUEST)
    def rerequest(self, inp: RerequestInput) -> UpdateResult:
        """PUT a leg's request again now (the request scatter sent, a new MsgId)."""
        return self._operated(logic.rerequest(self.s, inp.leg, inp.reason, workflow.now()))

    @rerequest.validator
    def _rerequest_checked(self, inp: RerequestInput) -> None:
        self._checked(inp)

    @workflow.update(name=names.UPDATE_CANCEL)
    def cancel(self, inp: CancelInput) -> UpdateResult:
        """End the gather; what arrived goes to the timeout queue as CANCELLED."""
        return self._operated(logic.cancel(self.spec, self.s, inp.reason, workflow.now()))

    @cancel.validator
    def _cancel_checked(self, inp: CancelInput) -> None:
        self._checked(inp)

    @workflow.run
    async def run(self, inp: GatherInput) -> GatherResult:
        """Wait for every leg under the durable timer, then merge and PUT."""
        try:
            result = await self._run()
        except (Exception, asyncio.CancelledError):
            raise  # a failure, or an operator's cancel: as it came, traceback and all
        # The SDK's own flow (an eviction from the worker's cache, a continue-as-new):
        # raised again at once, lighter; an eviction's refusal as a cancellation.
        except BaseException as exc:  # noqa: BLE001 - always ends the run, never swallowed
            if not isinstance(exc, workflow.ContinueAsNewError):
                # Evicted: this instance never runs again, and the SDK keeps it in
                # reference cycles until a full collection. The state it alone holds (the
                # replies, the legs' lists) is freed now instead.
                del self.s
            if evicting(exc):
                # A cancellation, which the SDK ignores while it evicts, ends the run task
                # without an error: its own refusal would stay with that task (which the
                # instance keeps) with every frame it passed through, for a full
                # collection to free. The cancellation's context is the refusal, so the
                # refusal lets go of its frames first.
                unwound(exc)
                raise asyncio.CancelledError from None
            raise unwound(exc) from None
        # Done, the SDK evicts this instance once the server has the last task, and keeps
        # it in reference cycles until a full collection. Queries may still reach it until
        # then, so the state is let go of at that eviction, not now.
        asyncio.get_running_loop().create_task(self._let_go_when_evicted(), name=EVICTION_WATCH)
        return result

    async def _let_go_when_evicted(self) -> None:
        """Wait for the eviction that follows the gather's close (the SDK cancels every task
        then), and let go of the state: freed by its reference count there and then,
        instead of waiting in the instance's cycles for a full collection. Started only at
        the close: at an open gather's eviction ``run`` lets go of the state itself, after
        its own unwinding, which still reads it."""
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.get_running_loop().create_future()
        del self.s

    async def _run(self) -> GatherResult:
        info = workflow.info()
        if info.run_id != info.original_execution_run_id:
            # A reset keeps the run id the history began with; continue-as-new does not.
            self.s.after_reset = True
        if self._input.ledger_by_chain and not self.s.chain:
            self.s.chain = info.first_execution_run_id
        if self.s.started_at is None:
            self.s.started_at = workflow.now()
            # Through the SDK's meter: not counted again when the history is replayed.
            workflow.metric_meter().create_counter(
                names.METRIC_GATHERS_STARTED, "gathers started, by aggregate"
            ).add(1, {"aggregate": self.spec.name})
            if self.spec.mode == "static" and not self.s.registered:
                logic.start_static(self.spec, self.s, workflow.now())
                logic.refresh(self.s)
        response: PutResponseResult | None = None
        try:
            response = await self._gather()
        except asyncio.CancelledError:
            # A cancel through Temporal (the UI's button, `temporal workflow cancel`) is an
            # operator's cancel: the partial response goes out and the gather ends CANCELLED.
            response = await self._cancelled()
        # Replies that raced the close are routed as late; none is dropped. With a late
        # window the gather stays to count late replies in its own history.
        linger_until = after(workflow.now(), self.spec.late_window_seconds)
        while True:
            self._publish()
            try:
                await self._flush()
            except asyncio.CancelledError:
                linger_until = workflow.now()  # cancelled while forwarding: flush again
                continue
            left = (linger_until - workflow.now()).total_seconds()
            if left > 0:
                self._wake = False
                try:
                    await workflow.wait_condition(lambda: self._wake, timeout=left)
                except TimeoutError:
                    pass
                except asyncio.CancelledError:
                    linger_until = workflow.now()  # cancelled while lingering: stop now
                continue
            await workflow.wait_condition(workflow.all_handlers_finished)
            if self.s.outbox:
                continue
            try:
                if await self._settled():
                    break
            except asyncio.CancelledError:
                continue  # cancelled while settling: settle again
        return logic.result(self.spec, self.s, self.correl_id, self.id, response, workflow.now())

    async def _gather(self) -> PutResponseResult | None:
        """Until the gather closes; the response, or None when it closed as UNKNOWN."""
        while True:
            await self._flush()
            if logic.unknown_expired(self.s, workflow.now()):
                logic.expire_unknown(self.s)
                return None
            ending = logic.decide_why(self.spec, self.s, workflow.now())
            if ending is not None:
                # Closed from here on: a reply arriving during the PUT is late, not lost.
                self.s.state, self.s.closed_by = ending
                legs.drop_unsent(self.s)
                return await self._respond(ending[0])
            legs.plan_rerequests(self.s, workflow.now())
            if self.s.to_request:
                await self._send_requests()
                continue  # time passed: decide again
            if workflow.info().is_continue_as_new_suggested() and workflow.all_handlers_finished():
                if logic.carriable(self.s):
                    # Whatever came with the settling event is in the state the next run
                    # carries (its outbox and re-requests too), so a flood cannot hold it
                    # off; unless it made the state too large to carry (the task failed
                    # each time, PayloadsTooLarge): its replies move to the hold queue
                    # first.
                    await self._settled()
                    if logic.carriable(self.s) or not workflow.patched(PATCH_MOVE_TO_HOLD):
                        # The next run starts as this one did (every flag kept), with the
                        # state.
                        workflow.continue_as_new(self._input.model_copy(update={"carried": self.s}))
                    continue
                # Too large to carry, the gather's history would grow until the server
                # ended it (50 MB), its replies taken: their bodies move to the hold queue
                # instead, a batch at a time, until the state fits.
                replies = logic.to_move(self.s)
                if replies and workflow.patched(PATCH_MOVE_TO_HOLD):
                    await self._move_to_hold(replies)
                    continue  # time passed: decide again
            self._wake = False
            # Published only while waiting (and at the end): a gather completed by one
            # batch costs one visibility update, not two.
            self._publish()
            with contextlib.suppress(TimeoutError):  # the durable timer fired
                await workflow.wait_condition(
                    lambda: self._wake, timeout=logic.next_timer(self.s, workflow.now())
                )

    async def _settled(self) -> bool:
        """Wait, when needed, for one event from the server (:mod:`workflows.settling`;
        ``GatherInput.settle`` switches it on); True when nothing came meanwhile, so the
        gather may end now."""
        if not self.settle:
            return True  # started before this step existed: replays as it ran
        self._wake = False
        if not await settling.settle(self._work_started):
            return True
        return not self._wake and not self.s.outbox

    async def _cancelled(self) -> PutResponseResult | None:
        """Finish a gather whose workflow was cancelled, wherever it was."""
        if not logic.is_closed(self.s):
            logic.cancel(self.spec, self.s, logic.TEMPORAL_CANCEL_REASON, workflow.now())
            if not self.s.registered:  # nothing adopted: held replies are already routed
                logic.expire_unknown(self.s)
                return None
            self.s.state, self.s.closed_by = "CANCELLED", "operator"
        elif self.s.state == "UNKNOWN":
            return None
        # Closed before the cancel (the PUT may have been under way): the ledger makes the
        # PUT happen once whichever attempt completes it.
        return await self._respond(self.s.state)  # type: ignore[arg-type]

    async def _respond(self, outcome: Outcome) -> PutResponseResult:
        work = "PUT of the response"

        def response_input() -> PutResponseInput:
            # Made anew for each round: a held reply whose put backed out may have come
            # again with its body meanwhile (redelivery.with_body).
            inp = logic.response_input(self.spec, self.s, self.correl_id, self.id, outcome)
            return inp.model_copy(update={"attempts_before": logic.failed_attempts(self.s, work)})

        response = await self._mq_work(
            work, names.ACTIVITY_PUT_RESPONSE, response_input, PutResponseResult
        )
        # FAILED; or the final of an earlier run (before a reset), which stands.
        if response.outcome != outcome:
            self.s.state = response.outcome
        return response

    async def _send_requests(self) -> None:
        """PUT the re-requests decided so far, each exactly once (ledger), in order."""
        if not workflow.patched(PATCH_REREQUEST):
            legs.drop_unsent(self.s)  # only histories from before re-requests get here
            return
        while self.s.to_request:
            item = self.s.to_request[0]
            sent = SendRequestInput(
                aggregate=self.spec,
                gather_id=self.id,
                leg=item.leg,
                attempt=item.attempt,
                request=self.s.requests[item.leg],
                reason=item.reason,
                expires_at=legs.awaited_until(self.s, item.leg)
                if self.spec.expire_requests
                else None,
                chain=self.s.chain,
            )
            work = f"re-request {item.attempt} of leg {item.leg}"
            await self._mq_work(work, names.ACTIVITY_SEND_REQUEST, self._counted(sent, work), str)
            del self.s.to_request[0]

    async def _move_to_hold(self, replies: list[Reply]) -> None:
        """Put ``replies`` on the hold queue, each exactly once (ledger), and keep their
        references instead of their bodies."""
        self.s.moved_to_hold = True
        moving = HoldRepliesInput(aggregate=self.spec, gather_id=self.id, replies=replies,
                                  chain=self.s.chain)  # fmt: skip
        work = f"move of {len(replies)} replies to the hold queue"
        result = await self._mq_work(work, names.ACTIVITY_HOLD_REPLIES, lambda: moving,
                                     HoldRepliesResult, give_up=self._decided)  # fmt: skip
        if result is not None:
            logic.moved(self.s, list(zip(replies, result.held, strict=True)))

    def _decided(self) -> bool:
        """Whether the gather would end now (complete, or past its deadline): a move to
        a hold queue that refuses it (full, PUT(DISABLED)) gives way to its response,
        which carries the bodies the state still has (it waited for ever, unanswered)."""
        return logic.decide_why(self.spec, self.s, workflow.now()) is not None and (
            workflow.patched(PATCH_MOVE_GIVES_WAY)
        )

    async def _flush(self) -> None:
        # Items leave the outbox only once forwarded: a cancel during the forwarding
        # leaves them for the next flush. Signals only append meanwhile.
        while self.s.outbox:
            items = list(self.s.outbox)
            routed = RouteInput(aggregate=self.spec, gather_id=self.id, items=items,
                                after_reset=self.s.after_reset, chain=self.s.chain,
                                moved_to_hold=self.s.moved_to_hold)  # fmt: skip
            work, forwarding = "forwarding of replies", names.ACTIVITY_ROUTE_REPLIES
            await self._mq_work(work, forwarding, self._counted(routed, work), int)
            del self.s.outbox[: len(items)]

    def _counted(self, inp: _Counted, work: str) -> Callable[[], _Counted]:
        """``inp`` for each round of its MQ ``work``, with the attempts that failed
        before: on the last, what its queue refuses for good is dead-lettered, and the
        gather goes on (it waited for ever, past its deadline)."""
        return lambda: inp.model_copy(
            update={"attempts_before": logic.failed_attempts(self.s, work)}
        )

    async def _mq_work(
        self,
        work: str,
        activity: str,
        make_input: Callable[[], Any],
        result_type: type,
        give_up: Callable[[], bool] | None = None,
    ) -> Any:
        """Run MQ work until it succeeds; between rounds of attempts the error is shown
        in ``status`` and the UI, and the workflow waits on a durable timer. None when,
        after a failed round, ``give_up`` says the work is no longer worth doing."""
        while True:
            self._work_started = settling.work_started()
            # Cleared when the attempt is known to have ended; a cancellation leaves its
            # thread running, so it stays set (not a `finally`).
            self._in_mq_work = True
            try:
                result = await workflow.execute_local_activity(
                    activity,
                    make_input(),
                    result_type=result_type,
                    start_to_close_timeout=ACTIVITY_TIMEOUT,
                    retry_policy=ACTIVITY_RETRY,
                )
            except (ActivityError, ApplicationError) as exc:
                self._in_mq_work = False
                # A local activity's failure arrives unwrapped, as the ApplicationError.
                cause = exc.cause if isinstance(exc, ActivityError) and exc.cause else exc
                delay = logic.attempt_failed(self.s, work, str(cause), workflow.now())
                # workflow.logger stays silent on replay: one line per failed round.
                workflow.logger.warning(
                    "gather %s: %s; next round in %.0f s",
                    self.id, logic.error_note(self.s), delay,
                )  # fmt: skip
                self._publish()
                await workflow.sleep(delay)
                if give_up is not None and give_up():
                    # Its error no longer stands: the gather goes on without it.
                    logic.attempt_succeeded(self.s)
                    workflow.logger.warning("gather %s: %s given up", self.id, work)
                    return None
                continue
            self._in_mq_work = False
            if logic.attempt_succeeded(self.s):
                self._publish()
            return result

    def _publish(self) -> None:
        """Search attributes and current details, so the UI shows the gather at a glance."""
        updates = logic.search_updates(
            workflow.info().typed_search_attributes,
            logic.search_values(self.spec, self.s, self.correl_id),
            changed_only=self._input.changed_attributes_only,
        )
        if updates:
            workflow.upsert_search_attributes(updates)
        workflow.set_current_details(logic.details(self.s, workflow.now()))
