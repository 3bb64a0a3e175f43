"""The collector's activity: format a closed batch and PUT it in one unit of work, once.

Formats: ``json`` (an array; a body that is JSON is embedded as such, any other text as
a string), ``xml`` (the bodies, each one element with its prolog dropped, inside one
wrapper element, as seed 002's output), ``blob`` (the bodies joined by the separator), and
``group`` (every message PUT as it came, as one MQ logical group in logical order).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from temporalio import activity

from activities.merge import embedded_json, xml_element
from activities.mq import (
    MQActivities,
    dead_letter_note,
    forward_or_dead_letter,
    put_dead_letter,
)
from bridge.mq import hold, ledger
from bridge.mq.errors import MessageTooBig, MQError, undeliverable
from bridge.mq.ledger import ledger_key
from bridge.mq.models import (
    MQFMT_NONE,
    MQFMT_STRING,
    Match,
    MQMessage,
    MsgFlags,
    PropertyValue,
    PutOptions,
    QueueAddress,
)
from bridge.mq.transport import Transport
from mqgather import names
from mqgather.ccsid import CCSID_UTF8, CCSIDError
from mqgather.names import (
    PROP_BATCH_PART,
    PROP_BATCH_PARTS,
    PROP_BATCH_REASON,
    PROP_BATCH_SIZE,
    PROP_DESTINATION,
)
from mqgather.runtime import telemetry
from workflows import redelivery
from workflows.collect_models import (
    BatchFacts,
    ClosedBatch,
    Item,
    PutBatchInput,
    PutBatchResult,
)


def unreadable(batch: ClosedBatch) -> list[tuple[MQMessage, str]]:
    """The messages of a json or xml batch whose body is not text in its CodedCharSetId,
    or (xml) not one XML element, with the reason: they go to the failure queue, not
    into the batch, which a reader could not parse with them in it."""
    fmt = batch.rule.format
    if fmt not in ("json", "xml"):
        return []
    out = []
    for item in batch.items:
        try:
            text = item.message.decoded()
            if fmt == "xml":
                xml_element(text)
        except CCSIDError as exc:
            out.append((item.message, f"not text for a {fmt} batch: {exc}"))
        except ET.ParseError as exc:
            out.append((item.message, f"not an XML element for an xml batch: {exc}"))
    return out


def format_batch(batch: ClosedBatch, wrapper: str) -> tuple[bytes, str, int]:
    """One aggregated body for a json, xml or blob batch: (body, Format, CCSID). A json
    or xml batch holds text only (see :func:`unreadable`)."""
    rule = batch.rule
    messages = [item.message for item in batch.items]
    if rule.format == "json":
        texts = [message.decoded() for message in messages]
        body = embedded_json([texts], lambda values: values[0], (", ", ": "))
        return body.encode(), MQFMT_STRING, CCSID_UTF8
    if rule.format == "xml":
        parts = [xml_element(m.decoded()) for m in messages]
        inner = "".join(f"\n  {part}" for part in parts)
        text = f'<?xml version="1.0" encoding="utf-8"?>\n<{wrapper}>{inner}\n</{wrapper}>\n'
        return text.encode(), MQFMT_STRING, CCSID_UTF8
    joined = rule.separator.encode().join(m.body for m in messages)
    ccsids = {m.coded_char_set_id for m in messages}
    same_text = len(ccsids) == 1 and all(m.format == MQFMT_STRING for m in messages)
    if same_text:
        return joined, MQFMT_STRING, ccsids.pop()
    return joined, MQFMT_NONE, CCSID_UTF8


def batch_key(inp: PutBatchInput, items: list[Item] | None = None) -> bytes:
    """The ledger key (and MsgId) of one batch: the destination, the batch number and its
    first message (of ``items``, when only those are put), so a batch is never mistaken
    for another even if numbering restarted."""
    first = (items or inp.batch.items)[0].message.msg_id.hex()
    return ledger_key("batch", inp.workflow_id, str(inp.batch.number), first)


def batch_group(workflow_id: str, number: int) -> bytes:
    """The CorrelId of the markers of a collector's batch ``number``: a run after a reset
    reads what the run before put under it."""
    return ledger_key("batch group", workflow_id, str(number))


def item_key(item: Item) -> str:
    """What a batch's marker keeps of each message it put (:func:`ledger.digest`)."""
    return ledger.digest(redelivery.key(item.message, item.fingerprint))


#: How a batch's marker names the run that wrote it, in its last line, where a run that a
#: reset started writes it: that run's next attempt tells its own batch from the run's
#: before.
RUN_LINE = "run "

#: How a batch's marker says the batch went to the dead-letter queue instead of its
#: target, in a line between its digests and its run: ``<dead-letter queue> <why>``. An
#: attempt retried after the commit reports where it went from this line.
DEAD_LETTER_LINE = "dead-lettered "


#: How a batch's marker says how many messages its PUT made and their bytes (parts of a
#: batch longer than its target's MAXMSGL count each), in a line after its digests:
#: ``<messages> <bytes>``. An attempt retried after the commit reports them from it.
PUT_LINE = "put "


def put_counted(marker: MQMessage) -> tuple[int, int] | None:
    """How many messages the batch's ``marker`` says its PUT made, and their bytes; None
    for a marker written before it said so."""
    for line in ledger.lines(marker)[2:]:
        if line.startswith(PUT_LINE):
            messages, _, size = line.removeprefix(PUT_LINE).partition(" ")
            if messages.isdigit() and size.isdigit():
                return int(messages), int(size)
    return None


def dead_lettered(marker: MQMessage) -> tuple[str, str] | None:
    """Where a batch's ``marker`` says it went instead of its target, and why: the
    dead-letter queue and the refusal; None when it went to its target."""
    for line in ledger.lines(marker)[2:]:
        if line.startswith(DEAD_LETTER_LINE):
            queue, _, why = line.removeprefix(DEAD_LETTER_LINE).partition(" ")
            return queue, why
    return None


@dataclass(frozen=True)
class PutBefore:
    """What the markers of a collector's batches numbered ``number`` and on say of the
    messages asked about."""

    #: The digests, of those asked about, of the messages they put.
    put: set[str] = field(default_factory=set)
    #: Of those, what the asking run's own markers put (an earlier attempt of its).
    ours: set[str] = field(default_factory=set)
    #: No marker of ``number`` or later: the batches that follow need not look.
    none: bool = True


def put_before(
    transport: Transport,
    ledger_queue: str,
    workflow_id: str,
    number: int,
    wanted: set[str],
    run_id: str = "",
) -> PutBefore:
    """Which of the messages ``wanted`` (their digests) the collector's batches numbered
    ``number`` and on put, and which of those run ``run_id`` put itself. A run after a
    reset batches the same messages into as many batches or fewer, so what its batch
    ``number`` holds was put, if at all, by a batch of that number or a later one.

    The walk stops at the first number without a marker, or once every one of
    ``wanted`` is found: a run after a reset mostly batches as the run before did, so
    each of its batches reads a number or two, not every one after its own (which
    made a reset of a collector with many batches quadratic in them).
    """
    put: set[str] = set()
    ours: set[str] = set()
    at = number
    while markers := list(
        transport.browse(ledger_queue, Match(correl_id=batch_group(workflow_id, at)))
    ):
        # Every marker of a number is read: the run's own is among them (it has the
        # batch's number), and another run's may be too.
        for marker in markers:
            _, *rest = ledger.lines(marker)
            keys = set(rest[0].split()) & wanted if rest else set()
            put |= keys
            if run_id and rest[-1:] == [RUN_LINE + run_id]:
                ours |= keys
        at += 1
        if put >= wanted:
            break
    return PutBefore(put, ours, at == number)


def _whole(reader: hold.HeldReader, item: Item) -> Item:
    """The item with its whole message: a held one got from the hold queue."""
    if item.held is None:
        return item
    message = reader.take_held(item.held, item.message)
    return item.model_copy(update={"message": message, "held": None})


def _batch_messages(
    batch: ClosedBatch,
    key: bytes,
    properties: dict[str, PropertyValue],
    wrapper: str,
    fit: _Fit | None = None,
) -> tuple[list[MQMessage], list[tuple[MQMessage, str]]]:
    """What a batch is PUT as: a group's messages as they came, one by one (MsgIds from
    the batch's key, the batch properties added), or one message of the formatted body;
    within ``fit`` each, once the target refused a longer one: a formatted body is then
    put in parts, and a message no part can hold is returned with the reason, for the
    failure queue."""
    if not batch.items:
        return [], []
    if batch.rule.format == "group":
        kept = [i for i in batch.items if fit is None or len(i.message.body) <= fit.size]
        too_big = [
            (i.message, fit.refusal(f"the message is {len(i.message.body)} bytes"))
            for i in batch.items
            if fit is not None and len(i.message.body) > fit.size
        ]
        last = len(kept) - 1
        group = [
            item.message.model_copy(
                update={
                    "msg_id": ledger_key(key.hex(), str(index)),
                    "properties": {**item.message.properties, **properties},
                    "msg_flags": int(
                        MsgFlags.LAST_MSG_IN_GROUP if index == last else MsgFlags.MSG_IN_GROUP
                    ),
                }
            )
            for index, item in enumerate(kept)
        ]
        return group, too_big
    parts, too_big = _fitting(batch, wrapper, fit)
    out = []
    for index, (body, fmt, ccsid) in enumerate(parts):
        numbered: dict[str, PropertyValue] = (
            {PROP_BATCH_PART: index + 1, PROP_BATCH_PARTS: len(parts)} if len(parts) > 1 else {}
        )
        out.append(MQMessage(
            # The first part keeps the batch's key: a batch put whole is as it always was.
            msg_id=key if index == 0 else ledger_key(key.hex(), "part", str(index)),
            format=fmt, coded_char_set_id=ccsid, properties={**properties, **numbered},
            body=body,
        ))  # fmt: skip
    return out, too_big


def _fitting(
    batch: ClosedBatch, wrapper: str, fit: _Fit | None
) -> tuple[list[tuple[bytes, str, int]], list[tuple[MQMessage, str]]]:
    """The batch's formatted parts, in order, each within ``fit`` bytes: halved until
    each fits (the formats join their bodies, so a part's size follows its messages'),
    and a message that does not fit alone, with the reason."""
    formatted = format_batch(batch, wrapper)
    if fit is None or len(formatted[0]) <= fit.size:
        return [formatted], []
    if len(batch.items) == 1:
        what = f"formatted as a {batch.rule.format} batch the message is {len(formatted[0])} bytes"
        return [], [(batch.items[0].message, fit.refusal(what))]
    half = len(batch.items) // 2
    first = _fitting(batch.model_copy(update={"items": batch.items[:half]}), wrapper, fit)
    rest = _fitting(batch.model_copy(update={"items": batch.items[half:]}), wrapper, fit)
    return first[0] + rest[0], first[1] + rest[1]


@dataclass(frozen=True)
class _Fit:
    """The most bytes one message of a batch may take, learnt from the target's refusal."""

    size: int
    #: What refused a longer one, as the failure queue's reason names it.
    limit: str

    def refusal(self, what: str) -> str:
        """Why a message goes to the failure queue: ``what`` it is, past the limit."""
        return f"{what}, more than {self.limit}"

    @classmethod
    def after(cls, transport: Transport, queue: str, exc: MessageTooBig, size: int) -> _Fit:
        """The fit after a PUT of ``size`` bytes to ``queue`` was refused: the queue's
        MAXMSGL when that is what refused it; else (the queue manager's MAXMSGL, or a
        client channel's, which no inquiry on the queue tells) half the refused size."""
        if exc.reason == MessageTooBig.reason:  # the queue's own; 2031 and 2010 share the class
            try:
                maxmsgl = transport.inquire(queue).maxmsgl
            except MQError:
                maxmsgl = size
            if maxmsgl < size:
                return cls(maxmsgl, (
                    f"MAXMSGL({maxmsgl}) of the batch's target queue {queue} "
                    f"({MessageTooBig.reason}); raise it (ALTER QLOCAL({queue}) MAXMSGL) or "
                    "lower the rule's max_bytes"
                ))  # fmt: skip
        return cls(size // 2, (
            f"the {size // 2} bytes a part was cut to after {queue} refused {size} "
            f"({exc.reason}: the queue manager's MAXMSGL, or the channel's)"
        ))  # fmt: skip


class _Refit(Exception):
    """The target refused a batch's message as too long (its MAXMSGL is now known), or
    for good on the last attempt: the unit of work, backed out, is done again within that
    MAXMSGL, or to the dead-letter queue."""


class CollectorActivities(MQActivities):
    """The collector's PUT; each worker thread keeps its own MQ connection."""

    @activity.defn(name=names.ACTIVITY_PUT_BATCH, no_thread_cancel_exception=True)
    def put_batch(self, inp: PutBatchInput) -> PutBatchResult:
        """PUT one closed batch and its ledger marker in one unit of work, once."""
        batch, rule, spec = inp.batch, inp.batch.rule, inp.collector
        facts: BatchFacts | None = batch.facts()
        key = batch_key(inp)
        run_id = activity.info().workflow_run_id or ""
        properties: dict[str, PropertyValue] = {
            PROP_DESTINATION: inp.destination,
            PROP_BATCH_SIZE: len(batch.items),
            PROP_BATCH_REASON: batch.reason,
        }
        out: list[MQMessage] = []
        bad: list[tuple[MQMessage, str]] = []
        # Messages and bytes the PUT made, as this attempt's marker or a committed one's says.
        counted: tuple[int, int] | None = None
        behind = False

        fit: _Fit | None = None  # once the target refused a message as too long
        final = inp.attempts_before + activity.info().attempt >= spec.delivery_attempts
        refused: MQError | None = None  # the target refused it for good on the last attempt
        dlq = ""
        why = ""  # that refusal, as this attempt or the one that committed it says

        def work(transport: Transport, reader: hold.HeldReader) -> None:
            nonlocal key, behind, facts, fit, refused, dlq, why, counted
            out.clear()
            bad.clear()
            counted = None
            items = batch.items
            if inp.after_reset:
                keyed = [(item_key(i), i) for i in batch.items]
                before = put_before(transport, spec.ledger_queue, inp.workflow_id,
                                    batch.number, {k for k, _ in keyed}, run_id)  # fmt: skip
                behind = before.none
                items = [i for k, i in keyed if k not in before.put]
                # The batch this run put is what it put itself: the analytics count the
                # run before's batches from that run's history.
                mine = items or [i for k, i in keyed if k in before.ours]
                facts = batch.model_copy(update={"items": mine}).facts() if mine else None
                if not items:
                    return  # all put by the run before the reset, or by an earlier attempt
                key = batch_key(inp, items)
            marker = ledger.find(transport, spec.ledger_queue, Match(msg_id=key))
            if marker is not None:
                # Committed by an earlier attempt: it reports where that one put it.
                if (dead := dead_lettered(marker)) is not None:
                    dlq, why = dead
                counted = put_counted(marker)
                return
            # Held messages leave the hold queue in this unit of work, with the PUT.
            whole = batch.model_copy(update={"items": [_whole(reader, i) for i in items]})
            bad.extend(unreadable(whole))
            # By the message itself: another message may have the same MsgId.
            odd = {id(m) for m, _ in bad}
            good = whole.model_copy(
                update={"items": [i for i in whole.items if id(i.message) not in odd]}
            )
            messages, too_big = _batch_messages(good, key, properties, spec.xml_wrapper, fit)
            out.extend(messages)
            bad.extend(too_big)
            options = PutOptions(syncpoint=True, logical_order=rule.format == "group")
            if refused is not None:
                # Whole, its parts or group together; refused there too, the batch is
                # retried (DeadLetterRefused).
                for message in out:
                    dlq = put_dead_letter(transport, QueueAddress(rule.target_queue), message,
                                          refused, options)  # fmt: skip
            else:
                for message in out:
                    try:
                        transport.put(rule.target_queue, message, options)
                    except MessageTooBig as exc:
                        smaller = _Fit.after(transport, rule.target_queue, exc,
                                             len(message.body))  # fmt: skip
                        if fit is None or smaller.size < fit.size:
                            fit = smaller
                            raise _Refit from exc
                        if not final:
                            raise
                        refused = exc
                        raise _Refit from exc
                    except MQError as exc:
                        if not (final and undeliverable(exc)):
                            raise
                        # Backed out, the whole batch goes to the dead-letter queue
                        # instead, its parts or group together.
                        refused = exc
                        raise _Refit from exc
            note = f"{inp.workflow_id} batch {batch.number}"
            for message, reason in bad:
                # The failure queue is the last place of the collector's own: refused
                # there for good, a message goes to the dead-letter queue at once rather
                # than hold its batch back for ever.
                forward_or_dead_letter(transport, spec.failure_queue, message, reason,
                                       spec.input_queue, True, note)  # fmt: skip
            group = batch_group(inp.workflow_id, batch.number)
            keys = " ".join(item_key(i) for i in items)
            ran = [RUN_LINE + run_id] if inp.after_reset else []
            if refused is not None:
                why = str(refused)
            went = [f"{DEAD_LETTER_LINE}{dlq} {why}"] if why else []
            counted = len(out), sum(len(m.body) for m in out)
            made = f"{PUT_LINE}{counted[0]} {counted[1]}"
            marked = dead_letter_note(note, (refused, dlq) if refused is not None else None)
            ledger.mark(transport, spec.ledger_queue, key, marked, spec.ledger_hours,
                        group=group, lines=[keys, made, *went, *ran])  # fmt: skip

        held = sum(i.body_bytes() for i in batch.items if i.held)
        while True:
            try:
                self._held_unit_of_work(inp.workflow_id, held, work)
                break
            except _Refit:
                continue  # each round fits its parts to fewer bytes than the last
        if counted is not None:
            put, size = counted
        else:  # committed before, as near as the batch tells (a marker from before it said)
            put = 0 if facts is None else facts.messages if rule.format == "group" else 1
            size = 0 if facts is None else facts.size_bytes
        if facts is not None:
            waited = (batch.closed_at - batch.opened_at).total_seconds() * 1000
            labels = {"collector": spec.name, "reason": batch.reason}
            metrics = telemetry.instruments()
            metrics.batches_put.add(1, labels)
            metrics.batch_wait.record(waited, labels)
        return PutBatchResult(
            queue=dlq if why else rule.target_queue,
            messages_put=put,
            size_bytes=size,
            batch=facts,
            failed=len(bad),
            reset_behind=behind,
            refused=f"{rule.target_queue}: {why}" if why else "",
        )
