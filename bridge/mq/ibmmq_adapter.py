"""The IBM MQ transport, through ``ibmmq`` (or ``pymqi`` where only that is installed).

Everything that does not need the MQ client library (settings, channel definition,
property typing, reason mapping) is a pure function tested on its own; the class
below applies them to the library's MQI objects.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import logging
import math
import os
import re
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs, unquote

from pydantic import BaseModel, Field, SecretStr

from bridge.mq.errors import REASONS, ConnectionBroken, MQError, error_for_reason
from bridge.mq.models import (
    MQLONG_MAX,
    MQLONG_MIN,
    NONE_ID,
    Inhibit,
    Match,
    MQMessage,
    MsgFlags,
    PropertyValue,
    PutOptions,
    QueueAttributes,
    Usage,
    put_date_time,
    wait_refusal,
)
from bridge.mq.transport import WAIT_UNLIMITED, Browse, Transport
from mqgather.ccsid import CCSID_UTF8
from mqgather.constants import QMGR_MAXMSGL
from mqgather.errors import ConfigError
from mqgather.names import (
    ENV_MQ,
    ENV_MQ_KEYREPO_PASSWORD,
    ENV_MQ_KEYREPO_PASSWORD_FILE,
    ENV_MQ_PASSWORD,
    ENV_MQ_PASSWORD_FILE,
    ENV_MQ_USER,
)
from mqgather.secretfiles import read_secret

#: Secrets a URL must not carry, with where each belongs instead.
_SECRET_KEYS = {"password": ENV_MQ_PASSWORD, "keyrepo_password": ENV_MQ_KEYREPO_PASSWORD}
log = logging.getLogger("mqgather.mq")
_CONNAME = re.compile(r"^[A-Za-z0-9.\-:\[\]]+\([0-9]{1,5}\)$")
_QUERY_KEYS = {
    "ccdt", "cipher", "keyrepo", "keyrepo_password_file", "certlabel", "user",
    "password_file", "channel",
}  # fmt: skip


class IBMMQSettings(BaseModel):
    """How to reach an IBM MQ queue manager as a client."""

    qmgr: str = Field(max_length=48)
    conname: list[str] = Field(default_factory=list, description="host(port) endpoints")
    channel: str = Field(default="", max_length=20)
    ccdt: str = ""
    cipher_spec: str = ""
    key_repository: str = ""
    cert_label: str = ""
    key_repository_password: SecretStr | None = None
    user: str = ""
    password: SecretStr | None = None

    def describe(self) -> str:
        """A loggable one-line description (never shows the password)."""
        where = ",".join(self.conname) or f"CCDT {self.ccdt}"
        tls = f" TLS {self.cipher_spec}" if self.cipher_spec else ""
        return f"IBM MQ {self.qmgr or '(default)'} at {where} channel {self.channel or '-'}{tls}"


def parse_ibmmq_url(url: str, env: dict[str, str] | None = None) -> IBMMQSettings:
    """Parse ``ibmmq://QMGR@host(port)[,host(port)...]/CHANNEL[?options]``.

    Options: ``ccdt=PATH`` (instead of host and channel), ``cipher=CIPHERSPEC``,
    ``keyrepo=PATH`` (key repository), ``keyrepo_password_file=PATH``,
    ``certlabel=LABEL``, ``user=NAME``, ``password_file=PATH``. The password comes from
    ``MQGATHER_MQ_PASSWORD`` or a file (``MQGATHER_MQ_PASSWORD_FILE`` or
    ``password_file=``), the key repository's from ``MQGATHER_MQ_KEYREPO_PASSWORD`` or
    a file (``MQGATHER_MQ_KEYREPO_PASSWORD_FILE`` or ``keyrepo_password_file=``); never
    from the URL.

    Raises:
        ConfigError: naming MQGATHER_MQ and what is wrong.
    """
    env = dict(os.environ) if env is None else env
    key = ENV_MQ
    if not url.startswith("ibmmq://"):
        raise ConfigError(key, f"{url!r} is not an ibmmq:// URL")
    rest = url[len("ibmmq://") :]
    rest, _, query = rest.partition("?")
    options: dict[str, str] = {}
    for name, values in parse_qs(query, keep_blank_values=True).items():
        if name in _SECRET_KEYS:
            raise ConfigError(key, f"put the {name} in {_SECRET_KEYS[name]} or a file, not the URL")
        if name not in _QUERY_KEYS:
            raise ConfigError(key, f"unknown option {name!r}; known: {sorted(_QUERY_KEYS)}")
        options[name] = values[-1]
    qmgr, at, where = rest.partition("@")
    if not at:
        qmgr, where = rest, ""
    qmgr = unquote(qmgr)
    host_part, _, channel = where.partition("/")
    channel = unquote(channel) or options.get("channel", "")
    conname = [c.strip() for c in host_part.split(",") if c.strip()]
    for endpoint in conname:
        if not _CONNAME.match(endpoint):
            raise ConfigError(key, f"connection name {endpoint!r} is not host(port)")
    if not conname and not options.get("ccdt"):
        raise ConfigError(key, "give host(port) endpoints and a channel, or ?ccdt=PATH")
    if conname and not channel:
        raise ConfigError(key, "a channel is needed after the endpoints: .../CHANNEL")
    if len(qmgr) > 48 or len(channel) > 20:
        raise ConfigError(key, "queue manager names are at most 48 and channels 20 characters")
    password = _secret(
        env.get(ENV_MQ_PASSWORD),
        options.get("password_file") or env.get(ENV_MQ_PASSWORD_FILE),
        ENV_MQ_PASSWORD_FILE,
    )
    keyrepo_password = _secret(
        env.get(ENV_MQ_KEYREPO_PASSWORD),
        options.get("keyrepo_password_file") or env.get(ENV_MQ_KEYREPO_PASSWORD_FILE),
        ENV_MQ_KEYREPO_PASSWORD_FILE,
    )
    return IBMMQSettings(
        qmgr=qmgr,
        conname=conname,
        channel=channel,
        ccdt=options.get("ccdt", ""),
        cipher_spec=options.get("cipher", ""),
        key_repository=options.get("keyrepo", ""),
        cert_label=options.get("certlabel", ""),
        key_repository_password=keyrepo_password,
        user=options.get("user") or env.get(ENV_MQ_USER, ""),
        password=password,
    )


def _secret(value: str | None, path: str | None, key: str) -> SecretStr | None:
    """A secret from its environment variable, else from its file.

    Raises:
        ConfigError: naming ``key`` when the file cannot be read.
    """
    if value is None and path:
        value = read_secret(Path(path), key).strip()
    return SecretStr(value) if value is not None else None


#: MQCD fields that channel_definition gives as MQ constants' names (cmqxc).
MQCD_ENUMS = frozenset({"ChannelType", "TransportType"})


def channel_definition(settings: IBMMQSettings) -> dict[str, Any]:
    """MQCD fields for a client connection (empty when a CCDT defines the channel)."""
    if not settings.conname:
        return {}
    fields: dict[str, Any] = {
        "ChannelName": settings.channel,
        "ConnectionName": ",".join(settings.conname),
        "ChannelType": "MQCHT_CLNTCONN",
        "TransportType": "MQXPT_TCP",
        # The client side of the channel's MAXMSGL (the MQCD's default is 4 MB): the
        # channel carries the lower of this and the SVRCONN's MAXMSGL.
        "MaxMsgLength": QMGR_MAXMSGL,
    }
    if settings.cipher_spec:
        fields["SSLCipherSpec"] = settings.cipher_spec
    return fields


def ssl_options(settings: IBMMQSettings) -> dict[str, str]:
    """MQSCO fields: the key repository and certificate label, when TLS is used."""
    fields: dict[str, str] = {}
    if settings.key_repository:
        fields["KeyRepository"] = settings.key_repository
    if settings.cert_label:
        fields["CertificateLabel"] = settings.cert_label
    return fields


def ccdt_url(settings: IBMMQSettings) -> str:
    """The MQCNO CCDTUrl for a CCDT file (JSON or binary), or ``""``."""
    if not settings.ccdt:
        return ""
    path = settings.ccdt
    return path if "://" in path else "file://" + str(Path(path).resolve())


#: The JMS synonyms an MQI program may set with MQSETMP. The others a JMS reply shows
#: (JMSDestination, JMSDeliveryMode, JMSExpiration, JMSPriority, JMSTimestamp,
#: JMSMessageID, JMSRedelivered, JMSXAppID, JMSXDeliveryCount, JMSXUserID) stand for
#: MQMD fields a forwarded copy keeps, or for where and when it was first sent; MQ refuses
#: them with MQRC_PROPERTY_NAME_ERROR (2442).
JMS_SETTABLE = frozenset(
    {"JMSCorrelationID", "JMSReplyTo", "JMSType", "JMSXGroupID", "JMSXGroupSeq"}
)


def settable(properties: dict[str, PropertyValue]) -> dict[str, PropertyValue]:
    """The properties MQSETMP accepts: without the JMS synonyms MQ sets itself."""
    return {
        name: value
        for name, value in properties.items()
        if not (name.startswith("JMS") and name not in JMS_SETTABLE)
    }


def property_type_name(value: PropertyValue) -> str:
    """The MQTYPE_* name a Python property value is written as."""
    if value is None:
        return "MQTYPE_NULL"
    if isinstance(value, bool):
        return "MQTYPE_BOOLEAN"
    if isinstance(value, int):
        return "MQTYPE_INT64"
    if isinstance(value, float):
        return "MQTYPE_FLOAT64"
    if isinstance(value, bytes):
        return "MQTYPE_BYTE_STRING"
    return "MQTYPE_STRING"


#: Tokens naming a kept message handle: unique in the process, so a message got on one
#: connection never takes another connection's handle (handles are per connection).
_KEPT_TOKENS = itertools.count(1)


def same_property(a: PropertyValue, b: PropertyValue) -> bool:
    """Whether two property values are one: of one type and equal, NaN as NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def property_from_mq(value: Any) -> PropertyValue:
    """A property value as read back from MQ, normalised to the model's types."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    return str(value)


def status_flags(C: Any, group_status: Any) -> int:
    """The MsgFlags that the MQGMO GroupStatus of a get reports (MQGS_MSG_IN_GROUP,
    MQGS_LAST_MSG_IN_GROUP), so a group is known even where the MQMD flags are not."""
    status = ord(group_status) if isinstance(group_status, bytes | str) else int(group_status)
    if status == C.MQGS_LAST_MSG_IN_GROUP:
        return int(MsgFlags.MSG_IN_GROUP | MsgFlags.LAST_MSG_IN_GROUP)
    if status == C.MQGS_MSG_IN_GROUP:
        return int(MsgFlags.MSG_IN_GROUP)
    return 0


def translate_exception(exc: BaseException, detail: str = "") -> MQError:
    """Map an MQMIError (anything with ``reason``) to the typed error."""
    reason = getattr(exc, "reason", None)
    if not isinstance(reason, int):
        return MQError(f"{detail}: {exc}" if detail else str(exc))
    if reason == REASONS["MQRC_DATA_LENGTH_ERROR"]:
        detail = (
            f"{detail}: the message is longer than the client channel carries; raise MAXMSGL "
            f"of the SVRCONN channel (and of a CCDT's CLNTCONN entry) to {QMGR_MAXMSGL}"
        )
    return error_for_reason(reason, detail)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.rstrip(b"\x00 ").decode("utf-8", errors="replace")
    return str(value or "").rstrip()


def _inhibit(value: Any) -> Inhibit:
    """InhibitPut / InhibitGet as QueueAttributes says it (MQQA_*_INHIBITED is 1)."""
    return "disabled" if int(value) == 1 else "enabled"


def _usage(value: Any) -> Usage:
    """Usage as QueueAttributes says it (MQUS_TRANSMISSION is 1)."""
    return "xmitq" if int(value) == 1 else "normal"


def _md_chars(value: bytes) -> str:
    """An MQMD character field as the message model keeps it: one character per byte
    (Latin-1), so a forwarded copy carries exactly the bytes the original had, whatever
    character set the putting application used, and never more than the field holds."""
    return bytes(value).rstrip(b"\x00 ").decode("latin-1")


def _md_bytes(text: str, field: str) -> bytes:
    """The bytes of an MQMD character field (see :func:`_md_chars`).

    Raises:
        ConfigError: ``text`` has a character no single byte carries.
    """
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            field, f"{text!r} has characters an MQMD character field cannot carry ({exc.reason})"
        ) from exc


def _name_bytes(name: str) -> bytes | None:
    """A property name as MQSETMP and MQDLTMP are given it: UTF-8, the CCSID names come
    back in when read (the library makes a str of a returned name as UTF-8). Given a str,
    the library would encode it as ASCII and fail on any other letter, where MQ takes a
    name such as "größe". None for a name that is not text (lone surrogates)."""
    try:
        return name.encode("utf-8")
    except UnicodeEncodeError:
        return None


def _where(queue: str, qmgr: str) -> str:
    """A queue as an error names it, with its queue manager when that is another."""
    return f"{queue!r} at queue manager {qmgr!r}" if qmgr else repr(queue)


#: Object handles one connection keeps open: half a queue manager's default MAXHANDS
#: (256), so a process replying to many reply-to queues never meets
#: MQRC_HANDLE_NOT_AVAILABLE. Past it the least recently used handle is closed.
MAX_OPEN_QUEUES = 128
#: Set before ``ibmmq`` is imported: its own OpenTelemetry hooks stay off, so trace context
#: travels once, in mqgather's ``traceparent`` property, and an input open costs no extra
#: MQOPEN + MQINQ.
ENV_IBMMQ_NO_OTEL = "MQIPY_NOOTEL"
#: Property values are read into a buffer this large first; a longer one is read again
#: with the length MQ reports (MQRC_PROPERTY_VALUE_TOO_BIG).
PROPERTY_BUFFER = 4096


def load_mq_module() -> ModuleType:
    """Import ``ibmmq``, or ``pymqi`` if only that is installed.

    Raises:
        MQError: MQRC_ENVIRONMENT_ERROR naming what to install.
    """
    os.environ.setdefault(ENV_IBMMQ_NO_OTEL, "1")
    for name in ("ibmmq", "pymqi"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise MQError(
        "the IBM MQ client is not installed: pip install 'mqgather[ibmmq]' "
        "and the IBM MQ redistributable client (libmqm)",
        reason="MQRC_ENVIRONMENT_ERROR",
    )


def connect_options(mq: ModuleType, settings: IBMMQSettings) -> dict[str, Any]:
    """Keyword arguments of ``connect_with_options``: only the structures in use.

    Client binding with reconnection disabled (a reconnect behind an open unit of work
    would lose it silently); the CCDT travels in the MQCNO, never through the process
    environment; TLS and credentials only when configured.
    """
    C, X = mq.CMQC, mq.CMQXC
    cno = mq.CNO()
    cno.Version = max(int(cno.Version), C.MQCNO_VERSION_6)
    cno.Options = C.MQCNO_CLIENT_BINDING | C.MQCNO_RECONNECT_DISABLED
    url = ccdt_url(settings)
    if url:
        cno.CCDTUrl = url.encode()
    kwargs: dict[str, Any] = {"cno": cno}
    fields = channel_definition(settings)
    if fields:
        cd = mq.CD()
        for name, value in fields.items():
            if name in MQCD_ENUMS:
                value = getattr(X, value)  # a constant's name; any other field is text
            setattr(cd, name, value.encode() if isinstance(value, str) else value)
        kwargs["cd"] = cd
    sco_fields = ssl_options(settings)
    if sco_fields or settings.key_repository_password:
        sco = mq.SCO()
        for name, text in sco_fields.items():
            setattr(sco, name, text.encode())
        if settings.key_repository_password:
            # MQSCO version 6 (MQ 9.3) carries the password of a PKCS#12 or CMS key
            # repository; the library passes it by pointer, never through the environment.
            sco.Version = max(int(sco.Version), C.MQSCO_VERSION_6)
            sco.KeyRepoPassword = settings.key_repository_password.get_secret_value()
        kwargs["sco"] = sco
    if settings.user:
        kwargs["user"] = settings.user
        kwargs["password"] = settings.password.get_secret_value() if settings.password else ""
    return kwargs


class IBMMQTransport(Transport):
    """A client connection to an IBM MQ queue manager.

    Input queues are opened MQOO_INPUT_SHARED, so competing bridges share a reply queue
    whatever its DEFSOPT. Forwarded messages keep their context with
    MQPMO_SET_ALL_CONTEXT (which needs ``+setall`` on the target queue).
    """

    booleans_read_as_int = True

    def __init__(self, settings: IBMMQSettings, mq: ModuleType | None = None) -> None:
        self.settings = settings
        self.mq = mq or load_mq_module()
        self.C = self.mq.CMQC
        self.qmgr_name = settings.qmgr
        # Open object handles, least recently used first (see MAX_OPEN_QUEUES).
        self._queues: OrderedDict[tuple[str, str, int], Any] = OrderedDict()
        self._pinned: set[tuple[str, str, int]] = set()
        self._get_handle: Any = None
        # Handles of messages got with properties that could not be read, by the token
        # each message carries, with the readable properties each holds now: kept until
        # the unit of work ends.
        self._kept: dict[int, tuple[Any, dict[str, PropertyValue]]] = {}
        self._pcf: Any = None
        self._closed = False
        # Never disconnected implicitly: MQDISC commits, so only close() disconnects,
        # and only once the unit of work is backed out.
        self.qmgr = self.mq.QueueManager(None, disconnect_on_exit=False)
        try:
            self.qmgr.connect_with_options(settings.qmgr, **connect_options(self.mq, settings))
        except self.mq.MQMIError as exc:
            raise translate_exception(exc, f"connecting to {settings.describe()}") from exc
        # The name asked for may be blank or "*GROUP" under a CCDT: MQDLH headers must
        # name the queue manager actually reached.
        try:
            self.qmgr_name = _text(self.qmgr.inquire(self.C.MQCA_Q_MGR_NAME)) or settings.qmgr
        except self.mq.MQMIError as exc:
            raise self._failed(exc, "inquiring the queue manager's name") from exc

    def _failed(self, exc: BaseException, detail: str) -> MQError:
        err = translate_exception(exc, detail)
        if isinstance(err, ConnectionBroken):
            self._queues.clear()  # object handles do not survive the connection
            self._pinned.clear()
        return err

    def _open(self, queue: str, options: int, *, pin: bool = False, qmgr: str = "") -> Any:
        """The open handle for ``queue`` (owned by ``qmgr``, blank for this queue manager)
        with ``options``, opened on first use.

        ``pin`` keeps it open for good: a browse cursor or a group in logical order lives
        in its handle. Others are closed least recently used first past MAX_OPEN_QUEUES.
        """
        key = (queue, qmgr, options)
        if pin:
            self._pinned.add(key)
        if key in self._queues:
            self._queues.move_to_end(key)
            return self._queues[key]
        if len(self._queues) >= MAX_OPEN_QUEUES:
            self._close_oldest()
        target: Any = queue
        if qmgr:
            target = self.mq.OD(
                ObjectName=_md_bytes(queue, "queue"), ObjectQMgrName=_md_bytes(qmgr, "qmgr")
            )
        try:
            self._queues[key] = self.mq.Queue(self.qmgr, target, options)
        except self.mq.MQMIError as exc:
            raise self._failed(exc, f"opening queue {_where(queue, qmgr)}") from exc
        return self._queues[key]

    def _close_oldest(self) -> None:
        for key in self._queues:
            if key not in self._pinned:
                handle = self._queues.pop(key)
                with contextlib.suppress(self.mq.MQMIError):
                    handle.close()  # MQCLOSE leaves the unit of work as it is
                return

    def _reset_properties(
        self, handle: Any, holds: dict[str, PropertyValue], properties: dict[str, PropertyValue]
    ) -> None:
        """Make the readable properties of a kept ``handle`` (``holds``) ``properties``:
        delete those gone, set those added or changed. Those MQ could not hand over stay."""
        for name in [n for n in holds if n not in properties]:
            raw_name = _name_bytes(name)
            try:
                if raw_name is not None:  # always, for a name MQ gave
                    handle.properties.dlt(raw_name)
            except self.mq.MQMIError as exc:
                if exc.reason != self.C.MQRC_PROPERTY_NOT_AVAILABLE:
                    raise
            del holds[name]
        changed = {
            n: v for n, v in properties.items() if n not in holds or not same_property(holds[n], v)
        }
        self._set_properties(handle, changed)
        holds.update(changed)

    def _release_kept(self) -> None:
        """Delete the handles kept for the unit of work that ended."""
        for handle, _ in self._kept.values():
            with contextlib.suppress(self.mq.MQMIError):
                handle.dlt()
        self._kept.clear()

    def _set_properties(self, handle: Any, properties: dict[str, PropertyValue]) -> None:
        C = self.C
        # Property text is written and read in UTF-8 whatever the process's own CCSID.
        smpo = self.mq.SMPO(ValueCCSID=CCSID_UTF8)
        for name, value in settable(properties).items():
            raw_name = _name_bytes(name)
            if raw_name is None:
                log.warning("property %r has a name that is not text, which MQ cannot hold; "
                            "the message goes on without it", name)  # fmt: skip
                continue
            kind = getattr(C, property_type_name(value))
            length = C.MQVL_NULL_TERMINATED
            if isinstance(value, bytes):
                length = len(value)
            elif isinstance(value, str):
                # With its length a string keeps a NUL inside it; null-terminated, MQ
                # would end it there.
                length = len(value.encode("utf-8", "surrogatepass"))
            try:
                handle.properties.set(raw_name, value, property_type=kind, value_length=length,
                                      smpo=smpo)  # fmt: skip
            except self.mq.MQMIError as exc:
                if exc.reason != C.MQRC_PROPERTY_NAME_ERROR:
                    raise
                # A name MQ will not take (one a JMS or RFH2 writer used) must not block
                # the message: failing, it would be retried for ever on every path.
                log.warning("property %r refused by MQ (MQRC_PROPERTY_NAME_ERROR, 2442); "
                            "the message goes on without it", name)  # fmt: skip

    def put(
        self,
        queue: str,
        message: MQMessage,
        options: PutOptions | None = None,
        *,
        qmgr: str = "",
    ) -> MQMessage:
        opts = options or PutOptions()
        # Its own name opens the same queue as a blank, through the same cached handle.
        qmgr = self.address(queue, qmgr).qmgr
        C = self.C
        open_opts = C.MQOO_OUTPUT | C.MQOO_FAIL_IF_QUIESCING
        pmo_opts = C.MQPMO_FAIL_IF_QUIESCING
        pmo_opts |= C.MQPMO_SYNCPOINT if opts.syncpoint else C.MQPMO_NO_SYNCPOINT
        if message.msg_id == NONE_ID:
            pmo_opts |= C.MQPMO_NEW_MSG_ID
        if opts.set_all_context:
            open_opts |= C.MQOO_SET_ALL_CONTEXT
            pmo_opts |= C.MQPMO_SET_ALL_CONTEXT
        if opts.logical_order:
            # The queue manager keeps the group's place per object handle: one output
            # handle per queue (the cache below) carries a group across calls.
            pmo_opts |= C.MQPMO_LOGICAL_ORDER
        md = self.mq.MD()
        md.Version = C.MQMD_VERSION_2  # GroupId, MsgSeqNumber, MsgFlags and Offset: v2 only
        md.MsgType = message.message_type
        md.Report = message.report
        md.Feedback = message.feedback
        md.MsgId = message.msg_id
        md.CorrelId = message.correl_id
        md.GroupId = message.group_id
        md.MsgSeqNumber = message.msg_seq_number
        md.MsgFlags = message.msg_flags
        md.Offset = message.offset
        md.OriginalLength = message.original_length
        md.Format = _md_bytes(message.format.ljust(8), "format")
        md.CodedCharSetId = message.coded_char_set_id
        md.Encoding = message.encoding
        md.Persistence = message.persistence
        md.Priority = message.priority
        md.Expiry = message.expiry
        md.ReplyToQ = _md_bytes(message.reply_to_q, "reply_to_q")
        md.ReplyToQMgr = _md_bytes(message.reply_to_qmgr, "reply_to_qmgr")
        if opts.set_all_context:
            md.UserIdentifier = _md_bytes(message.user_identifier, "user_identifier")
            md.AccountingToken = message.accounting_token
            md.ApplIdentityData = _md_bytes(message.appl_identity_data, "appl_identity_data")
            md.PutApplType = message.put_appl_type
            md.ApplOriginData = _md_bytes(message.appl_origin_data, "appl_origin_data")
            md.PutApplName = _md_bytes(message.put_appl_name, "put_appl_name")
            if message.put_date_time is not None:
                put_date, put_time = put_date_time(message.put_date_time)
                md.PutDate, md.PutTime = put_date.encode(), put_time.encode()
        pmo = self.mq.PMO(Options=pmo_opts, Version=C.MQPMO_VERSION_3)
        handle = None
        try:
            kept = self._kept.get(message.kept_handle) if message.kept_handle else None
            if kept is not None:
                # The handle the message was got with: MQ copies every property it holds,
                # those that could not be read included, as it holds them.
                self._reset_properties(*kept, message.properties)
                pmo.OriginalMsgHandle = kept[0].msg_handle
            elif message.properties:
                handle = self.mq.MessageHandle(self.qmgr)
                self._set_properties(handle, message.properties)
                pmo.OriginalMsgHandle = handle.msg_handle
            self._open(queue, open_opts, pin=opts.logical_order, qmgr=qmgr).put(
                message.body, md, pmo
            )
        except self.mq.MQMIError as exc:
            raise self._failed(exc, f"putting to queue {_where(queue, qmgr)}") from exc
        finally:
            if handle is not None:
                with contextlib.suppress(self.mq.MQMIError):
                    handle.dlt()
        update: dict[str, Any] = {"msg_id": bytes(md.MsgId)}
        if message.in_group:
            # MQ fills in the GroupId it chose (logical order, or MQGI_NONE given) and the
            # sequence number, and always stores "in group" with "last in group".
            update.update(
                group_id=bytes(md.GroupId),
                msg_seq_number=max(1, int(md.MsgSeqNumber)),
                msg_flags=message.msg_flags | MsgFlags.MSG_IN_GROUP,
            )
        return message.model_copy(update=update)

    def get(
        self,
        queue: str,
        *,
        wait_ms: int = 0,
        syncpoint: bool = True,
        match: Match | None = None,
        browse: Browse | None = None,
        logical_order: bool = False,
        all_available: bool = False,
    ) -> MQMessage:
        C = self.C
        open_opts = C.MQOO_FAIL_IF_QUIESCING | (C.MQOO_BROWSE if browse else C.MQOO_INPUT_SHARED)
        # No MQGMO_CONVERT: the body comes as it was put, with its CCSID and Encoding, and
        # whoever reads it as text decodes it by its CCSID.
        gmo_opts = C.MQGMO_FAIL_IF_QUIESCING | C.MQGMO_PROPERTIES_IN_HANDLE
        if browse == "first":
            gmo_opts |= C.MQGMO_BROWSE_FIRST
        elif browse == "next":
            gmo_opts |= C.MQGMO_BROWSE_NEXT
        else:
            gmo_opts |= C.MQGMO_SYNCPOINT if syncpoint else C.MQGMO_NO_SYNCPOINT
        if wait_ms != 0:
            gmo_opts |= C.MQGMO_WAIT
        if not MQLONG_MIN <= wait_ms <= MQLONG_MAX:
            # No MQLONG holds it, so no MQGMO carries it to MQ (which refuses it anyway).
            raise MQError(
                f"getting from queue {queue!r}: {wait_refusal(wait_ms)}",
                reason="MQRC_WAIT_INTERVAL_ERROR",
            )
        if logical_order:
            gmo_opts |= C.MQGMO_LOGICAL_ORDER
        if all_available:
            gmo_opts |= C.MQGMO_ALL_MSGS_AVAILABLE
        try:
            if self._get_handle is None:
                self._get_handle = self.mq.MessageHandle(self.qmgr)
        except self.mq.MQMIError as exc:
            raise self._failed(exc, "creating a message handle") from exc
        handle = self._get_handle
        gmo = self.mq.GMO(
            Options=gmo_opts,
            WaitInterval=C.MQWI_UNLIMITED if wait_ms == WAIT_UNLIMITED else wait_ms,
            Version=C.MQGMO_VERSION_4,
            MsgHandle=handle.msg_handle,
        )
        md = self.mq.MD()  # fresh, so MsgId/CorrelId are reset before each get
        md.Version = C.MQMD_VERSION_2
        match_opts = 0
        if match is not None:
            if match.msg_id is not None:
                md.MsgId, match_opts = match.msg_id, match_opts | C.MQMO_MATCH_MSG_ID
            if match.correl_id is not None:
                md.CorrelId, match_opts = match.correl_id, match_opts | C.MQMO_MATCH_CORREL_ID
            if match.group_id is not None:
                md.GroupId, match_opts = match.group_id, match_opts | C.MQMO_MATCH_GROUP_ID
        gmo.MatchOptions = match_opts
        try:
            pin = browse is not None or logical_order
            body = self._open(queue, open_opts, pin=pin).get(None, md, gmo)
            properties, problems = self._read_properties(handle)
        except self.mq.MQMIError as exc:
            raise self._failed(exc, f"getting from queue {queue!r}") from exc
        kept = 0
        if problems and browse is None:
            # Wherever it goes (the failure queue), it goes with every property: this
            # handle is its own until the unit of work ends; the next get takes another.
            self._get_handle = None
            kept = next(_KEPT_TOKENS)
            self._kept[kept] = (handle, dict(properties))
        return MQMessage(
            msg_id=bytes(md.MsgId),
            correl_id=bytes(md.CorrelId),
            group_id=bytes(md.GroupId),
            msg_seq_number=max(1, int(md.MsgSeqNumber)),
            msg_flags=int(md.MsgFlags) | status_flags(C, gmo.GroupStatus),
            offset=int(md.Offset),
            original_length=int(md.OriginalLength),
            format=_md_chars(md.Format),
            coded_char_set_id=int(md.CodedCharSetId),
            encoding=int(md.Encoding),
            persistence=int(md.Persistence),
            priority=int(md.Priority),
            expiry=int(md.Expiry),
            reply_to_q=_md_chars(md.ReplyToQ),
            reply_to_qmgr=_md_chars(md.ReplyToQMgr),
            put_appl_name=_md_chars(md.PutApplName),
            put_date_time=_put_time(_text(md.PutDate), _text(md.PutTime)),
            user_identifier=_md_chars(md.UserIdentifier),
            accounting_token=bytes(md.AccountingToken),
            appl_identity_data=_md_chars(md.ApplIdentityData),
            put_appl_type=int(md.PutApplType),
            appl_origin_data=_md_chars(md.ApplOriginData),
            msg_type=int(md.MsgType),
            report=int(md.Report),
            feedback=int(md.Feedback),
            backout_count=int(md.BackoutCount),
            properties=properties,
            unreadable="; ".join(problems),
            kept_handle=kept,
            body=bytes(body),
        )

    def _read_properties(self, handle: Any) -> tuple[dict[str, PropertyValue], list[str]]:
        """Every property of the message just got, names and values as set, and why any
        could not be read.

        A value MQ cannot convert to UTF-8 (MQRC_PROP_VALUE_NOT_CONVERTED, or bytes the
        library cannot decode), or a name the process's CCSID has no form for
        (MQRC_PROP_NAME_NOT_CONVERTED) or whose bytes there are not UTF-8, is skipped, not
        raised: raised, it would back the message out again and again and stall the
        queue behind it. The library does not return the name of a property it failed
        to read, so the reason counts them.

        Raises:
            MQMIError: as MQINQMP reports it.
            MQError: the installed library does not return property names.
        """
        C = self.C
        props: dict[str, PropertyValue] = {}
        unreadable = 0
        option = C.MQIMPO_INQ_FIRST
        while True:
            impo = self.mq.IMPO(Options=option | C.MQIMPO_CONVERT_VALUE, RequestedCCSID=CCSID_UTF8)
            option = C.MQIMPO_INQ_NEXT  # MQ moved the cursor to it, read or not
            try:
                got = handle.properties.get("%", impo=impo, max_value_length=PROPERTY_BUFFER)
            except UnicodeDecodeError:
                unreadable += 1
                continue
            except self.mq.MQMIError as exc:
                if exc.reason == C.MQRC_PROPERTY_NOT_AVAILABLE:
                    break
                if exc.reason in (C.MQRC_PROP_VALUE_NOT_CONVERTED, C.MQRC_PROP_NAME_NOT_CONVERTED):
                    unreadable += 1
                    continue
                if exc.reason != C.MQRC_PROPERTY_VALUE_TOO_BIG:
                    raise
                # The cursor is on the long one: read it again whole.
                impo = self.mq.IMPO(
                    Options=C.MQIMPO_INQ_PROP_UNDER_CURSOR | C.MQIMPO_CONVERT_VALUE,
                    RequestedCCSID=CCSID_UTF8,
                )
                got = handle.properties.get(
                    "%", impo=impo, max_value_length=int(getattr(exc, "data_length", 0))
                )
            if not isinstance(got, tuple):
                raise MQError(
                    "this MQ library returns property values without their names; "
                    "install 'ibmmq' (pip install 'mqgather[ibmmq]')",
                    reason="MQRC_ENVIRONMENT_ERROR",
                )
            value, name = got
            props[_text(name).removeprefix("usr.")] = property_from_mq(value)
        problems = []
        if unreadable:
            problems.append(
                f"{unreadable} propert{'y' if unreadable == 1 else 'ies'} could not be "
                "read: a value MQ cannot convert to UTF-8 (MQRC_PROP_VALUE_NOT_CONVERTED, "
                "2466: set in a CCSID without conversion), or a name this process cannot "
                "take in its CCSID (run it with MQCCSID=1208); the message keeps them all"
            )
        return props, problems

    def commit(self) -> None:
        try:
            self.qmgr.commit()
        except self.mq.MQMIError as exc:
            raise self._failed(exc, "commit") from exc
        finally:
            self._release_kept()

    def backout(self) -> None:
        try:
            self.qmgr.backout()
        except self.mq.MQMIError as exc:
            raise self._failed(exc, "backout") from exc
        finally:
            self._release_kept()

    def inquire(self, queue: str) -> QueueAttributes:
        C = self.C
        try:
            q = self.mq.Queue(self.qmgr, queue, C.MQOO_INQUIRE | C.MQOO_FAIL_IF_QUIESCING)
        except self.mq.MQMIError as exc:
            raise self._failed(exc, f"opening queue {queue!r} to inquire") from exc
        try:
            # One MQINQ for every selector: each call is a round trip over a client channel.
            got = q.inquire(
                [C.MQIA_MAX_Q_DEPTH, C.MQIA_MAX_MSG_LENGTH, C.MQIA_BACKOUT_THRESHOLD,
                 C.MQCA_BACKOUT_REQ_Q_NAME, C.MQIA_INHIBIT_PUT, C.MQIA_INHIBIT_GET,
                 C.MQIA_USAGE, C.MQIA_CURRENT_Q_DEPTH]
            )  # fmt: skip
            return QueueAttributes(
                name=queue,
                maxdepth=int(got[C.MQIA_MAX_Q_DEPTH]),
                maxmsgl=int(got[C.MQIA_MAX_MSG_LENGTH]),
                bothresh=int(got[C.MQIA_BACKOUT_THRESHOLD]),
                boqname=_text(got[C.MQCA_BACKOUT_REQ_Q_NAME]),
                put=_inhibit(got[C.MQIA_INHIBIT_PUT]),
                get=_inhibit(got[C.MQIA_INHIBIT_GET]),
                usage=_usage(got[C.MQIA_USAGE]),
                curdepth=int(got[C.MQIA_CURRENT_Q_DEPTH]),
            )
        except self.mq.MQMIError as exc:
            hint = ""
            if exc.reason == C.MQRC_SELECTOR_NOT_FOR_TYPE:
                hint = " (an alias or remote queue has no depth: name its local target queue)"
            raise self._failed(exc, f"inquiring queue {queue!r}{hint}") from exc
        finally:
            with contextlib.suppress(self.mq.MQMIError):
                q.close()

    def _command(self) -> Any:
        if self._pcf is None:
            self._pcf = self.mq.PCFExecute(self.qmgr)
        return self._pcf

    def define(self, attrs: QueueAttributes, *, replace: bool = False) -> None:
        C = self.C
        args = {
            C.MQCA_Q_NAME: attrs.name,
            C.MQIA_Q_TYPE: C.MQQT_LOCAL,
            C.MQIA_MAX_Q_DEPTH: attrs.maxdepth,
            C.MQIA_MAX_MSG_LENGTH: attrs.maxmsgl,
            C.MQIA_BACKOUT_THRESHOLD: attrs.bothresh,
            C.MQCA_BACKOUT_REQ_Q_NAME: attrs.boqname,
        }
        if attrs.descr:
            args[C.MQCA_Q_DESC] = attrs.descr
        # Only when given, so that defining a queue again leaves PUT / GET as they are.
        for selector, value in ((C.MQIA_INHIBIT_PUT, attrs.put), (C.MQIA_INHIBIT_GET, attrs.get)):
            if value is not None:
                args[selector] = int(value == "disabled")  # MQQA_*_INHIBITED is 1
        if attrs.usage is not None:
            args[C.MQIA_USAGE] = C.MQUS_TRANSMISSION if attrs.usage == "xmitq" else C.MQUS_NORMAL
        try:
            if replace:
                # ALTER, not DEFINE REPLACE: REPLACE would reset every attribute not named
                # here (SHARE, DEFSOPT, DESCR, ...) to its default.
                try:
                    self._command().MQCMD_CHANGE_Q(args)
                    return
                except self.mq.MQMIError as exc:
                    if exc.reason != C.MQRC_UNKNOWN_OBJECT_NAME:
                        raise
            self._command().MQCMD_CREATE_Q(args)
        except self.mq.MQMIError as exc:
            raise self._failed(exc, f"defining queue {attrs.name!r}") from exc

    def list_queues(self, pattern: str = "*") -> list[QueueAttributes]:
        C = self.C
        try:
            rows = self._command().MQCMD_INQUIRE_Q(
                {C.MQCA_Q_NAME: pattern.encode(), C.MQIA_Q_TYPE: C.MQQT_LOCAL}
            )
        except self.mq.MQMIError as exc:
            if exc.reason == C.MQRC_UNKNOWN_OBJECT_NAME:
                return []  # the command server's answer when nothing matches
            raise self._failed(exc, f"listing queues {pattern!r}") from exc
        return [
            QueueAttributes(
                name=_text(row[C.MQCA_Q_NAME]),
                maxdepth=int(row.get(C.MQIA_MAX_Q_DEPTH, 0)),
                maxmsgl=int(row.get(C.MQIA_MAX_MSG_LENGTH, 0)),
                bothresh=int(row.get(C.MQIA_BACKOUT_THRESHOLD, 0)),
                boqname=_text(row.get(C.MQCA_BACKOUT_REQ_Q_NAME, b"")),
                put=_inhibit(row.get(C.MQIA_INHIBIT_PUT, 0)),
                get=_inhibit(row.get(C.MQIA_INHIBIT_GET, 0)),
                usage=_usage(row.get(C.MQIA_USAGE, 0)),
                curdepth=int(row.get(C.MQIA_CURRENT_Q_DEPTH, 0)),
            )
            for row in rows
        ]

    def max_uncommitted(self) -> int:
        try:
            return int(self.qmgr.inquire(self.C.MQIA_MAX_UNCOMMITTED_MSGS))
        except self.mq.MQMIError as exc:
            raise self._failed(exc, "inquiring MAXUMSGS") from exc

    def dead_letter_queue(self) -> str:
        try:
            return _text(self.qmgr.inquire(self.C.MQCA_DEAD_LETTER_Q_NAME))
        except self.mq.MQMIError as exc:
            raise self._failed(exc, "inquiring DEADQ") from exc

    def close(self) -> None:
        """Back out, then disconnect. If the backout fails while the connection stands,
        the connection is left for the queue manager to back out when the process ends:
        MQDISC would commit the unit of work."""
        if self._closed:
            return
        self._closed = True
        for q in self._queues.values():
            with contextlib.suppress(self.mq.MQMIError):
                q.close()
        self._queues.clear()
        self._pinned.clear()
        for handle in (self._get_handle,):
            if handle is not None:
                with contextlib.suppress(self.mq.MQMIError):
                    handle.dlt()
        self._get_handle = None
        self._release_kept()
        if self._pcf is not None:
            with contextlib.suppress(self.mq.MQMIError, AttributeError):
                self._pcf.reply_queue.close()
            self._pcf = None
        try:
            self.qmgr.backout()
        except self.mq.MQMIError as exc:
            if not isinstance(translate_exception(exc), ConnectionBroken):
                return
        with contextlib.suppress(self.mq.MQMIError):
            self.qmgr.disconnect()


def _put_time(date: str, time_text: str) -> datetime | None:
    """MQMD PutDate (YYYYMMDD) + PutTime (HHMMSSTH), GMT, as a datetime."""
    try:
        stamp = datetime.strptime(date + time_text[:6], "%Y%m%d%H%M%S")
    except ValueError:
        return None
    # ASCII only: an application setting all context may write any bytes, and isdigit
    # also takes '²', which int() refuses.
    tail = time_text[6:8]
    hundredths = int(tail) if tail.isascii() and tail.isdigit() else 0
    return stamp.replace(tzinfo=UTC, microsecond=hundredths * 10000)
