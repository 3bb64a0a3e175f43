"""The gather workflow: one per aggregate and CorrelId.

OPEN (0 of N) -> PARTIAL (1..N-1) -> COMPLETE (N) | TIMEOUT (deadline), or RELEASED /
CANCELLED by an operator, or UNKNOWN when replies came and no registration ever did.
The rules live in :mod:`workflows.logic`; this class holds the handlers, the durable
timer and the activities.
"""

# No `from __future__ import annotations` here: the SDK resolves handler annotations for
# every workflow instance, and string annotations would be compiled each time.

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from mqgather import names
    from workflows import logic
    from workflows.models import (
        CancelInput,
        ExtendInput,
        GatherInput,
        GatherResult,
        GatherState,
        GatherStatus,
        Outcome,
        PutResponseResult,
        Registration,
        ReleaseInput,
        ReplyBatch,
        RouteInput,
        UpdateResult,
        gather_id,
    )

ACTIVITY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
)
# The MQ work takes milliseconds, so it runs as local activities: no activity task round
# trips through the server. Still at-least-once; the ledger makes each PUT happen once.
ACTIVITY_TIMEOUT = timedelta(seconds=60)


# The versioning behavior (pinned) is the versioned worker's default, not set here: the
# SDK refuses a behavior on the definition when the worker runs unversioned.
@workflow.defn(name=names.GATHER_WORKFLOW)
class GatherWorkflow:
    """Collects the replies of one CorrelId and PUTs one merged response."""

    @workflow.init
    def __init__(self, inp: GatherInput) -> None:
        self.spec = inp.aggregate
        self.correl_id = inp.correl_id
        self.id = gather_id(inp.aggregate.name, inp.correl_id)
        self.s: GatherState = inp.carried or GatherState()
        self._wake = False

    @workflow.signal(name=names.SIGNAL_EXPECT)
    def expect(self, reg: Registration) -> None:
        """A registration from the fan-out side: legs, where to reply, the timer."""
        logic.register(self.spec, self.s, reg, workflow.now())
        self._wake = True

    @workflow.signal(name=names.SIGNAL_REPLIES)
    def replies(self, batch: ReplyBatch) -> None:
        """Replies from the bridge (one signal per gather per bridge batch)."""
        logic.take_replies(self.spec, self.s, batch.replies, workflow.now(), self.id)
        self._wake = True

    @workflow.query(name=names.QUERY_STATUS)
    def status(self) -> GatherStatus:
        """What the gather has and lacks now."""
        return logic.status(self.spec, self.s, self.correl_id, self.id)

    @workflow.query(name=names.QUERY_CONSUMED)
    def consumed(self, msg_ids: list[str]) -> list[str]:
        """Which of these MsgIds (hex) the gather has taken (merged, held or routed)."""
        return logic.consumed(self.s, msg_ids)

    def _operated(self, result: UpdateResult) -> UpdateResult:
        """Wake the run loop when an operator's change was applied."""
        if result.accepted:
            self._wake = True
        return result

    @workflow.update(name=names.UPDATE_RELEASE)
    def release(self, inp: ReleaseInput) -> UpdateResult:
        """PUT what has arrived now."""
        return self._operated(logic.release(self.spec, self.s, inp.reason, workflow.now()))

    @workflow.update(name=names.UPDATE_EXTEND)
    def extend(self, inp: ExtendInput) -> UpdateResult:
        """Move the deadline to ``seconds`` from now."""
        return self._operated(logic.extend(self.s, inp.seconds, workflow.now()))

    @workflow.update(name=names.UPDATE_CANCEL)
    def cancel(self, inp: CancelInput) -> UpdateResult:
        """End the gather; what arrived goes to the timeout queue as CANCELLED."""
        return self._operated(logic.cancel(self.spec, self.s, inp.reason, workflow.now()))

    @workflow.run
    async def run(self, inp: GatherInput) -> GatherResult:
        """Wait for every leg under the durable timer, then merge and PUT."""
        if self.s.started_at is None:
            self.s.started_at = workflow.now()
            if self.spec.mode == "static" and not self.s.registered:
                logic.start_static(self.spec, self.s, workflow.now())
                logic.refresh(self.s)
        response: PutResponseResult | None = None
        while True:
            await self._flush()
            if logic.unknown_expired(self.s, workflow.now()):
                logic.expire_unknown(self.s)
                break
            outcome = logic.decide(self.s, workflow.now())
            if outcome is not None:
                # Closed from here on: a reply arriving during the PUT is late, not lost.
                self.s.state = outcome
                response = await self._respond(outcome)
                if response.outcome == "FAILED":
                    self.s.state = "FAILED"
                break
            if workflow.info().is_continue_as_new_suggested() and workflow.all_handlers_finished():
                workflow.continue_as_new(
                    GatherInput(aggregate=self.spec, correl_id=self.correl_id, carried=self.s)
                )
            self._wake = False
            # Published only while waiting (and at the end): a gather completed by one
            # batch costs one visibility update, not two.
            self._publish()
            with contextlib.suppress(TimeoutError):  # the durable timer fired
                await workflow.wait_condition(
                    lambda: self._wake, timeout=logic.next_timer(self.s, workflow.now())
                )
        # Replies that raced the close are routed as late; none is dropped. With a late
        # window the gather stays to count late replies in its own history.
        linger_until = workflow.now() + timedelta(seconds=self.spec.late_window_seconds)
        while True:
            self._publish()
            await self._flush()
            left = (linger_until - workflow.now()).total_seconds()
            if left > 0:
                self._wake = False
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(lambda: self._wake, timeout=left)
                continue
            await workflow.wait_condition(workflow.all_handlers_finished)
            if not self.s.outbox:
                break
        return logic.result(self.spec, self.s, self.correl_id, self.id, response, workflow.now())

    async def _flush(self) -> None:
        while self.s.outbox:
            items, self.s.outbox = self.s.outbox, []
            await workflow.execute_local_activity(
                names.ACTIVITY_ROUTE_REPLIES,
                RouteInput(aggregate=self.spec, gather_id=self.id, items=items),
                result_type=int,
                start_to_close_timeout=ACTIVITY_TIMEOUT,
                retry_policy=ACTIVITY_RETRY,
            )

    async def _respond(self, outcome: Outcome) -> PutResponseResult:
        return await workflow.execute_local_activity(
            names.ACTIVITY_PUT_RESPONSE,
            logic.response_input(self.spec, self.s, self.correl_id, self.id, outcome),
            result_type=PutResponseResult,
            start_to_close_timeout=ACTIVITY_TIMEOUT,
            retry_policy=ACTIVITY_RETRY,
        )

    def _publish(self) -> None:
        """Search attributes and current details, so the UI shows the gather at a glance."""
        received = len(logic.received_names(self.s))
        workflow.upsert_search_attributes(
            [
                names.AGGREGATE_NAME.value_set(self.spec.name),
                names.CORREL_ID.value_set(self.correl_id.hex()),
                names.GATHER_STATE.value_set(self.s.state),
                names.LEGS_PENDING.value_set(len(self.s.expected) - received),
                names.LEGS_RECEIVED.value_set(received),
            ]
        )
        workflow.set_current_details(logic.details(self.s))
