"""``mqgather queues``: define, list, put, get, browse and clear queues."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from bridge.mq import dlh, xqh
from bridge.mq.admin import Finding, setup_queues
from bridge.mq.connect import open_transport
from bridge.mq.deadletters import Retried, retry_dead_letters
from bridge.mq.errors import REASON_NAMES, REASONS, NoMessageAvailable, feedback_name
from bridge.mq.models import (
    MQENC_NATIVE,
    MQLONG_MAX,
    MQMT_REPORT,
    MQPER_NOT_PERSISTENT,
    MQPER_PERSISTENT,
    SEGMENT_FLAGS,
    Match,
    MQMessage,
    MsgFlags,
    PropertyValue,
    PutOptions,
    QueueAttributes,
    Usage,
    encode_properties,
    format_id,
    parse_id,
)
from bridge.mq.transport import WAIT_UNLIMITED
from mqgather.ccsid import CCSID_UTF8, CCSIDError, decode, encode
from mqgather.cli.options import config_option, mq_option, queue_name
from mqgather.config import MQGatherConfig, load_config
from mqgather.constants import (
    DEFAULT_MAXDEPTH,
    DEFAULT_MAXMSGL,
    MAX_EXPIRY_TENTHS,
    MAX_QUEUE_DEPTH,
    QMGR_MAXMSGL,
)
from mqgather.errors import ConfigError
from mqgather.runtime.rules import BadRule, RuleStore

_TYPES = ("string", "int", "float", "bool", "bytes", "null")


def parse_property(text: str) -> tuple[str, PropertyValue]:
    """Parse ``NAME=VALUE`` or ``NAME:TYPE=VALUE`` (TYPE: string int float bool bytes null)."""
    name, eq, value = text.partition("=")
    if not eq or not name:
        raise ConfigError("--property", f"{text!r} is not NAME=VALUE")
    name, _, kind = name.partition(":")
    kind = kind or "string"
    try:
        if kind == "string":
            return name, value
        if kind == "int":
            return name, int(value)
        if kind == "float":
            return name, float(value)
        if kind == "bool":
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError("expected true or false")
            return name, value.lower() in ("true", "1", "yes")
        if kind == "bytes":
            return name, bytes.fromhex(value[4:]) if value.startswith("hex:") else value.encode()
        if kind == "null":
            return name, None
    except ValueError as exc:
        raise ConfigError("--property", f"{text!r}: {exc}") from exc
    raise ConfigError("--property", f"{text!r}: type {kind!r} is not one of {', '.join(_TYPES)}")


def message_to_json(message: MQMessage) -> dict[str, Any]:
    """Every MQMD field, the typed properties, and the body as text (read in its CCSID)
    or base64. A message
    that starts with an MQDLH (Format MQDEAD) shows the header's fields apart, with its
    reason name, and the original body after it; one on a transmission queue (Format
    MQXMIT) shows where it is going and the MQMD it carries."""
    raw, header, ccsid = message.body, None, message.coded_char_set_id
    transmission: dict[str, Any] | None = None
    sent = xqh.carried(message)
    if sent is not None:
        inner = message_to_json(sent.message)
        raw, ccsid = sent.message.body, sent.message.coded_char_set_id
        transmission = {
            "remote_q_name": sent.remote_q_name,
            "remote_q_mgr_name": sent.remote_q_mgr_name,
            "message": {
                k: v for k, v in inner.items() if k not in ("body", "body_encoding", "properties")
            },
        }
    if message.format == dlh.MQFMT_DEAD_LETTER_HEADER:
        try:
            parsed, raw = dlh.unpack(message.body)
        except dlh.NotADeadLetter:
            raw = message.body
        else:
            ccsid = parsed.coded_char_set_id
            header = dict(
                dataclasses.asdict(parsed),
                reason_name=REASON_NAMES.get(parsed.reason, f"MQRC_{parsed.reason}"),
            )
    try:
        body, encoding = decode(raw, ccsid), "text"
    except CCSIDError:
        body, encoding = base64.b64encode(raw).decode(), "base64"
    shown = {
        "dead_letter_header": header,
        "body_encoding": encoding,
        "body": body,
    }
    if header is None:
        del shown["dead_letter_header"]
    if transmission is not None:
        shown = {"transmission_header": transmission, **shown}
    return {
        "msg_id": format_id(message.msg_id),
        "correl_id": format_id(message.correl_id),
        "group_id": format_id(message.group_id),
        "msg_seq_number": message.msg_seq_number,
        "msg_flags": message.msg_flags,
        "group_status": message.group_status,
        "offset": message.offset,
        "original_length": message.original_length,
        "msg_type": message.message_type,
        "report": message.report,
        "feedback": message.feedback,
        "feedback_name": feedback_name(message.feedback),
        "format": message.format,
        "coded_char_set_id": message.coded_char_set_id,
        "encoding": message.encoding,
        "persistence": message.persistence,
        "priority": message.priority,
        "expiry": message.expiry,
        "reply_to_q": message.reply_to_q,
        "reply_to_qmgr": message.reply_to_qmgr,
        "put_appl_name": message.put_appl_name,
        "put_date_time": message.put_date_time.isoformat() if message.put_date_time else None,
        "put_appl_type": message.put_appl_type,
        "user_identifier": message.user_identifier,
        "accounting_token": format_id(message.accounting_token),
        "appl_identity_data": message.appl_identity_data,
        "appl_origin_data": message.appl_origin_data,
        "backout_count": message.backout_count,
        "properties": encode_properties(message.properties),
        **shown,
    }


@click.group()
def queues() -> None:
    """Work with queues on the queue manager (like runmqsc and the amqsput/amqsget samples).

    Ids (--msg-id, --correl-id, --group-id) are hex:<up to 48 hex digits> or text;
    both are padded with NULs to 24 bytes, as MQ pads them.
    """


@queues.command()
@click.argument("queue")
@click.option("--maxdepth", type=click.IntRange(0, MAX_QUEUE_DEPTH), default=DEFAULT_MAXDEPTH,
              show_default=True, help="MAXDEPTH.")  # fmt: skip
@click.option("--maxmsgl", type=click.IntRange(0, QMGR_MAXMSGL), default=DEFAULT_MAXMSGL,
              show_default=True, help="MAXMSGL.")  # fmt: skip
@click.option("--bothresh", type=click.IntRange(0, MAX_QUEUE_DEPTH), default=0,
              show_default=True,
              help="BOTHRESH (0: none; a bridge then takes its --backout-threshold).")  # fmt: skip
@click.option("--boqname", default="", help="BOQNAME: where the bridge moves backed-out messages.")
@click.option("--descr", default="", help="DESCR.")
@click.option("--usage", type=click.Choice(["normal", "xmitq"]), default=None,
              help="USAGE: xmitq makes a transmission queue, the route to the queue manager "
              "it is named after [default: normal, or as the queue has it].")  # fmt: skip
@click.option("--replace", is_flag=True, help="Update the queue if it exists (REPLACE).")
@mq_option
def define(
    queue: str,
    maxdepth: int,
    maxmsgl: int,
    bothresh: int,
    boqname: str,
    descr: str,
    usage: Usage | None,
    replace: bool,
    mq: str,
) -> None:
    """Define a local queue (DEFINE QLOCAL)."""
    attrs = QueueAttributes(
        name=queue,
        maxdepth=maxdepth,
        maxmsgl=maxmsgl,
        bothresh=bothresh,
        boqname=boqname,
        descr=descr,
        usage=usage,
    )
    with open_transport(mq) as qm:
        qm.define(attrs, replace=replace)
    click.echo(f"defined {queue}")


_SWITCH = click.Choice(["enabled", "disabled"])


@queues.command()
@click.argument("queue")
@click.option("--put", type=_SWITCH, default=None,
              help="PUT(ENABLED | DISABLED): whether anything may be put there.")  # fmt: skip
@click.option("--get", type=_SWITCH, default=None,
              help="GET(ENABLED | DISABLED): whether anything may be got or browsed.")  # fmt: skip
@click.option("--maxdepth", type=click.IntRange(0, MAX_QUEUE_DEPTH), default=None,
              help="MAXDEPTH.")  # fmt: skip
@click.option("--bothresh", type=click.IntRange(0, MAX_QUEUE_DEPTH), default=None,
              help="BOTHRESH (0: none; a bridge then takes its --backout-threshold).")  # fmt: skip
@click.option("--boqname", default=None, help="BOQNAME.")
@mq_option
def alter(
    queue: str,
    put: str | None,
    get: str | None,
    maxdepth: int | None,
    bothresh: int | None,
    boqname: str | None,
    mq: str,
) -> None:
    """Change some attributes of a local queue, the others as they are (ALTER QLOCAL).

    An operator stops the bridge taking replies with ``--get disabled`` (they wait on
    the queue) and stops responses with ``--put disabled`` on the response queue (each
    is retried, then dead-lettered: see docs/guides/ibm-mq.md).
    """
    given = {"put": put, "get": get, "maxdepth": maxdepth, "bothresh": bothresh,
             "boqname": boqname}  # fmt: skip
    changes = {key: value for key, value in given.items() if value is not None}
    if not changes:
        raise click.UsageError("name at least one attribute to change (see --help)")
    with open_transport(mq) as qm:
        current = qm.inquire(queue)
        qm.define(current.model_copy(update=changes), replace=True)
        now = qm.inquire(queue)
    click.echo(
        f"altered {queue}: PUT({now.put.upper() if now.put else '?'}) "
        f"GET({now.get.upper() if now.get else '?'}) MAXDEPTH({now.maxdepth}) "
        f"BOTHRESH({now.bothresh}) BOQNAME({now.boqname})"
    )


@queues.command()
@mq_option
@config_option
def setup(mq: str, config_path: str | None) -> None:
    """Define every queue of the configuration (missing ones created, others updated),
    and each aggregate leg's request queue that does not exist yet."""
    config = load_config(config_path)
    with open_transport(mq) as qm:
        for name in setup_queues(qm, config):
            click.echo(f"defined {name}")


@queues.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per problem found.")
@mq_option
@config_option
def check(as_json: bool, mq: str, config_path: str | None) -> None:
    """Check the queue manager against the configuration, changing nothing: every queue
    it names defined and not PUT/GET(DISABLED) where it is used, reply queues with a
    BOTHRESH and an existing BOQNAME, set-aside queues whose MAXMSGL takes what their
    input takes, ledger queues whose MAXMSGL takes the largest marker, collector target
    queues whose MAXMSGL takes their rules' max_bytes, none a transmission
    queue, a dead-letter queue that exists and takes
    puts, and a MAXUMSGS a unit of work fits in. Exits 1 when anything is found."""
    from bridge.mq.admin import check_queues

    config = load_config(config_path)
    rule_problems, targets, largest = _rule_targets(config)
    with open_transport(mq) as qm:
        found = rule_problems + check_queues(qm, config, targets, largest)
        # Read again only to say it: a MAXUMSGS too small is among what was found.
        maxumsgs = 0 if found else qm.max_uncommitted()
    if not found:
        click.echo(
            f"every queue of the configuration checks out on {qm.qmgr_name}; MAXUMSGS "
            f"{maxumsgs}: a bridge takes up to {maxumsgs // 2} messages per unit of work"
        )
        return
    if as_json:
        for finding in found:
            click.echo(json.dumps(dataclasses.asdict(finding)))
    else:
        table = Table("QUEUE", "FOR", "PROBLEM")
        for finding in found:
            table.add_row(finding.queue, finding.purpose, finding.problem)
        Console().print(table)
    click.echo(f"{len(found)} problem(s) on {qm.qmgr_name}", err=True)
    sys.exit(1)


def _rule_targets(
    config: MQGatherConfig,
) -> tuple[list[Finding], dict[str, str], dict[str, tuple[int, str]]]:
    """Each collector rule's target queue, with what it is for, and the largest batch
    sent there (the default rule's too); and the rules that cannot be read or are
    invalid."""
    problems: list[Finding] = []
    targets: dict[str, str] = {}
    largest: dict[str, tuple[int, str]] = {}

    def sends(queue: str, max_bytes: int, rule: str) -> None:
        if max_bytes > largest.get(queue, (0, ""))[0]:
            largest[queue] = (max_bytes, rule)

    for name, spec in config.collectors.items():
        where = f"rules of collector {name}"
        sends(spec.default_queue, spec.default_max_bytes, f"collector {name}'s default rule")
        try:
            rows = RuleStore(spec.rules_db).rows(name)
        except ConfigError as exc:
            problems.append(Finding(spec.rules_db, where, f"cannot be read: {exc}"))
            continue
        for row in rows:
            if isinstance(row, BadRule):
                problems.append(Finding(row.destination, where, f"invalid: {row.problem}"))
            else:
                targets.setdefault(
                    row.target_queue, f"batches of {row.destination} (collector {name})"
                )
                sends(row.target_queue, row.max_bytes,
                      f"the rule of {row.destination} (collector {name})")  # fmt: skip
    return problems, targets, largest


@queues.command(name="list")
@click.argument("pattern", default="*")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per queue.")
@mq_option
def list_(pattern: str, as_json: bool, mq: str) -> None:
    """List queues (generic PATTERN, e.g. GATHER.*) with their depths."""
    with open_transport(mq) as qm:
        rows = qm.list_queues(pattern)
    if as_json:
        for row in rows:
            click.echo(row.model_dump_json())
        return
    table = Table(
        "QUEUE", "CURDEPTH", "MAXDEPTH", "BOTHRESH", "BOQNAME", "INHIBITED", "USAGE", "DESCR"
    )
    for row in rows:
        table.add_row(
            row.name,
            str(row.curdepth),
            str(row.maxdepth),
            str(row.bothresh),
            row.boqname,
            ",".join(op for op in ("put", "get") if getattr(row, op) == "disabled"),
            "XMITQ" if row.usage == "xmitq" else "",
            row.descr,
        )
    Console().print(table)


@queues.command()
@click.argument("queue", callback=queue_name)
@click.option(
    "--body",
    "body_texts",
    multiple=True,
    help="Body text (else --body-file or stdin). Repeat it with --logical-order to put a "
    "group, one message per --body.",
)
@click.option("--body-file", type=click.File("rb"), default=None, help="Body from a file.")
@click.option("--msg-id", default=None, help="MsgId (default: generated).")
@click.option("--correl-id", default=None, help="CorrelId.")
@click.option(
    "--group-id",
    default=None,
    help="GroupId (physical order; with --in-group and no --group-id the queue manager "
    "makes one and prints it).",
)
@click.option(
    "--seq", "msg_seq_number", type=click.IntRange(min=1), default=1, help="MsgSeqNumber."
)
@click.option("--last-in-group", "--last", is_flag=True, help="Set MQMF_LAST_MSG_IN_GROUP.")
@click.option("--in-group", is_flag=True, help="Set MQMF_MSG_IN_GROUP.")
@click.option(
    "--logical-order",
    is_flag=True,
    help="MQPMO_LOGICAL_ORDER: put every --body as one group in one unit of work; the "
    "queue manager gives the GroupId and sequence numbers, the last --body is last in group.",
)
@click.option("--to-qmgr", default="", metavar="QMGR",
              help="ObjectQMgrName: QUEUE is this queue manager's, reached through the "
              "route there (a transmission queue named after it).")  # fmt: skip
@click.option("--reply-to-q", default="", help="ReplyToQ.")
@click.option("--reply-to-qmgr", default="", help="ReplyToQMgr.")
@click.option("--format", "fmt", default="MQSTR", show_default=True, help="Format ('' = NONE).")
@click.option(
    "--ccsid",
    type=int,
    default=CCSID_UTF8,
    show_default=True,
    help="CodedCharSetId of the body; --body text is written in it (e.g. 37, 500, 1047).",
)
@click.option("--encoding", type=int, default=MQENC_NATIVE, show_default=True, help="Encoding.")
@click.option("--priority", type=click.IntRange(0, 9), default=0, help="Priority 0-9.")
@click.option("--expiry", type=click.IntRange(-1, MAX_EXPIRY_TENTHS), default=-1,
              help="Expiry in tenths of a second, 1 or more (-1: none).")  # fmt: skip
@click.option("--non-persistent", is_flag=True, help="Persistence MQPER_NOT_PERSISTENT.")
@click.option(
    "--property",
    "props",
    multiple=True,
    metavar="NAME[:TYPE]=VALUE",
    help="A message property; TYPE is string (default), int, float, bool, bytes or null.",
)
@mq_option
def put(
    queue: str,
    body_texts: tuple[str, ...],
    body_file: Any,
    msg_id: str | None,
    correl_id: str | None,
    group_id: str | None,
    msg_seq_number: int,
    last_in_group: bool,
    in_group: bool,
    logical_order: bool,
    reply_to_q: str,
    reply_to_qmgr: str,
    fmt: str,
    ccsid: int,
    encoding: int,
    priority: int,
    expiry: int,
    non_persistent: bool,
    props: tuple[str, ...],
    to_qmgr: str,
    mq: str,
) -> None:
    """Put one message (or, with --logical-order, one group) and commit; prints the MsgId
    of each, and the GroupId and sequence number of a message in a group."""
    if body_texts:
        try:
            bodies = [encode(text, ccsid) for text in body_texts]
        except CCSIDError as exc:
            raise ConfigError("--ccsid", str(exc)) from exc
    elif body_file is not None:
        bodies = [body_file.read()]
    else:
        bodies = [sys.stdin.buffer.read()]
    if len(bodies) > 1 and not logical_order:
        raise ConfigError("--body", "several bodies are put as one group: add --logical-order")
    if logical_order and (group_id is not None or msg_seq_number != 1):
        raise ConfigError(
            "--logical-order",
            "the queue manager gives the GroupId and sequence numbers; "
            "drop --group-id and --seq, or put in physical order without --logical-order",
        )
    fields: dict[str, Any] = {
        "msg_seq_number": msg_seq_number,
        "msg_flags": int(
            (MsgFlags.LAST_MSG_IN_GROUP if last_in_group else MsgFlags.NONE)
            | (MsgFlags.MSG_IN_GROUP if in_group or last_in_group else MsgFlags.NONE)
        ),
        "reply_to_q": reply_to_q,
        "reply_to_qmgr": reply_to_qmgr,
        "format": fmt,
        "coded_char_set_id": ccsid,
        "encoding": encoding,
        "priority": priority,
        "expiry": expiry,
        "persistence": MQPER_NOT_PERSISTENT if non_persistent else MQPER_PERSISTENT,
        "properties": dict(parse_property(p) for p in props),
    }
    for key, value in (("msg_id", msg_id), ("correl_id", correl_id), ("group_id", group_id)):
        if value is not None:
            fields[key] = parse_id(value)
    options = PutOptions(syncpoint=True, logical_order=logical_order)
    with open_transport(mq) as qm:
        done = []
        for index, body in enumerate(bodies):
            flags = fields["msg_flags"]
            if logical_order:
                last = index == len(bodies) - 1
                flags = int(MsgFlags.LAST_MSG_IN_GROUP if last else MsgFlags.MSG_IN_GROUP)
            message = MQMessage(**{**fields, "body": body, "msg_flags": flags})
            done.append(qm.put(queue, message, options, qmgr=to_qmgr))
        qm.commit()
    for message in done:
        if message.in_group:
            click.echo(
                f"{format_id(message.msg_id)}  group {format_id(message.group_id)}  "
                f"seq {message.msg_seq_number}  {message.group_status}"
            )
        else:
            click.echo(format_id(message.msg_id))


def _match(msg_id: str | None, correl_id: str | None, group_id: str | None = None) -> Match | None:
    if msg_id is None and correl_id is None and group_id is None:
        return None
    return Match(
        msg_id=parse_id(msg_id) if msg_id else None,
        correl_id=parse_id(correl_id) if correl_id else None,
        group_id=parse_id(group_id) if group_id else None,
    )


def _group_options(func: Any) -> Any:
    """The selection options ``get`` and ``browse`` share."""
    for option in reversed(
        (
            click.option("--correl-id", default=None, help="Only messages with this CorrelId."),
            click.option("--msg-id", default=None, help="Only messages with this MsgId."),
            click.option("--group-id", default=None, help="Only messages with this GroupId."),
            click.option(
                "--logical-order",
                is_flag=True,
                help="MQGMO_LOGICAL_ORDER: a group at a time, in MsgSeqNumber order, at the "
                "place of its first message, whatever the priorities or arrival order.",
            ),
            click.option(
                "--all-available",
                is_flag=True,
                help="MQGMO_ALL_MSGS_AVAILABLE: skip groups whose messages are not all there.",
            ),
        )
    ):
        func = option(func)
    return func


def _show(message: MQMessage, as_json: bool, count: int) -> None:
    if as_json:
        click.echo(json.dumps(message_to_json(message)))
        return
    group = ""
    if message.in_group:
        group = f"  group {format_id(message.group_id)} #{message.msg_seq_number}"
        group += " (last)" if message.group_status == "last-in-group" else ""
    if message.message_type == MQMT_REPORT:
        group += f"  report {feedback_name(message.feedback)}"
    if message.msg_flags & SEGMENT_FLAGS:
        group += f"  segment at {message.offset}"
        group += " (last)" if message.msg_flags & MsgFlags.LAST_SEGMENT else ""
    sent = xqh.carried(message)
    if sent is not None:
        # On a transmission queue: where it is going, and its own body after the header.
        group += f"  for {sent.remote_q_name}@{sent.remote_q_mgr_name}"
        message = sent.message
    click.echo(
        f"{count:>6}  {format_id(message.correl_id)}  "
        f"{len(message.body):>7}B  {message.text()[:60]!r}{group}"
    )


@queues.command()
@click.argument("queue", callback=queue_name)
@_group_options
@click.option("--wait", "wait_ms", type=click.IntRange(WAIT_UNLIMITED, MQLONG_MAX), default=0,
              help="Wait this many ms (-1: forever), as MQGET's WaitInterval.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the whole message as JSON.")
@mq_option
def get(
    queue: str,
    correl_id: str | None,
    msg_id: str | None,
    group_id: str | None,
    logical_order: bool,
    all_available: bool,
    wait_ms: int,
    as_json: bool,
    mq: str,
) -> None:
    """Get (remove) one message and print its body; exit 2 when the queue is empty.

    The get commits only once the output is written: a message that cannot be (the
    reading end of a pipe gone) stays on the queue, and the exit status is 1.

    With --logical-order a whole group is got, in order and in one unit of work: one body
    (or JSON object) per line.
    """
    got: list[MQMessage] = []
    with open_transport(mq) as qm:
        try:
            while True:
                message = qm.get(
                    queue,
                    wait_ms=wait_ms,
                    match=_match(msg_id, correl_id, group_id),
                    logical_order=logical_order,
                    all_available=all_available,
                )
                got.append(message)
                if not logical_order or message.group_status != "in-group":
                    break
        except NoMessageAvailable as exc:
            qm.backout()
            note = "; the group is incomplete: its messages were left on the queue" if got else ""
            click.echo(f"mqgather: {exc}{note}", err=True)
            sys.exit(2)
        # Written before the get commits: what cannot be written stays on the queue.
        try:
            _write(got, as_json)
        except OSError as exc:
            qm.backout()
            _stdout_gone()
            click.echo(
                f"mqgather: {len(got)} message(s) got but not written ({exc.strerror or exc}): "
                f"left on {queue}",
                err=True,
            )
            sys.exit(1)
        qm.commit()


def _write(messages: list[MQMessage], as_json: bool) -> None:
    """Each message's body (or JSON) on a line of its own, flushed."""
    out = sys.stdout.buffer
    for message in messages:
        if as_json:
            out.write(json.dumps(message_to_json(message)).encode() + b"\n")
        else:
            out.write(message.body + b"\n")
    out.flush()


def _stdout_gone() -> None:
    """Point standard output at /dev/null, so the interpreter's own flush at exit does
    not fail on the closed pipe as well."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


@queues.command()
@click.argument("queue", callback=queue_name)
@_group_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message.")
@mq_option
def browse(
    queue: str,
    correl_id: str | None,
    msg_id: str | None,
    group_id: str | None,
    logical_order: bool,
    all_available: bool,
    as_json: bool,
    mq: str,
) -> None:
    """Show the messages on a queue without removing them."""
    count = 0
    match = _match(msg_id, correl_id, group_id)
    with open_transport(mq) as qm:
        for message in qm.browse(
            queue, match, logical_order=logical_order, all_available=all_available
        ):
            count += 1
            _show(message, as_json, count)
    if not as_json:
        click.echo(f"{count} message(s) on {queue}", err=True)


@queues.command()
@click.argument("queue", callback=queue_name)
@mq_option
def clear(queue: str, mq: str) -> None:
    """Remove every message from a queue (CLEAR QLOCAL)."""
    with open_transport(mq) as qm:
        count = qm.clear(queue)
    click.echo(f"cleared {count} message(s) from {queue}")


def _reason_code(text: str) -> int:
    """An MQ reason as a code: 2053, MQRC_Q_FULL or Q_FULL."""
    if text.isascii() and text.isdigit() and len(text) <= 10:  # an MQLONG
        return int(text)
    name = text.upper() if text.upper().startswith("MQRC_") else f"MQRC_{text.upper()}"
    if name not in REASONS:
        raise click.BadParameter(f"{text!r} is not a reason code or a known MQRC_ name")
    return REASONS[name]


@queues.command()
@click.argument("queue", required=False, callback=queue_name)
@click.option("--reason", "reasons", multiple=True, metavar="REASON",
              help="Only dead letters whose MQDLH names this reason: 2053, MQRC_Q_FULL or "
              "Q_FULL (repeatable).")  # fmt: skip
@click.option("--dest", "destinations", multiple=True, metavar="QUEUE",
              help="Only those that were going to this queue (repeatable).")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="List what would be put back; move nothing.")
@mq_option
def retry(
    queue: str | None,
    reasons: tuple[str, ...],
    destinations: tuple[str, ...],
    dry_run: bool,
    mq: str,
) -> None:
    """Put dead letters back where they were going, as runmqdlq's RETRY does.

    Each message on QUEUE (default: the queue manager's dead-letter queue) that starts
    with an MQDLH, and matches --reason and --dest, loses its header and is put to the
    queue and queue manager the header names, with its MQMD and context as they are:
    fix what refused it first (a full queue, a route to another queue manager). It
    leaves QUEUE in the unit of work that puts it, so it is never in both places; one
    refused again stays, and the reason is shown. Exits 1 when any is refused again.
    """
    codes = {_reason_code(r) for r in reasons}

    def show(chosen: Retried) -> None:
        why = REASON_NAMES.get(chosen.reason, f"MQRC_{chosen.reason}")
        line = f"{chosen.fate:<8} {format_id(chosen.msg_id)}  to {chosen.to}  (was {why})"
        if chosen.error is not None:
            line += f": {chosen.error.reason} again"
        click.echo(line)

    with open_transport(mq) as qm:
        where = queue or qm.dead_letter_queue()
        if not where:
            raise click.UsageError(f"queue manager {qm.qmgr_name} has no DEADQ: name a QUEUE")
        report = retry_dead_letters(
            qm, where, reasons=codes, destinations=set(destinations), dry_run=dry_run, each=show
        )
    verb = "would put back" if dry_run else "put back"
    done = report.count("chosen") if dry_run else report.count("put")
    summary = f"{verb} {done} of {len(report.chosen)} dead letter(s) chosen on {where}"
    extra = [
        f"{report.count('refused')} refused again (still there)" if report.count("refused") else "",
        f"{report.count('gone')} gone or changed meanwhile" if report.count("gone") else "",
        f"{report.passed_over} passed over" if report.passed_over else "",
    ]
    click.echo("; ".join([summary, *[e for e in extra if e]]), err=True)
    if report.count("refused"):
        sys.exit(1)
