"""The collector's bridge: input queue -> one signal-with-start per destination -> MQCMIT.

Each message's destination comes from its key (a property, or a JSON or XML path into
the body) and its rule from the rules database (read again every
``rule_refresh_seconds``). The messages of one bridge batch go to their destination's
collector workflow in one signal per destination (split only by size), and the batch is
committed once Temporal accepted them all. What cannot be batched goes, intact and with
the reason, to the collector's failure queue in the same unit of work.
"""

from __future__ import annotations

import asyncio
import json
import logging
import xml.etree.ElementTree as ET
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from bridge.inbound import (
    RETRYABLE,
    Move,
    QueueBridge,
    chunk_replies,
    message_key,
    refused_for_content,
)
from bridge.inline import InlineBytes
from bridge.mq.models import (
    MQMessage,
    QueueAttributes,
    fingerprint,
    not_whole,
    rfh2_hint,
)
from bridge.mq.transport import Transport
from mqgather.ccsid import CCSIDError
from mqgather.collector_config import CollectorRule, CollectorSpec
from mqgather.constants import COLLECT_BATCH_SIZE, LEAST_MAXUMSGS_COLLECTOR
from mqgather.names import SIGNAL_COLLECT
from mqgather.routing import Destination
from mqgather.runtime.rules import BadRule, RuleCache
from workflows.collect_models import CollectInput, CollectorInput, Item, collector_id
from workflows.collector import CollectorWorkflow

log = logging.getLogger("mqgather.collector")
#: The longest destination name: it is part of the collector workflow's id.
MAX_DESTINATION = 200


class DestinationKeyError(ValueError):
    """The destination key cannot be read from the message; the message says why."""


def _text(message: MQMessage) -> str:
    try:
        return message.decoded()
    except CCSIDError as exc:
        raise DestinationKeyError(
            f"the body is not text in CCSID {message.coded_char_set_id}"
        ) from exc


def destination_of(message: MQMessage, key: str) -> str | None:
    """The destination a message names under ``key`` (``property:NAME``,
    ``json:dotted.path``, ``xml:/Element/Path``); None when it names none.

    Raises:
        DestinationKeyError: the body cannot be read as the key requires.
    """
    kind, _, where = key.partition(":")
    if kind == "property":
        value: Any = message.properties.get(where)
    elif kind == "json":
        try:
            value = json.loads(_text(message))
        except RecursionError:
            # A RuntimeError: uncaught, the bridge would back out its whole batch again.
            raise DestinationKeyError("the body is JSON nested too deep to read") from None
        except ValueError as exc:
            raise DestinationKeyError(f"the body is not JSON ({exc})") from exc
        for step in where.split("."):
            value = value.get(step) if isinstance(value, dict) else None
    else:
        try:
            root = ET.fromstring(_text(message))
        except ET.ParseError as exc:
            raise DestinationKeyError(f"the body is not XML ({exc})") from exc
        steps = [s for s in where.split("/") if s]
        node = root if steps and root.tag == steps[0] else None
        if node is not None and len(steps) > 1:
            node = node.find("/".join(steps[1:]))
        value = node.text.strip() if node is not None and node.text else None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float | str):
        text = str(value).strip()
        return text or None
    return None


class CollectorBridge(QueueBridge):
    """Feeds one collector's destination workflows from its input queue."""

    least_maxumsgs = LEAST_MAXUMSGS_COLLECTOR

    def __init__(
        self,
        client: Client,
        connect: Callable[[], Transport],
        spec: CollectorSpec,
        *,
        rules: RuleCache | None = None,
        **options: Any,
    ) -> None:
        options.setdefault("batch_size", COLLECT_BATCH_SIZE)
        super().__init__(client, connect, **options)
        self.spec = spec
        self.rules = rules or RuleCache(spec)
        self._inline = InlineBytes()

    def queues(self) -> list[str]:
        return [self.spec.input_queue]

    def _route(self, message: MQMessage) -> tuple[str, CollectorRule] | str:
        """The message's destination and rule, or why it cannot be batched."""
        spec = self.spec
        try:
            destination = destination_of(message, spec.destination_key)
        except DestinationKeyError as exc:
            return (
                f"no destination: {exc} (destination_key {spec.destination_key})"
                f"{rfh2_hint(message)}"
            )
        if destination is None:
            if spec.missing_key == "failure":
                return (
                    f"the message has no destination (destination_key "
                    f"{spec.destination_key}){rfh2_hint(message)}"
                )
            destination = spec.default_destination
        if len(destination) > MAX_DESTINATION:
            return f"destination {destination[:40]!r}... is longer than {MAX_DESTINATION}"
        # isprintable is False for a lone surrogate (category Cs) as for a control.
        if not destination.isprintable():
            # It names a workflow and a rule: neither takes it. Raised past here, it
            # stopped the bridge before BOTHRESH could move the message aside.
            return (
                f"destination {destination!r} is not printable text (a control or invisible "
                "character, or a lone surrogate from a property that is not valid text)"
            )
        rule = self.rules.rule_for(destination)
        if isinstance(rule, BadRule):
            return f"the rule of destination {destination!r} is invalid: {rule.problem}"
        if rule.target_queue == spec.input_queue:
            # Its batch would come straight back here as one more message to batch.
            return (
                f"the rule of destination {destination!r} sends its batches to "
                f"{spec.input_queue}, this collector's input_queue; give it another "
                "target_queue"
            )
        if len(message.body) > rule.max_bytes:
            return (
                f"the message is {len(message.body)} bytes, more than max_bytes "
                f"({rule.max_bytes}) of destination {destination!r}"
            )
        # A json or xml key has read the body as text already.
        if rule.format in ("json", "xml") and spec.destination_key.startswith("property:"):
            try:
                _text(message)
            except DestinationKeyError as exc:
                return f"destination {destination!r} batches {rule.format}: {exc}"
        return destination, rule

    def _fitted(self, destination: str, rule: CollectorRule) -> CollectorRule:
        """The rule with max_messages no larger than one unit of work can PUT: a batch's
        messages may each be got from the hold queue and put (a group) or forwarded (not
        text), with the COA that put causes when the message asks for one, beside the
        batch's message and its ledger marker, within MAXUMSGS."""
        most = self._within(
            f"destination {destination!r}", "max_messages", rule.max_messages,
            (self.maxumsgs - 2) // 3,
            "a batch's unit of work may need 3 per message and 2 more",
        )  # fmt: skip
        if most == rule.max_messages:
            return rule
        return rule.model_copy(update={"max_messages": most})

    async def _process(
        self,
        call: Callable[..., Any],
        transport: Transport,
        queue: str,
        attrs: QueueAttributes,
        dlq: str,
        batch: list[MQMessage],
    ) -> None:
        now = datetime.now(UTC)
        await call(self.rules.refresh)
        failure = self.spec.failure_queue
        moves: list[Move] = []
        groups: dict[str, tuple[CollectorRule, list[Item]]] = {}
        sizes: dict[int, int] = {}
        whole: dict[int, MQMessage] = {}  # held messages, whole
        for message in batch:
            aside = self.backed_out_too_often(queue, attrs, dlq, message)
            # Its destination could be among what is missing, or in another segment.
            problem = message.unreadable or not_whole(message)
            routed = problem or self._route(message)
            if isinstance(routed, str):
                # Aside at the threshold too: its move to the failure queue may be what
                # backs the batch out.
                moves.append(aside or Move(Destination.FAILURE, failure, message, routed))
                continue
            destination, rule = routed
            rule = self._fitted(destination, rule)
            # A redelivery already batched is signalled again, not moved: its batch may
            # hold it by a reference whose put backed out with its get (held again for
            # its size, or, held for its destination's bytes, now with its body); else
            # the collector counts it a redelivery.
            if aside and not await self._already_batched(destination, message):
                moves.append(aside)
                continue
            spec = self.spec
            rate = spec.destination_inline_bytes
            holding = self._inline.held(destination, message, spec.inline_bytes, rate, rate)
            item = Item(message=message, received_at=now, size=len(message.body),
                        fingerprint=fingerprint(message))  # fmt: skip
            claim = await self._claim(call, transport, message, self.spec.hold_queue, holding)
            if isinstance(claim, str):
                moves.append(Move(Destination.FAILURE, failure, message, claim))
                continue
            if claim is not None:
                item = item.model_copy(update={"message": claim[0], "held": claim[1]})
                whole[id(item)] = message
            problem, size = self._carried(
                item,
                CollectInput(rule=rule, items=[item]),
                lambda box: box.items[0],
                "message",
                "its batch",
            )
            if problem:
                moves.append(Move(Destination.FAILURE, failure, message, problem))
                continue
            sizes[id(item)] = size
            groups.setdefault(destination, (rule, []))[1].append(item)
        # Destinations are signalled side by side: each is its own workflow, and one MQ
        # batch spans many of them. A failure still backs out the whole batch, once
        # every signal has settled (a redelivery is recognised by the workflow).
        sent = await asyncio.gather(
            *(
                self._send(d, rule, items, lambda i: sizes[id(i)])
                for d, (rule, items) in groups.items()
            ),
            return_exceptions=True,
        )
        held: list[tuple[str, MQMessage]] = []
        for (_, items), outcome in zip(groups.values(), sent, strict=True):
            if isinstance(outcome, BaseException):
                raise outcome
            rest, error = outcome
            refused = {id(i) for i in rest}
            # Those the collector was told of wait on the hold queue, committed with the GET.
            held += [
                (i.held.queue, whole[id(i)])
                for i in items
                if i.held is not None and id(i) not in refused
            ]
            reason = f"Temporal refused the signal: {error}"
            moves += [
                Move(Destination.FAILURE, failure, whole.get(id(i), i.message), reason)
                for i in rest
            ]
        if held:
            await call(self._hold, transport, held)
        if moves:
            await call(self._move, transport, queue, moves)

    async def _send(
        self,
        destination: str,
        rule: CollectorRule,
        items: list[Item],
        size_of: Callable[[Item], int],
    ) -> tuple[list[Item], BaseException | None]:
        """Signal a destination's messages in chunks of at most a signal's size (by their
        encoded size: properties count as much as bodies); the items Temporal refused for
        their content, and why (any other failure raises: the whole batch is backed out)."""
        chunks = chunk_replies(items, size_of=size_of)
        for index, chunk in enumerate(chunks):
            try:
                await self.client.start_workflow(
                    CollectorWorkflow.run,
                    CollectorInput(collector=self.spec, destination=destination),
                    id=collector_id(self.spec.name, destination),
                    task_queue=self.task_queue,
                    id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                    start_signal=SIGNAL_COLLECT,
                    start_signal_args=[CollectInput(rule=rule, items=chunk)],
                    static_summary=f"collector {self.spec.name}: destination {destination}",
                    rpc_timeout=self.rpc_timeout,
                )
            except RETRYABLE as exc:
                if refused_for_content(exc):
                    return [i for c in chunks[index:] for i in c], exc
                raise
            self.stats.signals += 1
        return [], None

    async def _already_batched(self, destination: str, message: MQMessage) -> bool:
        """Whether a message at BOTHRESH is in its destination's batches already (its
        bridge stopped between signal and MQCMIT each time): then it must not also go to
        the backout queue."""
        handle = self.client.get_workflow_handle(collector_id(self.spec.name, destination))
        try:
            seen = await self._ask_taken(
                handle, CollectorWorkflow.taken, CollectorWorkflow.consumed, [message_key(message)]
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return bool(seen)
