"""The IBM MQ adapter's pure parts: settings, channel definition, typing, reason codes."""

from __future__ import annotations

import pytest

from bridge.mq.errors import (
    ConnectionBroken,
    MessageTooBig,
    MQError,
    NoMessageAvailable,
    NotAuthorized,
    QueueFull,
    UnknownObjectName,
    error_for_reason,
)
from bridge.mq.ibmmq_adapter import (
    _put_time,
    ccdt_url,
    channel_definition,
    parse_ibmmq_url,
    property_from_mq,
    property_type_name,
    ssl_options,
    translate_exception,
)
from mqgather.errors import ConfigError


def test_url_with_several_endpoints_and_tls():
    s = parse_ibmmq_url(
        "ibmmq://QM1@mq1.example(1414),mq2.example(1415)/DEV.APP.SVRCONN"
        "?cipher=TLS_AES_256_GCM_SHA384&keyrepo=/var/mqm/key&certlabel=app&user=app",
        env={},
    )
    assert s.qmgr == "QM1"
    assert s.conname == ["mq1.example(1414)", "mq2.example(1415)"]
    assert s.channel == "DEV.APP.SVRCONN"
    cd = channel_definition(s)
    assert cd == {
        "ChannelName": "DEV.APP.SVRCONN",
        "ConnectionName": "mq1.example(1414),mq2.example(1415)",
        "ChannelType": "MQCHT_CLNTCONN",
        "TransportType": "MQXPT_TCP",
        "MaxMsgLength": 100 * 1024 * 1024,
        "SSLCipherSpec": "TLS_AES_256_GCM_SHA384",
    }
    assert ssl_options(s) == {"KeyRepository": "/var/mqm/key", "CertificateLabel": "app"}
    assert s.user == "app"


def test_ccdt_instead_of_endpoints(tmp_path):
    ccdt = tmp_path / "ccdt.json"
    s = parse_ibmmq_url(f"ibmmq://QM1?ccdt={ccdt}", env={})
    assert channel_definition(s) == {}
    assert ccdt_url(s) == f"file://{ccdt}"


def test_password_from_env_or_file_and_never_shown(tmp_path):
    s = parse_ibmmq_url(
        "ibmmq://QM1@h(1414)/CH", env={"MQGATHER_MQ_USER": "u", "MQGATHER_MQ_PASSWORD": "s3cret"}
    )
    assert s.user == "u" and s.password is not None
    assert s.password.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(s) and "s3cret" not in s.describe() and "s3cret" not in str(s)
    secret = tmp_path / "pw"
    secret.write_text("fromfile\n")
    s2 = parse_ibmmq_url(f"ibmmq://QM1@h(1414)/CH?password_file={secret}", env={})
    assert s2.password is not None and s2.password.get_secret_value() == "fromfile"
    # A file others may write could hold anyone's password: refused, the secret unshown.
    secret.chmod(0o662)
    with pytest.raises(ConfigError) as writable:
        parse_ibmmq_url("ibmmq://QM1@h(1414)/CH", env={"MQGATHER_MQ_PASSWORD_FILE": str(secret)})
    assert "MQGATHER_MQ_PASSWORD_FILE" in str(writable.value)
    assert "chmod go-w" in str(writable.value) and "fromfile" not in str(writable.value)


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("ibmmq://QM1@host/CH", "host(port)"),
        # Full-width digits: the check's \d took them, and no MQ client reads them.
        ("ibmmq://QM1@host(\uff11\uff14\uff11\uff14)/CH", "host(port)"),
        ("ibmmq://QM1@host(1414)", "channel"),
        ("ibmmq://QM1", "ccdt"),
        ("ibmmq://QM1@h(1414)/CH?password=x", "MQGATHER_MQ_PASSWORD"),
        ("ibmmq://QM1@h(1414)/CH?colour=red", "unknown option"),
        ("ibmmq://QM1@h(1414)/CH?password_file=/no/such/file", "/no/such/file"),
    ],
)
def test_bad_urls_name_the_fault(url, fragment):
    with pytest.raises(ConfigError) as info:
        parse_ibmmq_url(url, env={})
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (True, "MQTYPE_BOOLEAN"),
        (7, "MQTYPE_INT64"),
        (1.5, "MQTYPE_FLOAT64"),
        ("s", "MQTYPE_STRING"),
        (b"b", "MQTYPE_BYTE_STRING"),
        (None, "MQTYPE_NULL"),
    ],
)
def test_property_type_mapping(value, name):
    assert property_type_name(value) == name
    assert property_from_mq(value) == value


def test_property_from_mq_normalises_bytearray():
    assert property_from_mq(bytearray(b"ab")) == b"ab"


class _FakeMQMIError(Exception):
    def __init__(self, comp: int, reason: int):
        super().__init__(f"MQI Error. Comp: {comp}, Reason {reason}")
        self.comp, self.reason = comp, reason


@pytest.mark.parametrize(
    ("code", "cls", "name"),
    [
        (2033, NoMessageAvailable, "MQRC_NO_MSG_AVAILABLE"),
        (2053, QueueFull, "MQRC_Q_FULL"),
        (2030, MessageTooBig, "MQRC_MSG_TOO_BIG_FOR_Q"),
        (2085, UnknownObjectName, "MQRC_UNKNOWN_OBJECT_NAME"),
        (2035, NotAuthorized, "MQRC_NOT_AUTHORIZED"),
        (2009, ConnectionBroken, "MQRC_CONNECTION_BROKEN"),
        (2538, ConnectionBroken, "MQRC_HOST_NOT_AVAILABLE"),
    ],
)
def test_reason_codes_map_to_typed_errors(code, cls, name):
    err = translate_exception(_FakeMQMIError(2, code), "getting from queue 'Q'")
    assert type(err) is cls
    assert err.reason == name and err.code == code
    assert name in str(err) and "'Q'" in str(err)


def test_unknown_reason_keeps_its_number():
    err = error_for_reason(9999)
    assert type(err) is MQError and err.reason == "MQRC_9999" and err.code == 9999


def test_transient_errors_are_marked():
    assert ConnectionBroken().transient and QueueFull().transient
    assert not UnknownObjectName().transient


def test_put_time_parsing():
    stamp = _put_time("20260102", "03040512")
    assert stamp is not None
    assert (stamp.year, stamp.month, stamp.day, stamp.hour, stamp.minute, stamp.second) == (
        2026, 1, 2, 3, 4, 5,
    )  # fmt: skip
    assert stamp.microsecond == 120000
    assert _put_time("", "") is None
    # Context an application set: hundredths that are not ASCII digits count as none.
    assert _put_time("20260102", "030405\u00b2\u00b3") == stamp.replace(microsecond=0)
    assert _put_time("20260102", "030405\ufffd") == stamp.replace(microsecond=0)
