"""The gather workflow: one per aggregate and CorrelId.

OPEN (0 of N) -> PARTIAL (1..N-1) -> COMPLETE (N) | TIMEOUT (deadline), or RELEASED /
CANCELLED by an operator, or UNKNOWN when replies came and no registration ever did.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey

with workflow.unsafe.imports_passed_through():
    from mqgather.config import LegSpec
    from workflows.models import (
        CLOSED_STATES,
        CancelInput,
        ExtendInput,
        GatherInput,
        GatherResult,
        GatherState,
        GatherStatus,
        Outcome,
        PutResponseInput,
        PutResponseResult,
        ReceivedLeg,
        Registration,
        ReleaseInput,
        Reply,
        ReplyBatch,
        Routed,
        RouteInput,
        UpdateResult,
        gather_id,
    )

AGGREGATE_NAME = SearchAttributeKey.for_keyword("AggregateName")
CORREL_ID = SearchAttributeKey.for_keyword("CorrelId")
GATHER_STATE = SearchAttributeKey.for_keyword("GatherState")
LEGS_PENDING = SearchAttributeKey.for_int("LegsPending")
LEGS_RECEIVED = SearchAttributeKey.for_int("LegsReceived")
SEARCH_ATTRIBUTES = (AGGREGATE_NAME, CORREL_ID, GATHER_STATE, LEGS_PENDING, LEGS_RECEIVED)

ACTIVITY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
)
ACTIVITY_TIMEOUT = timedelta(seconds=60)


@workflow.defn(name="Gather")
class GatherWorkflow:
    """Collects the replies of one CorrelId and PUTs one merged response."""

    @workflow.init
    def __init__(self, inp: GatherInput) -> None:
        self.spec = inp.aggregate
        self.correl_id = inp.correl_id
        self.s = inp.carried or GatherState()
        self._wake = False

    # ------------------------------------------------------------------ handlers

    @workflow.signal(name="expect")
    def expect(self, reg: Registration) -> None:
        """A registration from the fan-out side: which legs, where to reply, the timer."""
        now = workflow.now()
        if self._closed():
            return
        if not self.s.registered or self.spec.timer == "restart":
            timeout = (
                reg.timeout_seconds
                if reg.timeout_seconds is not None
                else self.spec.timeout_seconds
            )
            self.s.deadline = now + timedelta(seconds=timeout) if timeout > 0 else None
        first = self.s.registered_at is None
        self.s.registered_at = self.s.registered_at or now
        self.s.request_msg_id = reg.request_msg_id or self.s.request_msg_id
        self.s.reply_to_q = reg.reply_to_q or self.s.reply_to_q
        self.s.reply_to_qmgr = reg.reply_to_qmgr or self.s.reply_to_qmgr
        if first or not self.s.expected:
            if reg.legs:
                self.s.expected = list(reg.legs)
            elif reg.count:
                self.s.expected = [
                    LegSpec(name=f"{self.spec.label}{i}", sequence=i)
                    for i in range(1, reg.count + 1)
                ]
            elif self.spec.legs:
                self.s.expected = list(self.spec.legs)
        self.s.registered = True
        self.s.unknown_deadline = None
        held, self.s.held = self.s.held, []
        for reply in held:
            self._accept(reply)
        self._touch()

    @workflow.signal(name="replies")
    def replies(self, batch: ReplyBatch) -> None:
        """Replies from the bridge (one signal per gather per bridge batch)."""
        for reply in batch.replies:
            msg_id = reply.message.msg_id.hex()
            if msg_id in self.s.seen_msg_ids:
                self.s.redeliveries += 1  # the bridge crashed before MQCMIT: already counted
                continue
            self.s.seen_msg_ids.append(msg_id)
            if self._closed():
                self._route("late", reply, f"gather {self._id()} already {self.s.state}")
            elif not self.s.registered:
                self.s.held.append(reply)
                if self.s.unknown_deadline is None:
                    self.s.unknown_deadline = workflow.now() + timedelta(
                        seconds=self.spec.unknown_timeout_seconds
                    )
            else:
                self._accept(reply)
        self._touch()

    @workflow.query(name="status")
    def status(self) -> GatherStatus:
        """What the gather has and lacks now."""
        return GatherStatus(
            gather_id=self._id(),
            aggregate=self.spec.name,
            correl_id=self.correl_id.hex(),
            state=self.s.state,
            registered=self.s.registered,
            legs_expected=[leg.name for leg in self.s.expected],
            legs_received=self._received_names(),
            legs_missing=self._missing(),
            held=len(self.s.held),
            duplicates=self.s.duplicates,
            redeliveries=self.s.redeliveries,
            late=self.s.late,
            unknown=self.s.unknown,
            started_at=self.s.started_at,
            deadline=self.s.deadline,
        )

    @workflow.update(name="release")
    def release(self, inp: ReleaseInput) -> UpdateResult:
        """PUT what has arrived now."""
        if self._closed():
            return UpdateResult(accepted=False, state=self.s.state, message="already closed")
        self.s.release = inp.reason
        self._touch()
        return UpdateResult(accepted=True, state=self.s.state, message=inp.reason)

    @workflow.update(name="extend")
    def extend(self, inp: ExtendInput) -> UpdateResult:
        """Move the deadline to ``seconds`` from now."""
        if self._closed():
            return UpdateResult(accepted=False, state=self.s.state, message="already closed")
        self.s.deadline = workflow.now() + timedelta(seconds=inp.seconds)
        self._touch()
        return UpdateResult(accepted=True, state=self.s.state, deadline=self.s.deadline)

    @workflow.update(name="cancel")
    def cancel(self, inp: CancelInput) -> UpdateResult:
        """End the gather; what arrived goes to the timeout queue as CANCELLED."""
        if self._closed():
            return UpdateResult(accepted=False, state=self.s.state, message="already closed")
        self.s.cancel = inp.reason
        self._touch()
        return UpdateResult(accepted=True, state=self.s.state, message=inp.reason)

    # ------------------------------------------------------------------ main

    @workflow.run
    async def run(self, inp: GatherInput) -> GatherResult:
        """Wait for every leg under the durable timer, then merge and PUT."""
        if self.s.started_at is None:
            self.s.started_at = workflow.now()
            if self.spec.mode == "static" and not self.s.registered:
                # Static legs (the aggregate lists them): the first reply starts the gather.
                self.s.registered = True
                self.s.expected = list(self.spec.legs)
                if self.spec.timeout_seconds > 0:
                    self.s.deadline = workflow.now() + timedelta(seconds=self.spec.timeout_seconds)
                self.s.unknown_deadline = None
                held, self.s.held = self.s.held, []
                for reply in held:
                    self._accept(reply)
        response: PutResponseResult | None = None
        while True:
            self._publish()
            await self._flush()
            if self._unknown_expired():
                for reply in self.s.held:
                    self._route("unknown", reply, "no registration came within the unknown timeout")
                self.s.held = []
                self.s.state = "UNKNOWN"
                break
            outcome = self._decide()
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
            with contextlib.suppress(TimeoutError):  # the durable timer fired
                await workflow.wait_condition(lambda: self._wake, timeout=self._next_timer())
        # Replies that raced the close are routed as late; none is dropped.
        while True:
            self._publish()
            await self._flush()
            await workflow.wait_condition(workflow.all_handlers_finished)
            if not self.s.outbox:
                break
        return self._result(response)

    # ------------------------------------------------------------------ logic

    def _id(self) -> str:
        return gather_id(self.spec.name, self.correl_id)

    def _closed(self) -> bool:
        return self.s.state in CLOSED_STATES

    def _touch(self) -> None:
        if not self._closed():
            received = sum(1 for leg in self.s.expected if leg.name in self.s.received)
            self.s.state = "OPEN" if received == 0 else "PARTIAL"
        self._wake = True

    def _route(self, kind: str, reply: Reply, reason: str) -> None:
        if kind == "late":
            self.s.late += 1
        elif kind == "unknown":
            self.s.unknown += 1
        self.s.outbox.append(
            Routed.model_validate({"kind": kind, "reply": reply, "reason": reason})
        )

    def _accept(self, reply: Reply) -> None:
        """File a reply under its leg, applying the duplicate policy."""
        leg = self._leg_of(reply)
        if leg is None:
            self._route("unknown", reply, "reply names no expected leg")
            return
        have = self.s.received.setdefault(leg.name, [])
        if have:
            self.s.duplicates += 1
            policy = self.spec.duplicates
            if policy == "all":
                have.append(reply)
                return
            dropped = have[0] if policy == "last" else reply
            if policy == "last":
                have[0] = reply
            if self.spec.duplicate_queue:
                self._route("duplicate", dropped, f"duplicate reply for leg {leg.name}")
            return
        have.append(reply)

    def _leg_of(self, reply: Reply) -> LegSpec | None:
        expected = self.s.expected
        if reply.leg is not None:
            return next((leg for leg in expected if leg.name == reply.leg), None)
        if reply.leg_index is not None:
            return expected[reply.leg_index] if 0 <= reply.leg_index < len(expected) else None
        # Count-only: each reply fills the next empty leg.
        return next((leg for leg in expected if leg.name not in self.s.received), None)

    def _received_names(self) -> list[str]:
        return [leg.name for leg in self.s.expected if leg.name in self.s.received]

    def _missing(self) -> list[str]:
        return [leg.name for leg in self.s.expected if leg.name not in self.s.received]

    def _unknown_expired(self) -> bool:
        return (
            not self.s.registered
            and self.s.unknown_deadline is not None
            and workflow.now() >= self.s.unknown_deadline
        )

    def _decide(self) -> Outcome | None:
        now = workflow.now()
        if self.s.cancel is not None:
            return "CANCELLED"
        if self.s.registered and self.s.expected and not self._missing():
            return "COMPLETE"
        if self.s.release is not None:
            return "RELEASED"
        if self.s.registered and self.s.deadline is not None and now >= self.s.deadline:
            return "TIMEOUT"
        return None

    def _next_timer(self) -> float | None:
        due: datetime | None = self.s.deadline if self.s.registered else self.s.unknown_deadline
        if due is None:
            return None
        return max((due - workflow.now()).total_seconds(), 0.001)

    async def _flush(self) -> None:
        while self.s.outbox:
            items, self.s.outbox = self.s.outbox, []
            await workflow.execute_activity(
                "route_replies",
                RouteInput(aggregate=self.spec, gather_id=self._id(), items=items),
                start_to_close_timeout=ACTIVITY_TIMEOUT,
                retry_policy=ACTIVITY_RETRY,
            )

    async def _respond(self, outcome: Outcome) -> PutResponseResult:
        legs = [
            ReceivedLeg(leg=leg, replies=self.s.received[leg.name])
            for leg in self.s.expected
            if leg.name in self.s.received
        ]
        return await workflow.execute_activity(
            "put_response",
            PutResponseInput(
                aggregate=self.spec,
                gather_id=self._id(),
                correl_id=self.correl_id,
                outcome=outcome,
                legs=legs,
                missing=self._missing(),
                request_msg_id=self.s.request_msg_id,
                reply_to_q=self.s.reply_to_q,
                reply_to_qmgr=self.s.reply_to_qmgr,
            ),
            result_type=PutResponseResult,
            start_to_close_timeout=ACTIVITY_TIMEOUT,
            retry_policy=ACTIVITY_RETRY,
        )

    def _publish(self) -> None:
        """Search attributes and current details, so the UI shows the gather at a glance."""
        received = self._received_names()
        workflow.upsert_search_attributes(
            [
                AGGREGATE_NAME.value_set(self.spec.name),
                CORREL_ID.value_set(self.correl_id.hex()),
                GATHER_STATE.value_set(self.s.state),
                LEGS_PENDING.value_set(len(self.s.expected) - len(received)),
                LEGS_RECEIVED.value_set(len(received)),
            ]
        )
        missing = ", ".join(self._missing()) or "none"
        deadline = self.s.deadline.isoformat() if self.s.deadline else "none"
        workflow.set_current_details(
            f"**{self.s.state}** — {len(received)}/{len(self.s.expected)} legs "
            f"(received: {', '.join(received) or 'none'}; missing: {missing}); "
            f"deadline {deadline}; duplicates {self.s.duplicates}, late {self.s.late}, "
            f"unknown {self.s.unknown}"
        )

    def _result(self, response: PutResponseResult | None) -> GatherResult:
        return GatherResult(
            gather_id=self._id(),
            aggregate=self.spec.name,
            correl_id=self.correl_id.hex(),
            state=self.s.state,
            legs_expected=[leg.name for leg in self.s.expected],
            legs_received=self._received_names(),
            legs_missing=self._missing(),
            duplicates=self.s.duplicates,
            redeliveries=self.s.redeliveries,
            late=self.s.late,
            unknown=self.s.unknown,
            response_queues=response.queues if response else [],
            response_msg_id=response.msg_id if response else "",
            error=response.error if response else "",
            consumed_msg_ids=list(self.s.seen_msg_ids),
            started_at=self.s.started_at,
            ended_at=workflow.now(),
        )
