"""The collector's configuration: ``[collectors.NAME]`` tables and the per-destination
rules kept in a database.

A collector batches the messages of one input queue by destination (seed 002's
Collector): each destination's rule gives the target queue, how many messages, how many
bytes and how long a batch may gather, and the format the batch is PUT in.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mqgather import constants as k
from mqgather.limits import MAX_BATCH_DELAY_SECONDS

BatchFormat = Literal["json", "xml", "blob", "group"]
FORMATS: tuple[str, ...] = ("json", "xml", "blob", "group")
#: Seconds a bridge keeps a destination's rule before reading the database again: a rule
#: change reaches new batches within this (plus one bridge batch).
RULE_REFRESH_SECONDS = 2.0
#: The longest refresh a configuration may ask for, so a change always lands within 5 s.
MAX_RULE_REFRESH_SECONDS = 4.0
_XML_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


class CollectorRule(BaseModel):
    """One destination's batching rule (a row of the rules table)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    destination: str = Field(min_length=1, max_length=200)
    target_queue: str = Field(min_length=1, max_length=48)
    max_messages: int = Field(default=10, ge=1, le=10_000, description="messages per batch")
    max_delay_seconds: float = Field(
        default=60.0,
        gt=0,
        le=MAX_BATCH_DELAY_SECONDS,
        description="from the batch's first message",
    )
    max_bytes: int = Field(
        default=1024 * 1024,
        ge=1,
        le=k.QMGR_MAXMSGL,
        description="bodies per batch; up to the target queue's MAXMSGL (large messages "
        "wait on the collector's hold queue, not in the batch's history)",
    )
    format: BatchFormat = Field(
        default="xml",
        description="json array, xml wrapper, blob with separator, or an MQ logical group",
    )
    separator: str = Field(default="", max_length=64, description="blob separator")


#: A collector's queues that messages are sent to (none may be its input queue), and
#: what each holds.
COLLECTOR_OUTPUT_QUEUES = (
    ("default_queue", "batches without a rule"),
    ("failure_queue", "unbatchable messages"),
    ("hold_queue", "large messages held for batches"),
    ("ledger_queue", "markers of PUTs done"),
)


class CollectorSpec(BaseModel):
    """One ``[collectors.NAME]`` table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="", max_length=64, description="the table's NAME")
    input_queue: str = Field(
        default=k.COLLECT_IN, min_length=1, max_length=48, description="messages to batch"
    )
    destination_key: str = Field(
        default="property:destination",
        description="property:NAME, json:dotted.path or xml:/Element/Path",
    )
    rules_db: str = Field(
        default=k.DEFAULT_RULES_DB,
        description="SQLite file, or a postgresql:// URL",
    )
    rule_refresh_seconds: float = Field(
        default=RULE_REFRESH_SECONDS,
        gt=0,
        le=MAX_RULE_REFRESH_SECONDS,
        description="how often the bridge reads the rules again",
    )
    missing_key: Literal["default", "failure"] = Field(
        default="default",
        description="a message without a destination key: the default rule, or the failure queue",
    )
    default_destination: str = Field(
        default="DEFAULT",
        min_length=1,
        max_length=200,
        description="the destination a message without a key is batched under",
    )
    default_queue: str = Field(
        default=k.COLLECT_DEFAULT_OUT,
        min_length=1,
        max_length=48,
        description="target of destinations without a rule",
    )
    default_max_messages: int = Field(
        default=10, ge=1, le=10_000, description="without a rule: a batch closes at this many"
    )
    default_max_delay_seconds: float = Field(
        default=60.0, gt=0, description="without a rule: a batch closes this long after its first"
    )
    default_max_bytes: int = Field(
        default=1024 * 1024, ge=1, description="without a rule: a batch closes at this size"
    )
    default_format: BatchFormat = Field(
        default="xml", description="without a rule: how a batch is written"
    )
    xml_wrapper: str = Field(default="Aggregation", description="root element of xml batches")
    failure_queue: str = Field(
        default=k.COLLECT_FAILURE,
        min_length=1,
        max_length=48,
        description="unbatchable messages, intact, with the reason",
    )
    inline_bytes: int = Field(
        default=k.DEFAULT_INLINE_REPLY_BYTES,
        ge=0,
        le=k.MAX_INLINE_REPLY_BYTES,
        description="a message whose body and properties are larger waits on hold_queue "
        "until its batch is PUT; its batch keeps a reference",
    )
    destination_inline_bytes: int = Field(
        default=k.DEFAULT_DESTINATION_INLINE_BYTES,
        ge=0,
        description="a bridge signals a destination this many bytes of messages inline a "
        "second (at most this many at once); past them its messages wait on hold_queue as "
        "larger ones do, so a flood for one destination keeps its history far from "
        "Temporal's limits; 0 holds every message",
    )
    hold_queue: str = Field(
        default=k.COLLECT_HOLD,
        min_length=1,
        max_length=48,
        description="where messages held for their size or their destination's bytes wait "
        "for their batch",
    )
    ledger_queue: str = Field(
        default=k.LEDGER_QUEUE,
        min_length=1,
        max_length=48,
        description="markers of PUTs done (exactly once)",
    )
    ledger_hours: float = Field(
        default=168.0, gt=0, description="how long a PUT's marker is kept (its MQ expiry)"
    )
    delivery_attempts: int = Field(
        default=5,
        ge=1,
        description="PUT attempts of a batch its target refuses for good (unknown queue, "
        "Q_FULL, put inhibited...) before it goes to the dead-letter queue behind an MQDLH "
        "naming the target; waiting longer, the batches behind it grew the collector's "
        "history toward the limit at which the server ends it",
    )
    remembered_msg_ids: int = Field(
        default=20_000,
        ge=100,
        le=50_000,
        description="per destination, the latest messages whose redelivery is recognised",
    )

    @field_validator("destination_key")
    @classmethod
    def _key(cls, value: str) -> str:
        kind, sep, where = value.partition(":")
        if not sep or kind not in ("property", "json", "xml") or not where:
            raise ValueError(
                f"{value!r}: write property:NAME, json:dotted.path or xml:/Element/Path"
            )
        return value

    @model_validator(mode="after")
    def _wrapper(self) -> CollectorSpec:
        if not _XML_NAME.match(self.xml_wrapper):
            raise ValueError("xml_wrapper: must be a valid XML element name")
        for field, _ in COLLECTOR_OUTPUT_QUEUES:
            if getattr(self, field) == self.input_queue:
                raise ValueError(
                    f"{field}: {self.input_queue} is also input_queue, so what is sent there "
                    "would come straight back to the bridge; name another queue"
                )
        return self

    def default_rule(self, destination: str) -> CollectorRule:
        """The rule of a destination the database does not list (seed 002's defaults)."""
        return CollectorRule(
            destination=destination,
            target_queue=self.default_queue,
            max_messages=self.default_max_messages,
            max_delay_seconds=self.default_max_delay_seconds,
            max_bytes=self.default_max_bytes,
            format=self.default_format,
        )
