"""Inputs, outputs and state of the collector workflow: one per collector and destination."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from bridge.mq.models import MQMessage
from mqgather.collector_config import CollectorRule, CollectorSpec
from workflows.models import Fingerprint, HeldBody

CloseReason = Literal["count", "bytes", "delay", "released"]
_BYTES = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")


class Item(BaseModel):
    """One input message as the bridge got it."""

    message: MQMessage
    received_at: datetime
    size: int = Field(default=0, ge=0, description="the body's length in bytes, held or not")
    held: HeldBody | None = Field(
        default=None, description="set when the body is on the hold queue, not in ``message``"
    )
    fingerprint: Fingerprint = ""

    def body_bytes(self) -> int:
        """The body's length (items from before sizes were recorded: the body's)."""
        return self.size or len(self.message.body)


class CollectInput(BaseModel):
    """Signal ``collect``: a destination's messages from one bridge batch, with the rule
    the bridge read for it (it governs a batch these messages open)."""

    rule: CollectorRule
    items: list[Item]


class OpenBatch(BaseModel):
    """The batch under construction."""

    number: int
    rule: CollectorRule
    items: list[Item] = Field(default_factory=list)
    size_bytes: int = 0
    #: The items' JSON, as the batch's PUT carries them (counted once the patch is on).
    carried_bytes: int = 0
    opened_at: datetime
    closes_at: datetime


class ClosedBatch(BaseModel):
    """A closed batch, waiting for (or past) its PUT."""

    number: int
    rule: CollectorRule
    items: list[Item]
    opened_at: datetime
    closed_at: datetime
    reason: CloseReason

    def facts(self) -> BatchFacts:
        """What this batch is, for operators and the analytics job."""
        return BatchFacts(
            number=self.number,
            messages=len(self.items),
            size_bytes=sum(i.body_bytes() for i in self.items),
            first_received_at=min((i.received_at for i in self.items), default=None),
            opened_at=self.opened_at,
            closed_at=self.closed_at,
            reason=self.reason,
            target_queue=self.rule.target_queue,
            format=self.rule.format,
        )


class CollectorState(BaseModel):
    """Everything a destination's collector knows; carried across continue-as-new."""

    model_config = _BYTES

    next_batch: int = 1
    open: OpenBatch | None = None
    ready: list[ClosedBatch] = Field(default_factory=list, description="closed, not yet PUT")
    seen: list[str] = Field(
        default_factory=list, description="digests of the latest messages taken (redeliveries)"
    )
    messages: int = 0
    batches: int = 0
    redeliveries: int = 0
    release: str | None = None
    last_batch: BatchFacts | None = None
    last_error: str = ""
    failing_since: datetime | None = None
    failed_rounds: int = 0
    dead_lettered: int = Field(
        default=0, description="batches their target refused for good, dead-lettered"
    )
    last_dead_letter: str = Field(default="", description="the latest of them: where, and why")
    after_reset: bool = Field(
        default=False,
        description="a run an operator's reset started (or one continued from it): its "
        "batches are told apart from what the run before put, until that is behind them",
    )
    #: ``seen`` as a set, for lookups; kept in step with the list, never carried.
    _seen: set[str] = PrivateAttr(default_factory=set)


class UnplacedBatch(BaseModel):
    """A batch of a collector's, by number, with the messages it had not PUT."""

    number: int
    items: list[Item]


class UnplacedItems(BaseModel):
    """Query ``unplaced``: the messages a collector took and had not PUT (its batch under
    construction and those waiting for their PUT), with its configuration."""

    workflow_id: str
    run_id: str = ""
    collector: CollectorSpec
    destination: str
    batches: list[UnplacedBatch] = Field(default_factory=list)
    mq_work: bool = Field(
        default=False,
        description="an attempt of a batch's PUT was under way when the run ended: it may "
        "yet commit until its timeout",
    )


class BatchFacts(BaseModel):
    """What one PUT batch was: for operators and the analytics job."""

    number: int
    messages: int
    size_bytes: int
    #: When the bridge got the batch's first message (None in batches of older versions).
    first_received_at: datetime | None = None
    opened_at: datetime
    closed_at: datetime
    reason: CloseReason
    target_queue: str
    format: str


CollectorState.model_rebuild()


class CollectorInput(BaseModel):
    """Workflow input: the collector's configuration and the destination."""

    collector: CollectorSpec
    destination: str
    carried: CollectorState | None = None


class PutBatchInput(BaseModel):
    """Activity input: format one closed batch and PUT it in one unit of work."""

    collector: CollectorSpec
    destination: str
    workflow_id: str
    batch: ClosedBatch
    after_reset: bool = Field(
        default=False, description="put only what the run before a reset did not put"
    )
    attempts_before: int = Field(
        default=0, ge=0, description="PUT attempts already made and failed in earlier rounds"
    )


class PutBatchResult(BaseModel):
    """Activity result: where the batch went and how many MQ messages it made.

    It carries the batch's facts so that the workflow history holds them (in the local
    activity's marker), where the analytics job reads them.
    """

    queue: str
    messages_put: int
    size_bytes: int
    #: After a reset, the facts of what this run put itself (None where the run before
    #: had put it all): the run before's batches count from its own history.
    batch: BatchFacts | None = None
    #: Messages of the batch that went to the failure queue instead (unreadable text).
    failed: int = 0
    #: Why the target refused the batch for good, when it went to the dead-letter queue
    #: (``queue``) instead.
    refused: str = ""
    #: After a reset: the run before put no batch numbered this one's or later, so the
    #: batches that follow need not be told apart from its.
    reset_behind: bool = False


class ReleaseBatchInput(BaseModel):
    """Update ``release``: close the open batch now and PUT it."""

    reason: str = "released by an operator"


class ReleaseBatchResult(BaseModel):
    """What a release did."""

    released: bool
    messages: int = 0
    message: str = ""


class BatchStatus(BaseModel):
    """Query ``status`` of a destination's collector."""

    collector: str
    destination: str
    open_messages: int
    open_bytes: int
    opened_at: datetime | None
    closes_at: datetime | None
    rule: CollectorRule | None
    waiting_to_put: int
    batches: int
    messages: int
    redeliveries: int
    last_batch: BatchFacts | None
    last_error: str = ""
    dead_lettered: int = 0
    last_dead_letter: str = ""


def collector_id(collector: str, destination: str) -> str:
    """The workflow id of a destination's collector."""
    return f"collect:{collector}:{destination}"
