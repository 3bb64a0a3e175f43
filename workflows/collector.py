"""The collector workflow: one per collector and destination, for as long as the
destination receives messages.

Messages arrive in ``collect`` signals (one per destination per bridge batch, so a busy
destination costs one signal per bridge batch, not per message). The batch under
construction is workflow state: a restart of anything strands nothing, and the durable
timer closes an incomplete batch at its delay. Closed batches are PUT in order by a
local activity, exactly once (ledger). The workflow continues as new whenever the server
suggests it and no batch waits for its PUT, carrying the open batch and the digests of
the latest messages (to recognise a redelivery).
"""

# No `from __future__ import annotations`: see workflows/gather.py.

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from mqgather import names
    from mqgather.constants import MQ_ATTEMPT_SECONDS
    from workflows import collect_logic as logic
    from workflows import settling
    from workflows.collect_models import (
        BatchStatus,
        CollectInput,
        CollectorInput,
        CollectorState,
        PutBatchInput,
        PutBatchResult,
        ReleaseBatchInput,
        ReleaseBatchResult,
        UnplacedBatch,
        UnplacedItems,
        collector_id,
    )
    from workflows.logic import carriable, failed_attempts, reason_refusal

PUT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2.0, maximum_attempts=2
)
PUT_TIMEOUT = timedelta(seconds=MQ_ATTEMPT_SECONDS)
#: A batch's delay counts from the bridge's receipt of its first message, not from the
#: workflow task that took it in. Collectors recorded before replay as they ran.
PATCH_DELAY_FROM_ARRIVAL = "delay-from-arrival"


@workflow.defn(name=names.COLLECT_WORKFLOW)
class CollectorWorkflow:
    """Batches one destination's messages and PUTs each batch once."""

    @workflow.init
    def __init__(self, inp: CollectorInput) -> None:
        self.spec = inp.collector
        self.destination = inp.destination
        self.id = collector_id(inp.collector.name, inp.destination)
        self.s: CollectorState = inp.carried or CollectorState()
        self._wake = False
        # History length when the latest PUT started (see ``_settled``).
        self._put_started = -1
        # Whether an attempt of a batch's PUT is under way (for salvage, ``unplaced``).
        self._putting = False

    @workflow.signal(name=names.SIGNAL_COLLECT)
    def collect(self, signal: CollectInput) -> None:
        """Messages for this destination from one bridge batch."""
        logic.take(self.s, signal, workflow.now(), self.spec.remembered_msg_ids,
                   from_arrival=workflow.patched(PATCH_DELAY_FROM_ARRIVAL),
                   by_content=workflow.patched(names.PATCH_BY_CONTENT),
                   carry_bound=workflow.patched(names.PATCH_BATCH_CARRIED))  # fmt: skip
        self._wake = True

    @workflow.query(name=names.QUERY_STATUS)
    def status(self) -> BatchStatus:
        """The open batch, what waits for its PUT, and the counters."""
        return logic.status(self.spec.name, self.destination, self.s)

    @workflow.query(name=names.QUERY_CONSUMED)
    def consumed(self, msg_ids: list[str]) -> list[str]:
        """Which of these MsgIds (hex) the collector has taken with no fingerprint (merged
        or batched): the question of bridges of earlier releases."""
        return logic.consumed(self.s, msg_ids)

    @workflow.query(name=names.QUERY_TAKEN)
    def taken(self, keys: list[str]) -> list[str]:
        """Which of these messages, by key (:mod:`workflows.redelivery`), the collector
        took (among the remembered)."""
        return logic.taken(self.s, keys)

    @workflow.query(name=names.QUERY_UNPLACED)
    def unplaced(self) -> UnplacedItems:
        """The messages the collector took and has not PUT: for an operator to put back
        when it ended by hand (terminated)."""
        batches = [UnplacedBatch(number=b.number, items=b.items) for b in self.s.ready]
        if self.s.open is not None:
            batches.append(UnplacedBatch(number=self.s.open.number, items=self.s.open.items))
        return UnplacedItems(workflow_id=self.id, run_id=workflow.info().run_id,
                             collector=self.spec, destination=self.destination,
                             batches=batches, mq_work=self._putting)  # fmt: skip

    @workflow.update(name=names.UPDATE_RELEASE)
    def release(self, inp: ReleaseBatchInput) -> ReleaseBatchResult:
        """Close the open batch now; it is PUT at once."""
        result = logic.release(self.s, inp.reason)
        self._wake = True
        return result

    @release.validator
    def _release_checked(self, inp: ReleaseBatchInput) -> None:
        """Refuse a reason too long to carry before the update is taken (and recorded)."""
        problem = reason_refusal(inp.reason)
        if problem is not None:
            raise ApplicationError(problem, type="UpdateRefused", non_retryable=True)

    @workflow.run
    async def run(self, inp: CollectorInput) -> None:
        """Close batches as they fill or expire and PUT them, indefinitely."""
        info = workflow.info()
        if info.run_id != info.original_execution_run_id:
            # A reset keeps the run id the history began with; continue-as-new does not.
            self.s.after_reset = True
        while True:
            logic.expire(self.s, workflow.now())
            while self.s.ready:
                await self._put_first()
                logic.expire(self.s, workflow.now())
            if workflow.info().is_continue_as_new_suggested() and workflow.all_handlers_finished():
                # What came with the settling event is in the state the next run carries,
                # unless that would outgrow a payload: then its closed batches go first.
                await self._settled()
                if (
                    not carriable(self.s)
                    and workflow.patched(names.PATCH_CARRY_FITS)
                    and logic.make_room(self.s, workflow.now())
                ):
                    continue
                workflow.continue_as_new(
                    CollectorInput(
                        collector=self.spec, destination=self.destination, carried=self.s
                    )
                )
            self._publish()
            self._wake = False
            with contextlib.suppress(TimeoutError):  # the batch's delay is over
                await workflow.wait_condition(
                    lambda: self._wake, timeout=logic.next_timer(self.s, workflow.now())
                )

    async def _settled(self) -> bool:
        """Wait for one event from the server before continuing as new (see
        :mod:`workflows.settling`); True when no signal or update came meanwhile."""
        if not workflow.patched(names.PATCH_SETTLE):
            return True  # recorded before this step existed
        self._wake = False
        return not await settling.settle(self._put_started) or not self._wake

    async def _put_first(self) -> None:
        while True:
            # Made anew for each round: a held message whose put backed out may have come
            # again with its body meanwhile (redelivery.with_body).
            batch = self.s.ready[0]
            inp = PutBatchInput(
                collector=self.spec,
                destination=self.destination,
                workflow_id=self.id,
                batch=batch,
                after_reset=self.s.after_reset,
                # On the last, a batch its target refuses for good is dead-lettered.
                attempts_before=failed_attempts(self.s),
            )
            self._put_started = settling.work_started()
            # Cleared when the attempt is known to have ended; a cancellation leaves its
            # thread running, so it stays set (not a `finally`).
            self._putting = True
            try:
                result = await workflow.execute_local_activity(
                    names.ACTIVITY_PUT_BATCH,
                    inp,
                    result_type=PutBatchResult,
                    start_to_close_timeout=PUT_TIMEOUT,
                    retry_policy=PUT_RETRY,
                )
            except (ActivityError, ApplicationError) as exc:
                self._putting = False
                cause = exc.cause if isinstance(exc, ActivityError) and exc.cause else exc
                delay = logic.put_failed(self.s, str(cause), workflow.now())
                workflow.logger.warning(
                    "collector %s: PUT of batch %d failing: %s; next round in %.0f s",
                    self.id, batch.number, cause, delay,
                )  # fmt: skip
                self._publish()
                await workflow.sleep(delay)
                continue
            self._putting = False
            # A batch dead-lettered is counted in `status` (the worker's log says so too).
            logic.put_done(self.s, batch.facts(), result)
            if result.reset_behind:
                self.s.after_reset = False
            return

    def _publish(self) -> None:
        batch = self.s.open
        workflow.upsert_search_attributes(
            [
                names.COLLECTOR_NAME.value_set(self.spec.name),
                names.COLLECT_DESTINATION.value_set(self.destination),
                names.BATCH_SIZE.value_set(len(batch.items) if batch else 0),
                names.BATCH_CLOSES_AT.value_set(batch.closes_at)
                if batch is not None
                else names.BATCH_CLOSES_AT.value_unset(),
            ]
        )
        workflow.set_current_details(logic.details(self.destination, self.s))


# Auto-upgrade, where gathers are pinned: a collector never ends, so a pin would hold its
# version's workers forever. It moves to the current version at its next task instead;
# the recorded collector histories replaying against new code is what makes that safe.
# A class of its own because the server refuses a versioning behavior from a worker that
# is not versioned.
@workflow.defn(name=names.COLLECT_WORKFLOW, versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class AutoUpgradeCollectorWorkflow(CollectorWorkflow):
    """The collector for versioned workers: follows the deployment's current version."""

    @workflow.run
    async def run(self, inp: CollectorInput) -> None:
        """As :meth:`CollectorWorkflow.run`."""
        await super().run(inp)
