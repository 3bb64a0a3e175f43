"""The configuration file (TOML): queue definitions, and later the aggregates.

Without a file, the embedded defaults below define everything the demo needs.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mqgather import constants as k
from mqgather import limits
from mqgather.ccsid import codec
from mqgather.collector_config import COLLECTOR_OUTPUT_QUEUES, CollectorSpec
from mqgather.completion import ALL, QUORUM_PREFIX, Rule, RuleError, parse_rule
from mqgather.errors import ConfigError, problem_reason
from mqgather.names import ENV_CONFIG


class QueueDefinition(BaseModel):
    """One ``[queues."NAME"]`` table: DEFINE QLOCAL attributes."""

    model_config = ConfigDict(extra="forbid")

    maxdepth: int = Field(
        default=k.DEFAULT_MAXDEPTH, ge=0, le=k.MAX_QUEUE_DEPTH, description="MAXDEPTH"
    )
    maxmsgl: int = Field(
        default=k.DEFAULT_MAXMSGL, ge=0, le=k.QMGR_MAXMSGL, description="MAXMSGL, bytes"
    )
    bothresh: int = Field(
        default=0,
        ge=0,
        le=k.MAX_QUEUE_DEPTH,
        description="BOTHRESH: backouts before BOQNAME (0: a bridge takes its --backout-threshold)",
    )
    boqname: str = Field(default="", max_length=48, description="BOQNAME: the backout queue")
    descr: str = Field(default="", max_length=64, description="DESCR")


class LegSpec(BaseModel):
    """One expected reply: its name and IA72 SequenceNumber (order in xml/blob merges),
    whether the gather needs it, its own deadline and how often to ask again."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]*$",
        description="the leg's name, as replies carry it (leg_property) and rules name it",
    )
    sequence: int = Field(
        default=0, ge=0, description="IA72 SequenceNumber: the leg's place in xml/blob merges"
    )
    request_queue: str = Field(default="", max_length=48, description="where scatter sends it")
    required: bool | None = Field(
        default=None,
        description="true: the gather waits for it whatever the rule; false: optional, "
        "waited for only until its own deadline (or the gather's); unset: needed under "
        'complete_when = "all", left to the rule under the others',
    )
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        description="the leg's own deadline, from the registration; past it the leg "
        "counts as missing for the completion rule",
    )
    retries: int = Field(
        default=0,
        ge=0,
        le=k.MAX_LEG_RETRIES,
        description="how many times the gather PUTs the leg's request again (the request "
        "scatter sent, new MsgId, same CorrelId) when no reply came; the last wait, "
        "retry_after_seconds * retry_backoff ** (retries - 1), is at most 366 days",
    )
    retry_after_seconds: float = Field(
        default=k.DEFAULT_RETRY_AFTER_SECONDS,
        gt=0,
        description="wait after the request before the first re-request",
    )
    retry_backoff: float = Field(
        default=2.0, ge=1.0, le=10.0, description="each later wait is this many times longer"
    )

    def queue(self) -> str:
        """The leg's request queue (default ``BACKEND.<name>``)."""
        return self.request_queue or f"BACKEND.{self.name}"

    def needed(self, rule_kind: str) -> bool:
        """Whether a gather must have this leg to complete (``required``, or by default
        under the ``all`` rule)."""
        return self.required if self.required is not None else rule_kind == ALL

    def optional(self) -> bool:
        """Set ``required = false``: waited for until its deadline, never needed."""
        return self.required is False


class AggregateSpec(BaseModel):
    """One ``[aggregates.NAME]`` table. Passed to each gather as input, so it is
    recorded in history and a gather finishes under the config it started with."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="", max_length=64, description="AggregateName")
    reply_queue: str = Field(default=k.GATHER_IN, description="ReplyToQueue")
    mode: Literal["registration", "static"] = Field(
        default="registration",
        description="registration: legs come from each expect (ACE); static: the legs below, "
        "and the first reply starts the gather",
    )
    legs: tuple[LegSpec, ...] = Field(
        default=(), description="the expected legs (static mode) and scatter's default legs"
    )
    leg_identification: Literal["property", "correlid", "count", "group"] = Field(
        default="property",
        description="group: the replies are one MQ logical group; its GroupId is the "
        "gather's key, MsgSeqNumber the leg, the last-in-group message the count",
    )
    leg_property: str = Field(
        default="leg",
        description="the message property naming a reply's leg (every request carries it: "
        "a name IBM MQ sets, a Java identifier with inner dots)",
    )
    max_group_size: int = Field(
        default=1000,
        ge=1,
        description="group identification: a reply with a higher MsgSeqNumber goes to the "
        "failure queue (a gather's state must stay small)",
    )
    timeout_seconds: float = Field(default=30.0, ge=0, description="ReplyTimeoutSeconds/Timeout")
    complete_when: str = Field(
        default=ALL,
        description='when the gather has what it needs: "all" (every required leg), '
        '"any" (the first reply), "quorum:N" (any N legs) or an expression over leg '
        'names with and, or and parentheses, such as "CREDIT and (STOCK or STOCK_ALT)"',
    )
    keep_requests: bool = Field(
        default=False,
        description="scatter keeps every leg's request with its gather, so an operator can "
        "re-request any leg by hand (legs with retries keep theirs anyway)",
    )
    expire_requests: bool = Field(
        default=False,
        description="scatter's requests expire (MQMD Expiry) when nobody waits for their "
        "reply any more: at the leg's own deadline, else the gather's; a re-request gets "
        "the time left. A back end that comes back late never works on them: MQ discards "
        "them unread",
    )
    request_reports: bool = Field(
        default=False,
        description="scatter's requests ask MQ for an exception report (MQRO_EXCEPTION) to "
        "the reply queue when they cannot be delivered; such a report (or an expiration "
        "report) about a leg's request re-requests the leg at once when it has a "
        "re-request left (its retries), instead of waiting out retry_after_seconds. Needs "
        'leg_identification = "correlid": the report\'s CorrelId names the leg',
    )
    timer: Literal["first", "restart"] = Field(
        default="first", description="first: from the first registration (ACE); restart: IA72"
    )
    unknown_timeout_seconds: float = Field(default=30.0, ge=0, description="Unknown Msg Timeout")
    merge: Literal["json", "xml", "blob", "folders"] = Field(
        default="json", description="AggregatedReplyDataType: how the legs become one response"
    )
    label: str = Field(default="Reply", description="AggregatedReplyLabelName (xml)")
    separator: str = Field(default="", description="SeparatorString (blob)")
    hex_separator: str = Field(default="", description="HexSeparatorString (blob)")
    late_window_seconds: float = Field(
        default=0.0,
        ge=0,
        description="after closing, keep routing late replies (counted in history) this long",
    )
    duplicates: Literal["first", "last", "all"] = Field(
        default="first",
        description="a second reply for a leg: keep the first, the last, or all of them",
    )
    destination: Literal["default", "replyToQueue", "destinationList"] = Field(
        default="default", description="AggregatedReplyDestination"
    )
    destination_list: tuple[str, ...] = Field(
        default=(), description="DestinationList: the queues each response goes to"
    )
    response_queue: str = Field(default=k.ORDER_RESPONSE, description="merged responses")
    timeout_queue: str = Field(
        default=k.GATHER_TIMEOUT, description="partial responses (TIMEOUT, CANCELLED)"
    )
    late_queue: str = Field(default=k.GATHER_LATE, description="replies after the gather closed")
    unknown_queue: str = Field(default=k.GATHER_UNKNOWN, description="replies nobody registered")
    failure_queue: str = Field(
        default=k.GATHER_FAILURE, description="bad input, intact, with the reason"
    )
    duplicate_queue: str = Field(
        default=k.GATHER_DUPLICATE,
        description='where duplicate replies go; "" counts them and discards the copy',
    )
    report_queue: str = Field(
        default=k.GATHER_REPORT,
        min_length=1,
        max_length=48,
        description="report messages (MsgType MQMT_REPORT: COA, COD, expiry, exception, "
        "activity, PAN, NAN) that reach the reply queue: intact, with the Feedback named",
    )
    reports_are_replies: bool = Field(
        default=False,
        description="take report messages as leg replies (for back ends that answer with "
        "MQMT_REPORT and an application Feedback) instead of sending them to report_queue",
    )
    max_reply_bytes: int = Field(
        default=k.QMGR_MAXMSGL,
        gt=0,
        description="a larger reply goes to the failure queue (the queues' MAXMSGL bounds "
        "it anyway)",
    )
    inline_reply_bytes: int = Field(
        default=k.DEFAULT_INLINE_REPLY_BYTES,
        ge=0,
        le=k.MAX_INLINE_REPLY_BYTES,
        description="a reply whose body and properties are larger is held on hold_queue "
        "(MQMD, properties and body intact) and its gather keeps a reference to it; 0 "
        "holds every reply",
    )
    gather_inline_bytes: int = Field(
        default=k.DEFAULT_GATHER_INLINE_BYTES,
        ge=0,
        description="once a bridge has signalled a gather this many bytes of replies "
        "inline, the gather's later replies are held on hold_queue as larger ones are, so "
        "a flood for one CorrelId keeps the gather's history far from Temporal's limits; "
        "0 holds every reply",
    )
    hold_queue: str = Field(
        default=k.GATHER_HOLD,
        min_length=1,
        max_length=48,
        description="where replies held for their size or their gather's bytes wait for it",
    )
    correl_id_text: bool = Field(
        default=True,
        description="index a printable CorrelId as text (CorrelIdText) for searches; false "
        "keeps message-derived text out of search attributes, which Temporal never "
        "encrypts (the hex CorrelId and the workflow id stay)",
    )
    response_ccsid: int = Field(
        default=1208,
        description="CodedCharSetId the text of json, xml and folders responses "
        "is written in (each leg is read in its own)",
    )
    max_held_replies: int = Field(
        default=100,
        ge=1,
        description="replies a gather holds before its registration, and keeps per leg with "
        "duplicates = all; more go out at once (unknown / duplicate queue)",
    )
    max_held_bytes: int = Field(
        default=1024 * 1024, gt=0, description="bodies a gather holds before its registration"
    )
    delivery_attempts: int = Field(
        default=5,
        ge=1,
        description="PUT attempts of a response refused for good (unknown queue, Q_FULL, "
        "put inhibited...) before it goes to the dead-letter queue and the gather FAILS; "
        "a reply forwarded to the late, duplicate or failure queue, or a leg's re-request, "
        "likewise (the gather goes on)",
    )
    ledger_queue: str = Field(
        default=k.LEDGER_QUEUE, min_length=1, description="markers of PUTs already done"
    )
    ledger_hours: float = Field(
        default=k.DEFAULT_LEDGER_HOURS,
        gt=0,
        description="how long a PUT's marker is kept (its MQ expiry)",
    )

    @field_validator("response_ccsid")
    @classmethod
    def _ccsid(cls, value: int) -> int:
        codec(value)
        return value

    @field_validator("complete_when")
    @classmethod
    def _rule(cls, value: str) -> str:
        try:
            return parse_rule(value).text
        except RuleError as exc:
            raise ValueError(str(exc)) from exc

    def rule(self) -> Rule:
        """The parsed ``complete_when``."""
        return parse_rule(self.complete_when)

    @field_validator("hex_separator")
    @classmethod
    def _hex(cls, value: str) -> str:
        if value:
            bytes.fromhex(value)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> AggregateSpec:
        names = [leg.name for leg in self.legs]
        if len(names) != len(set(names)):
            raise ValueError("legs: leg names must be unique")
        if self.merge == "xml" and not re.match(r"^[A-Za-z_][A-Za-z0-9_.\-]*$", self.label):
            raise ValueError("label: must be a valid XML element name for xml merge")
        if self.leg_identification == "group":
            if self.mode != "static" or self.legs:
                raise ValueError(
                    'leg_identification: "group" needs mode = "static" and no legs listed: '
                    "the first reply starts the gather and the group says how many legs"
                )
        elif self.mode == "static" and not self.legs:
            raise ValueError("legs: static mode needs the legs listed")
        if self.request_reports and (
            self.leg_identification != "correlid" or self.mode == "static"
        ):
            raise ValueError(
                'request_reports: needs leg_identification = "correlid" and mode = '
                '"registration": a report names its leg only by the CorrelId scatter gave '
                "the request"
            )
        if self.destination == "destinationList" and not self.destination_list:
            raise ValueError("destination_list: needed when destination is destinationList")
        self._check_rule(names)
        self._check_outputs()
        for index, leg in enumerate(self.legs):
            if leg.retries and self.mode == "static":
                raise ValueError(
                    f"legs.{index}.retries: a static aggregate sends no requests (its first "
                    "reply starts the gather), so there is no request to send again; "
                    'use mode = "registration" with scatter'
                )
        return self

    def _check_outputs(self) -> None:
        """No queue the aggregate sends to is its reply queue: what goes there would come
        straight back to its bridge (a failure forwarded for ever, a leg's request taken
        for its reply)."""
        sent_to = [(field, getattr(self, field)) for field, _ in OUTPUT_QUEUES]
        sent_to += [("destination_list", queue) for queue in self.destination_list]
        sent_to += [(f"legs.{i}.request_queue", leg.queue()) for i, leg in enumerate(self.legs)]
        for field, queue in sent_to:
            if queue == self.reply_queue:
                raise ValueError(
                    f"{field}: {queue} is also reply_queue, so what is sent there would come "
                    "straight back to the bridge; name another queue"
                )

    def _check_rule(self, names: list[str]) -> None:
        """The rule fits the legs: an expression names only listed legs, a quorum is
        not larger than the legs."""
        rule = self.rule()
        if rule.kind == "expression":
            if not names:
                raise ValueError(
                    "complete_when: an expression names legs, so the aggregate must list "
                    "them (legs = [...])"
                )
            unknown = sorted(rule.names() - set(names))
            if unknown:
                raise ValueError(
                    f"complete_when: {', '.join(unknown)} is not a leg of this aggregate "
                    f"(legs: {', '.join(names)})"
                )
        if rule.kind == QUORUM_PREFIX and names and rule.quorum > len(names):
            raise ValueError(
                f"complete_when: quorum {rule.quorum} is more than the {len(names)} legs"
            )

    def separator_bytes(self) -> bytes:
        """The blob separator: HexSeparatorString wins over SeparatorString."""
        if self.hex_separator:
            return bytes.fromhex(self.hex_separator)
        return self.separator.encode()


class MQGatherConfig(BaseModel):
    """The whole configuration file."""

    model_config = ConfigDict(extra="forbid")

    queues: dict[str, QueueDefinition] = Field(default_factory=dict)
    aggregates: dict[str, AggregateSpec] = Field(default_factory=dict)
    collectors: dict[str, CollectorSpec] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _named(self) -> MQGatherConfig:
        self.aggregates = _named_after_keys(self.aggregates)
        self.collectors = _named_after_keys(self.collectors)
        self._no_ping_pong()
        return self

    def _no_ping_pong(self) -> None:
        """No queue that holds what a bridge set aside (late, unknown, failure, duplicate,
        report, hold, ledger) is another's input: the other bridge would set it aside
        again, back to the first, for ever. A response may feed another gather."""
        inputs = {spec.reply_queue: f"aggregates.{name}.reply_queue"
                  for name, spec in self.aggregates.items()}  # fmt: skip
        inputs |= {spec.input_queue: f"collectors.{name}.input_queue"
                   for name, spec in self.collectors.items()}  # fmt: skip
        aside = [(f"aggregates.{name}.{field}", getattr(spec, field))
                 for name, spec in self.aggregates.items() for field in SET_ASIDE]  # fmt: skip
        aside += [(f"collectors.{name}.{field}", getattr(spec, field))
                  for name, spec in self.collectors.items()
                  for field, _ in COLLECTOR_OUTPUT_QUEUES if field != "default_queue"]  # fmt: skip
        for key, queue in aside:
            if queue in inputs:
                raise ValueError(
                    f"{key}: {queue} is also {inputs[queue]}, so what is set aside there "
                    "would be read again by that bridge; name another queue"
                )

    def collector(self, name: str) -> CollectorSpec:
        """The collector called ``name``.

        Raises:
            ConfigError: no such collector.
        """
        return _one(self.collectors, "collectors", "collector", name)

    def aggregate(self, name: str) -> AggregateSpec:
        """The aggregate called ``name``.

        Raises:
            ConfigError: no such aggregate.
        """
        return _one(self.aggregates, "aggregates", "aggregate", name)


Named = TypeVar("Named", AggregateSpec, CollectorSpec)


def _named_after_keys(table: dict[str, Named]) -> dict[str, Named]:
    """Each entry of a ``[table.NAME]`` with its ``name`` set to NAME."""
    return {
        name: spec if spec.name == name else spec.model_copy(update={"name": name})
        for name, spec in table.items()
    }


def _one(table: dict[str, Named], section: str, kind: str, name: str) -> Named:
    try:
        return table[name]
    except KeyError:
        known = ", ".join(sorted(table)) or "none"
        raise ConfigError(f"{section}.{name}", f"no such {kind} (known: {known})") from None


def default_aggregates() -> dict[str, AggregateSpec]:
    """The demo's aggregate: three legs, named by a ``leg`` property, merged as JSON."""
    return {
        "orders": AggregateSpec(
            name="orders",
            legs=DEMO_LEGS,
            timeout_seconds=5.0,
            unknown_timeout_seconds=3.0,
        )
    }


DEMO_LEGS = (
    LegSpec(name="CREDIT", sequence=10),
    # Asked again once when silent (the demo drops some first requests of it).
    LegSpec(name="STOCK", sequence=20, retries=1, retry_after_seconds=2.5),
    LegSpec(name="TAX", sequence=30),
)


#: The aggregate's queues that messages are sent to (none may be its reply queue), and
#: what each holds.
OUTPUT_QUEUES = (
    ("response_queue", "responses"),
    ("timeout_queue", "partial responses on timeout"),
    ("late_queue", "late replies"),
    ("unknown_queue", "unknown replies"),
    ("failure_queue", "bad input"),
    ("duplicate_queue", "duplicate replies"),
    ("report_queue", "report messages"),
    ("hold_queue", "large replies held for their gathers"),
    ("ledger_queue", "markers of PUTs done"),
)


#: The output queues that hold what a bridge or gather set aside: all but the answers.
SET_ASIDE = tuple(
    field for field, _ in OUTPUT_QUEUES if field not in ("response_queue", "timeout_queue")
)


def default_queues() -> dict[str, QueueDefinition]:
    """The queues the embedded defaults define (room for a demo of thousands of gathers)."""
    deep = 100_000

    def carrying(descr: str, **more: Any) -> QueueDefinition:
        # Replies, and responses merged from them, may be as large as the queue manager
        # allows (IBM MQ's default MAXMSGL of 4 MB would refuse a 5 MB document).
        return QueueDefinition(maxdepth=deep, maxmsgl=k.QMGR_MAXMSGL, descr=descr, **more)

    queues = {
        k.GATHER_IN: carrying("replies from the back ends", bothresh=3, boqname=k.GATHER_BACKOUT),
        k.ORDER_RESPONSE: carrying("merged responses"),
        k.GATHER_TIMEOUT: carrying("partial responses on timeout"),
        k.GATHER_LATE: carrying("replies after the gather closed"),
        k.GATHER_UNKNOWN: carrying("replies nobody registered"),
        k.GATHER_FAILURE: carrying("bad input, with the reason"),
        k.GATHER_BACKOUT: carrying("replies backed out BOTHRESH times"),
        k.GATHER_DUPLICATE: carrying("duplicate leg replies"),
        k.GATHER_REPORT: carrying("report messages that reached the reply queue"),
        k.GATHER_HOLD: carrying("large replies held for their gathers"),
        k.LEDGER_QUEUE: QueueDefinition(
            maxdepth=1_000_000,
            maxmsgl=k.LEDGER_MAXMSGL,
            descr="markers of PUTs done (exactly once)",
        ),
    }
    for leg in DEMO_LEGS:
        queues[leg.queue()] = QueueDefinition(maxdepth=deep, descr=f"{leg.name} requests")
    queues[k.COLLECT_IN] = carrying("messages to batch", bothresh=3, boqname=k.COLLECT_FAILURE)
    queues[k.COLLECT_DEFAULT_OUT] = carrying("batches of destinations without a rule")
    queues[k.COLLECT_FAILURE] = carrying("unbatchable, with reason")
    queues[k.COLLECT_HOLD] = carrying("large messages held for their batches")
    for queue in k.COLLECT_DEMO_OUT:
        queues[queue] = carrying("the demo's batches")
    return queues


def default_collectors() -> dict[str, CollectorSpec]:
    """The demo's collector: ``destination`` property, rules in the embedded SQLite file."""
    return {"orders": CollectorSpec(name="orders")}


def referenced_queues(config: MQGatherConfig) -> dict[str, str]:
    """Every queue the configuration names, with what it is for: the defined queues and
    their BOQNAMEs, and each aggregate's reply, output, ledger and leg request queues."""
    found: dict[str, str] = {}

    def note(queue: str, purpose: str) -> None:
        if queue and queue not in found:
            found[queue] = purpose

    for name, definition in config.queues.items():
        note(name, definition.descr or "defined in [queues]")
    for name, definition in config.queues.items():
        note(definition.boqname, f"BOQNAME of {name}")
    for spec in config.aggregates.values():
        where = f"aggregate {spec.name}"
        note(spec.reply_queue, f"replies of {where}")
        for field, purpose in OUTPUT_QUEUES:
            note(getattr(spec, field), f"{purpose} of {where}")
        for queue in spec.destination_list:
            note(queue, f"destination list of {where}")
        for leg in spec.legs:
            note(leg.queue(), f"{leg.name} requests of {where}")
    for collector in config.collectors.values():
        where = f"collector {collector.name}"
        note(collector.input_queue, f"messages to batch of {where}")
        for field, purpose in COLLECTOR_OUTPUT_QUEUES:
            note(getattr(collector, field), f"{purpose} of {where}")
    return found


def state_file(path: str, key: str, what: str) -> Path:
    """A file mqgather may create, whose directory must exist already, so a mistyped
    directory is an error rather than an empty new file; mqgather's own state directory
    is the exception (``is_state_dir`` tells the caller to create it).

    Raises:
        ConfigError: naming ``key``: the directory does not exist.
    """
    file = Path(path)
    parent = file.parent
    if not parent.is_dir() and not is_state_dir(parent):
        raise ConfigError(
            key,
            f"the directory {parent} of {path!r} does not exist; create it first "
            f"({what} is created, its directory is not)",
        )
    return file


def is_state_dir(path: Path) -> bool:
    """Whether ``path`` is mqgather's own state directory (created on demand)."""
    return path.resolve() == Path(k.STATE_DIR).resolve()


def _flatten_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"])
        parts.append(f"{where}: {problem_reason(err)}")
    return "; ".join(parts)


def leg_over_limits(leg: LegSpec) -> tuple[str, str] | None:
    """The first key of ``leg`` past its limit (:mod:`mqgather.limits`) and why, or None;
    its last re-request's wait counts against the longest wait."""
    found = limits.first_over(leg, limits.LEG)
    if found is None and leg.retries:
        # Each re-request waits retry_backoff times longer than the one before.
        last = leg.retry_after_seconds * leg.retry_backoff ** (leg.retries - 1)
        if not last <= k.MAX_WAIT_SECONDS:
            return "retries", (
                f"the last re-request would wait {last:.3g} s, more than "
                f"{limits.shown(k.MAX_WAIT_SECONDS)}; lower retries, retry_backoff or "
                "retry_after_seconds"
            )
    return found


def leg_name_clash(names: Iterable[str], merge: str) -> str | None:
    """Why these names cannot name one gather's legs, or None: a name given twice, or,
    for the json merge (whose response keys each leg by its name in lower case), two
    names equal but for case, whose replies would be written under one key."""
    seen: dict[str, str] = {}
    for name in names:
        key = name.lower() if merge == "json" else name
        first = seen.get(key)
        if first is None:
            seen[key] = name
            continue
        if first == name:
            return f"leg {name} is named twice"
        return (
            f"legs {first} and {name} are one key in the json merge's response, which names "
            "each leg in lower case: rename one"
        )
    return None


def over_limits(spec: AggregateSpec) -> tuple[str, str] | None:
    """The first key of ``spec`` past its limit (:mod:`mqgather.limits`), its legs'
    included (``legs.N.key``), or naming a property IBM MQ would refuse to set, and why;
    None when all are within."""
    # Every request carries it: refused by MQ, every scatter would fail at its first PUT.
    problem = limits.property_name_problem(spec.leg_property)
    if problem is not None:
        return "leg_property", problem
    found = limits.first_over(spec, limits.AGGREGATE)
    if found is not None:
        return found
    for index, leg in enumerate(spec.legs):
        at_leg = leg_over_limits(leg)
        if at_leg is not None:
            return f"legs.{index}.{at_leg[0]}", at_leg[1]
    return None


#: Distinct aggregate specs kept for sharing (:func:`shared_spec`); past it the table
#: starts again, so a worker whose configuration keeps changing holds no more.
SHARED_SPECS_MAX = 256
_shared_specs: dict[AggregateSpec, AggregateSpec] = {}


def shared_spec(spec: AggregateSpec) -> AggregateSpec:
    """The one instance of ``spec``'s value that the gathers holding it share.

    A gather's start input, its aggregate's spec within it, lives with the gather in the
    worker for as long as it is cached there (the SDK keeps it). Equal specs decoded
    apart are each objects the garbage collector walks while the gather is open and
    frees in a full collection once it is evicted; one per value instead is none of
    that. A spec is frozen, so sharing it changes nothing a gather sees.
    """
    # Every field of a spec is a hashable value (tuples, not lists), as a frozen model's.
    found = _shared_specs.get(spec)
    if found is not None:
        return found
    if len(_shared_specs) >= SHARED_SPECS_MAX:
        _shared_specs.clear()
    _shared_specs[spec] = spec
    return spec


def _shadowing_collectors(collectors: dict[str, CollectorSpec]) -> str | None:
    """Why two collectors' destinations could share a workflow, or None: each
    destination's is ``collect:<collector>:<destination>``, so collector ``c`` sending to
    ``x:y`` would be collector ``c:x`` sending to ``y``."""
    for name in collectors:
        for other in collectors:
            if name.startswith(f"{other}:"):
                return (
                    f"collectors.{name}: its name begins with collector {other}'s and ':', so "
                    f"a destination of {other} could name one of {name}'s workflows; rename one"
                )
    return None


def parse_config(data: dict[str, Any], source: str) -> MQGatherConfig:
    """Validate a configuration mapping; errors name the key at fault and the file."""
    try:
        config = MQGatherConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, _flatten_error(exc)) from exc
    for name, spec in config.aggregates.items():
        # Checked where the configuration enters, not by the model, which a gather's
        # recorded input decodes as it ran.
        if clash := leg_name_clash((leg.name for leg in spec.legs), spec.merge):
            raise ConfigError(source, f"aggregates.{name}.legs: {clash}")
        found = over_limits(spec)
        if found is not None:
            raise ConfigError(source, f"aggregates.{name}.{found[0]}: {found[1]}")
    if shadow := _shadowing_collectors(config.collectors):
        raise ConfigError(source, shadow)
    for name, collector in config.collectors.items():
        found = limits.first_over(collector, limits.COLLECTOR)
        if found is not None:
            raise ConfigError(source, f"collectors.{name}.{found[0]}: {found[1]}")
    for queue, purpose in referenced_queues(config).items():
        if problem := limits.queue_name_problem(queue):
            # A leg's default request queue is made from its name, which may hold a '-'.
            hint = "; give the leg a request_queue" if " requests of " in purpose else ""
            raise ConfigError(source, f"queue {queue!r} ({purpose}): {problem}{hint}")
    return config


def load_config(path: str | os.PathLike[str] | None = None) -> MQGatherConfig:
    """Read the configuration: ``path``, else ``$MQGATHER_CONFIG``, else ``mqgather.toml``
    in the working directory if present, else the embedded defaults.

    Raises:
        ConfigError: the file is missing (when named), unreadable or invalid.
    """
    named = path or os.environ.get(ENV_CONFIG)
    file = Path(named) if named else Path(k.DEFAULT_CONFIG_FILE)
    if not file.exists():
        if named:
            raise ConfigError(str(file), "configuration file not found")
        return MQGatherConfig(
            queues=default_queues(),
            aggregates=default_aggregates(),
            collectors=default_collectors(),
        )
    try:
        # TOML is UTF-8 whatever the locale; an editor's byte-order mark is passed over.
        data = tomllib.loads(file.read_bytes().decode("utf-8-sig"))
    except OSError as exc:
        raise ConfigError(str(file), f"cannot read: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            str(file), f"not UTF-8 ({exc.reason} at byte {exc.start}): TOML is UTF-8; save it so"
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(file), f"not valid TOML: {exc}") from exc
    config = parse_config(data, str(file))
    if not config.queues:
        config.queues = default_queues()
    if not config.aggregates:
        config.aggregates = default_aggregates()
    return config
