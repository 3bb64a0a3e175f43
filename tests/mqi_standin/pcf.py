"""The command server of the stand-in: PCF queue commands on SYSTEM.ADMIN.COMMAND.QUEUE.

Answers as IBM MQ's command server does: one response message per object (the last
one flagged MQCFC_LAST), CorrelId = the command's MsgId, to the command's ReplyToQ; a
failure is one response with CompCode and Reason set.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from bridge.mq.errors import MQError, ObjectAlreadyExists
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, PutOptions, QueueAttributes

CREATE_Q, CHANGE_Q, COPY_Q, DELETE_Q, INQUIRE_Q = 11, 8, 10, 12, 13
Q_NAME, Q_DESC, Q_TYPE, MAX_Q_DEPTH, MAX_MSG_LENGTH = 2016, 2013, 20, 15, 13
BACKOUT_THRESHOLD, BACKOUT_REQ_Q_NAME, CURRENT_Q_DEPTH = 22, 2019, 3
REPLACE, Q_ATTRS = 1006, 1002
INHIBIT_GET, INHIBIT_PUT, USAGE = 9, 10, 12
_FIELDS = {
    MAX_Q_DEPTH: "maxdepth",
    MAX_MSG_LENGTH: "maxmsgl",
    BACKOUT_THRESHOLD: "bothresh",
    BACKOUT_REQ_Q_NAME: "boqname",
    Q_DESC: "descr",
    INHIBIT_GET: "get",
    INHIBIT_PUT: "put",
    USAGE: "usage",
}
#: MQQA_*_INHIBITED (1) and MQQA_*_ALLOWED (0) as QueueAttributes says them.
_INHIBIT = {0: "enabled", 1: "disabled"}
#: MQUS_NORMAL (0) and MQUS_TRANSMISSION (1) as QueueAttributes says them.
_USAGE = {0: "normal", 1: "xmitq"}
_UNSUPPORTED = 3007  # MQRCCF_PARM_ID_ERROR: a parameter this command server does not know


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.split(b"\0", 1)[0].decode().rstrip()
    return str(value).rstrip()


def _response(
    command: int, seq: int, last: bool, reason: int = 0, params: list[Any] | None = None
) -> bytes:
    import ibmmq

    params = params or []
    head = ibmmq.CFH(
        Type=2,
        Command=command,
        MsgSeqNumber=seq,
        Control=1 if last else 0,
        CompCode=2 if reason else 0,
        Reason=reason,
        ParameterCount=len(params),
    )
    return head.pack() + b"".join(p.pack() for p in params)


def _queue_params(q: QueueAttributes) -> list[Any]:
    import ibmmq

    return [
        ibmmq.CFST(Parameter=Q_NAME, String=q.name.encode().ljust(48)),
        ibmmq.CFIN(Parameter=Q_TYPE, Value=1),
        ibmmq.CFIN(Parameter=MAX_Q_DEPTH, Value=q.maxdepth),
        ibmmq.CFIN(Parameter=MAX_MSG_LENGTH, Value=q.maxmsgl),
        ibmmq.CFIN(Parameter=BACKOUT_THRESHOLD, Value=q.bothresh),
        ibmmq.CFST(Parameter=BACKOUT_REQ_Q_NAME, String=q.boqname.encode().ljust(48)),
        ibmmq.CFST(Parameter=Q_DESC, String=q.descr.encode().ljust(64)),
        ibmmq.CFIN(Parameter=INHIBIT_GET, Value=int(q.get == "disabled")),
        ibmmq.CFIN(Parameter=INHIBIT_PUT, Value=int(q.put == "disabled")),
        ibmmq.CFIN(Parameter=USAGE, Value=int(q.usage == "xmitq")),
        ibmmq.CFIN(Parameter=CURRENT_Q_DEPTH, Value=q.curdepth),
    ]


def _run(qm: LocalQueueManager, command: int, args: dict[int, Any]) -> list[bytes]:
    name = _text(args.get(Q_NAME, b""))
    given = {
        _FIELDS[k]: (_text(v) if isinstance(v, bytes) else v)
        for k, v in args.items()
        if k in _FIELDS
    }
    for key in ("get", "put"):
        if key in given:
            given[key] = _INHIBIT[given[key]]
    if "usage" in given:
        given["usage"] = _USAGE[given["usage"]]
    unknown = set(args) - set(_FIELDS) - {Q_NAME, Q_TYPE, REPLACE, Q_ATTRS}
    if unknown:
        return [_response(command, 1, True, _UNSUPPORTED)]
    if command == INQUIRE_Q:
        rows = [q for q in qm.list_queues("*") if fnmatch.fnmatchcase(q.name, name)]
        if not rows:
            return [_response(command, 1, True, 2085)]
        return [
            _response(command, i + 1, i == len(rows) - 1, 0, _queue_params(q))
            for i, q in enumerate(rows)
        ]
    if command == CREATE_Q:
        # DEFINE ... REPLACE: every attribute not given takes its default again.
        defaults = {"put": "enabled", "get": "enabled", "usage": "normal"}
        qm.define(
            QueueAttributes(name=name, **{**defaults, **given}), replace=args.get(REPLACE) == 1
        )
    elif command == CHANGE_Q:
        current = qm.inquire(name).model_dump(exclude={"curdepth"})
        qm.define(QueueAttributes(**{**current, **given}), replace=True)
    elif command == DELETE_Q:
        return [_response(command, 1, True, _UNSUPPORTED)]
    else:
        return [_response(command, 1, True, _UNSUPPORTED)]
    return [_response(command, 1, True)]


def execute(qm: LocalQueueManager, request: MQMessage) -> None:
    """Run one PCF command and put its responses to the request's ReplyToQ."""
    from ibmmq import PCFExecute

    args, head = PCFExecute.unpack(request.body)
    try:
        answers = _run(qm, head.Command, args)
    except MQError as exc:
        code = exc.code if not isinstance(exc, ObjectAlreadyExists) else 4001
        answers = [_response(head.Command, 1, True, code)]
    for body in answers:
        qm.put(
            request.reply_to_q,
            MQMessage(
                correl_id=request.msg_id,
                format="MQADMIN",
                body=body,
                msg_type=2,  # MQMT_REPLY
            ),
            PutOptions(syncpoint=False),
        )
