"""The fan-out side: register a gather and PUT its leg requests in one unit of work."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import ValidationError
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from bridge.identify import INDEX_LENGTH, KEY_LENGTH, gather_correl_id, leg_correl_id
from bridge.mq import hold, reports
from bridge.mq.models import (
    ID_LENGTH,
    MQEI_UNLIMITED,
    MQMessage,
    PropertyValue,
    PutOptions,
    expiry_tenths,
)
from bridge.mq.transport import Transport
from mqgather.config import AggregateSpec, LegSpec, leg_name_clash, over_limits
from mqgather.constants import MAX_KEPT_REQUEST_BYTES, MAX_WAIT_SECONDS
from mqgather.errors import MQGatherError, first_problem
from mqgather.limits import queue_name_problem, shown
from mqgather.names import PROP_AGGREGATE, SIGNAL_EXPECT, TASK_QUEUE
from mqgather.runtime.temporal import TRANSIENT_RPC, dropped, refusal
from workflows.gather import GatherWorkflow
from workflows.models import (
    LegRequest,
    Registration,
    ReplyTerms,
    gather_id,
    start_input,
    start_options,
)


class ScatterError(MQGatherError):
    """The gather could not be registered (for example it is already closed)."""


@dataclass(frozen=True)
class Scattered:
    """What scatter registered and sent."""

    gather_id: str
    correl_id: bytes
    request_msg_id: bytes
    legs: tuple[LegSpec, ...]


def new_gather_key() -> bytes:
    """A fresh 24-byte CorrelId for a gather (its last 4 bytes zero, for the CorrelId layout)."""
    return gather_correl_id(os.urandom(20))


def _check_layout(spec: AggregateSpec, correl: bytes, legs: int) -> None:
    """With ``leg_identification = "correlid"`` the reply's CorrelId is 20 bytes of gather
    key and a 4-byte leg index, so the gather's own CorrelId must end in 4 zero bytes."""
    if correl != gather_correl_id(correl):
        raise ScatterError(
            f"aggregate {spec.name} identifies legs by CorrelId: a gather's CorrelId is "
            f"{KEY_LENGTH} bytes of key and {INDEX_LENGTH} zero bytes, and "
            f"hex:{correl.hex()} does not end in {INDEX_LENGTH} zero bytes; use at most "
            f"{KEY_LENGTH} bytes, or omit --correl-id for a fresh one"
        )
    if legs >= 2 ** (8 * INDEX_LENGTH):
        raise ScatterError(f"aggregate {spec.name}: {legs} legs do not fit the leg index")


def _kept(spec: AggregateSpec, leg: LegSpec, message: MQMessage) -> LegRequest:
    """A leg's request as the gather keeps it for re-requests (it travels in the
    registration, so it must be small).

    Raises:
        ScatterError: the request is larger than a gather keeps.
    """
    size = hold.wire_size(message)
    if size > MAX_KEPT_REQUEST_BYTES:
        raise ScatterError(
            f"aggregate {spec.name}: leg {leg.name}'s request is {size} bytes, and a gather "
            f"keeps a request for re-requests only up to {MAX_KEPT_REQUEST_BYTES}; set "
            "retries = 0 on the leg (and keep_requests = false) to send it without"
        )
    return LegRequest(queue=leg.queue(), message=message)


def request_expiry(spec: AggregateSpec, leg: LegSpec, timeout: float) -> int:
    """A leg's request's Expiry: unlimited, or (``expire_requests``) the time until
    nobody waits for its reply, the leg's own deadline or the gather's (``timeout``
    seconds from now; 0 for none), whichever comes first."""
    waits = [s for s in (leg.timeout_seconds, timeout) if s]
    if not spec.expire_requests or not waits:
        return MQEI_UNLIMITED
    return expiry_tenths(min(waits))


def _put_requests(
    transport: Transport,
    spec: AggregateSpec,
    chosen: tuple[LegSpec, ...],
    correl: bytes,
    bodies: Mapping[str, bytes] | None,
    leg_properties: Mapping[str, Mapping[str, PropertyValue]] | None,
    timeout: float,
) -> dict[str, LegRequest]:
    """PUT one request per leg under syncpoint; the requests kept for re-requests."""
    requests: dict[str, LegRequest] = {}
    for index, leg in enumerate(chosen, start=1):
        props: dict[str, PropertyValue] = {
            spec.leg_property: leg.name,
            PROP_AGGREGATE: spec.name,
        }
        props.update((leg_properties or {}).get(leg.name, {}))
        msg_id = leg_correl_id(correl, index) if spec.leg_identification == "correlid" else correl
        message = MQMessage(
            msg_id=msg_id,
            correl_id=msg_id,
            reply_to_q=spec.reply_queue,
            # MQ's report about an undelivered request comes with its MsgId as CorrelId.
            report=reports.MQRO_EXCEPTION if spec.request_reports else 0,
            expiry=request_expiry(spec, leg, timeout),
            properties=props,
            body=(bodies or {}).get(leg.name, b"{}"),
        )
        if leg.retries or spec.keep_requests:
            requests[leg.name] = _kept(spec, leg, message)
        transport.put(leg.queue(), message, PutOptions(syncpoint=True))
    return requests


async def scatter(
    client: Client,
    transport: Transport,
    spec: AggregateSpec,
    *,
    bodies: Mapping[str, bytes] | None = None,
    legs: tuple[LegSpec, ...] | None = None,
    correl_id: bytes | None = None,
    request_msg_id: bytes | None = None,
    reply_to_q: str = "",
    reply_to_qmgr: str = "",
    request: MQMessage | None = None,
    timeout_seconds: float | None = None,
    leg_properties: Mapping[str, Mapping[str, PropertyValue]] | None = None,
    task_queue: str = TASK_QUEUE,
) -> Scattered:
    """Register a gather and PUT one request per leg (ReplyToQ = the aggregate's reply queue).

    The requests are put under syncpoint, the registration is sent, and only then the
    unit of work is committed; if Temporal refuses, the requests are backed out.

    Args:
        bodies: request body per leg name (default: an empty JSON object).
        legs: the legs (default: the aggregate's).
        correl_id: the gather's CorrelId (default: a fresh one).
        request_msg_id: the original request's MsgId, which becomes the response's
            CorrelId (default: the gather's CorrelId).
        reply_to_q: where the requester wants the response (replyToQueue mode).
        request: the requester's message, got by the caller: the response goes to its
            ReplyToQ/ReplyToQMgr with the CorrelId its report options ask for (its
            CorrelId with MQRO_PASS_CORREL_ID, else its MsgId), its MsgId with
            MQRO_PASS_MSG_ID and, with MQRO_PASS_DISCARD_AND_EXPIRY, the Expiry it has
            left now and its MQRO_DISCARD_MSG. It stands in for ``request_msg_id``,
            ``reply_to_q`` and ``reply_to_qmgr``.
        leg_properties: extra properties per leg request.

    Raises:
        ScatterError: the gather already exists and is closed, or (correlid
            identification) the CorrelId does not fit the layout.
        TemporalUnavailable: the server dropped the start (it starts, restarts or sheds
            load). The requests were backed out, so the scatter may be made again; a
            start that reached the server all the same takes it as a second
            registration of the same gather.
    """
    if spec.leg_identification == "group":
        raise ScatterError(
            f"aggregate {spec.name} takes its replies as one logical group: the first reply "
            "starts the gather, so there is nothing to register"
        )
    terms = None
    if request is not None:
        request_msg_id = request.reply_correl_id()
        reply_to_q, reply_to_qmgr = request.reply_to_q, request.reply_to_qmgr
        terms = ReplyTerms.asked_by(request, datetime.now(UTC))
    chosen = tuple(legs or spec.legs)
    if not chosen:
        raise ScatterError(f"aggregate {spec.name} lists no legs; pass the legs to scatter")
    # The legs given here are not the spec's, which its model checked.
    if clash := leg_name_clash((leg.name for leg in chosen), spec.merge):
        raise ScatterError(f"aggregate {spec.name}: {clash}")
    names = {leg.name for leg in chosen}
    rule = spec.rule()
    needed = {leg.name for leg in chosen if leg.needed(rule.kind)}
    if not rule.holds(names, needed):
        raise ScatterError(
            f"aggregate {spec.name}: complete_when = {rule.text!r} cannot hold over the legs "
            f"sent ({', '.join(sorted(names))}); send the legs it names"
        )
    past = over_limits(spec.model_copy(update={"legs": chosen}))
    if past is not None:
        raise ScatterError(f"aggregate {spec.name}: {past[0]}: {past[1]}")
    if timeout_seconds is not None and not 0 <= timeout_seconds <= MAX_WAIT_SECONDS:
        raise ScatterError(
            f"timeout_seconds: {timeout_seconds:g} is not a wait; "
            f"give 0 to {shown(MAX_WAIT_SECONDS)}"
        )
    for what, name in (("reply_to_q", reply_to_q), ("reply_to_qmgr", reply_to_qmgr)):
        # Found now, not when the response's PUT fails at the gather's end.
        if problem := queue_name_problem(name):
            raise ScatterError(f"{what} {name[:60]!r}: {problem}")
    if unsent := sorted(set(bodies or {}) - names):
        raise ScatterError(
            f"a body for {', '.join(unsent)}, which is not a leg sent "
            f"(legs: {', '.join(sorted(names))})"
        )
    correl = correl_id or new_gather_key()
    if len(correl) > ID_LENGTH:
        raise ScatterError(f"a CorrelId is at most {ID_LENGTH} bytes, not {len(correl)}")
    # MQ pads ids with NULs: the replies will carry the padded form, so the gather must too.
    correl = correl.ljust(ID_LENGTH, b"\x00")
    if spec.leg_identification == "correlid":
        _check_layout(spec, correl, len(chosen))
    gid = gather_id(spec.name, correl)
    # From the first request put to the start, one unit of work: a request refused, a
    # registration that does not validate or a start Temporal refuses backs out every
    # request already put (never left for a later commit to send without its gather).
    try:
        timeout = spec.timeout_seconds if timeout_seconds is None else timeout_seconds
        requests = _put_requests(transport, spec, chosen, correl, bodies, leg_properties, timeout)
        registration = Registration(
            legs=list(chosen),
            count=len(chosen) if spec.leg_identification == "count" else 0,
            request_msg_id=request_msg_id or correl,
            reply_to_q=reply_to_q,
            reply_to_qmgr=reply_to_qmgr,
            timeout_seconds=timeout_seconds,
            requests=requests,
            reply_terms=terms,
        )
        await client.start_workflow(
            GatherWorkflow.run,
            start_input(spec, correl),
            id=gid,
            task_queue=task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            start_signal=SIGNAL_EXPECT,
            start_signal_args=[registration],
            **start_options(spec, correl),
        )
    except WorkflowAlreadyStartedError as exc:
        transport.backout()
        raise ScatterError(f"gather {gid} is already closed; use a new CorrelId") from exc
    except ValidationError as exc:
        transport.backout()
        raise ScatterError(f"gather {gid} not registered: {first_problem(exc)}") from exc
    except RPCError as exc:
        transport.backout()
        if exc.status in TRANSIENT_RPC:
            raise dropped(client, f"starting gather {gid} (its requests backed out)", exc) from exc
        raise ScatterError(f"gather {gid} not registered: {refusal(exc, 'the start')}") from exc
    except BaseException:
        transport.backout()
        raise
    transport.commit()
    return Scattered(gid, correl, request_msg_id or correl, chosen)
