"""Arguments the operators' commands take: a value no one could mean (NaN, infinity, out
of range, text that is not UTF-8) is refused by name before Temporal is reached, never a
traceback after."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from mqgather.cli.main import cli

NOWHERE = {"TEMPORAL_ADDRESS": "127.0.0.1:9"}  # refused at once, were it reached


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["salvage", "--all", "--within", "nan"], "'--within': not a number"),
        (["salvage", "--all", "--within", "inf"], "'--within': inf is not in the range"),
        (["salvage", "--all", "--within", "1e308"], "'--within': 1e+308 is not in the range"),
        (["salvage", "--all", "--within", "0"], "'--within': 0.0 is not in the range"),
        (["extend", "--aggregate", "orders", "X", "--seconds", "nan"], "'--seconds': not a number"),
        (["deploy", "promote", "B1", "--ramp", "nan"], "'--ramp': not a number"),
        (["deploy", "promote", "B1", "--ramp", "150"], "'--ramp': 150.0 is not in the range"),
        (["deploy", "promote", "B1", "--ramp", "-3"], "'--ramp': -3.0 is not in the range"),
        # str.isdigit takes '²', which int() refuses; an MQ reason is an MQLONG.
        (["queues", "retry", "--reason", "\u00b2"], "'\u00b2' is not a reason code"),
        (["queues", "retry", "--reason", "9" * 5000], "is not a reason code"),
    ],
)
def test_a_number_no_one_could_mean_is_refused_before_temporal_is_reached(args, said):
    out = CliRunner().invoke(cli, args, env=NOWHERE)
    assert out.exit_code == 2, out.output
    assert said in out.output
    assert "cannot reach Temporal" not in out.output


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["release", "ORDER-1", "--reason", "caf\udce9"], "'--reason': not UTF-8 text"),
        (["cancel", "ORDER-1", "--reason", "caf\udce9"], "'--reason': not UTF-8 text"),
        (["rerequest", "ORDER-1", "CR\udce9DIT"], "'LEG': not UTF-8 text"),
        (["status", "ORDER\udce9-1"], "'ORDER\\udce9-1' is not UTF-8 text; give it as hex:"),
        (["release", "gather:orders:zz"], "is not valid hex"),
        (["extend", "O" * 25], "is 25 bytes; MQ ids are at most 24"),
        (["queues", "put", "Q", "--body", "x", "--correl-id", "\udce9"], "not UTF-8 text"),
    ],
)
def test_text_the_terminal_gave_as_bytes_that_are_not_utf8_is_refused(args, said):
    # Python holds such bytes as lone surrogates, which no payload or property carries:
    # each was a traceback from the data converter, or from the id's encoding.
    out = CliRunner().invoke(cli, args, env=NOWHERE)
    assert out.exit_code in (1, 2), out.output
    assert said in out.output and "Traceback" not in out.output
    assert not isinstance(out.exception, UnicodeError)


@pytest.mark.parametrize("command", ["browse", "get", "clear", "put"])
@pytest.mark.parametrize("queue", ["Q\udce9", "ORDER RESPONSE", "Q" * 49])
def test_a_queue_name_mq_refuses_is_refused_before_the_queue_manager_is_asked(
    command, queue, tmp_path
):
    # The first was a UnicodeEncodeError traceback out of the embedded queue manager.
    # (define and alter refuse such names through the queue's own attributes model.)
    out = CliRunner().invoke(cli, ["queues", command, queue, "--mq", f"local:{tmp_path / 'q.db'}"])
    assert out.exit_code == 2, out.output
    assert "Invalid value for 'QUEUE'" in out.output and "MQ" in out.output
    assert not (tmp_path / "q.db").exists()


def test_a_body_that_is_not_utf8_is_refused_by_leg():
    out = CliRunner().invoke(cli, ["scatter", "--body", "CREDIT=caf\udce9"], env=NOWHERE)
    assert out.exit_code == 2, out.output
    assert "CREDIT's text is not UTF-8" in out.output


def test_a_call_temporal_refuses_is_said_with_what_to_do_not_a_traceback(bare_namespace):
    # `status` without --aggregate finds the gather by its CorrelId search attribute,
    # which a namespace no worker has started on lacks.
    env = {**os.environ, "TEMPORAL_ADDRESS": bare_namespace.service_client.config.target_host,
           "TEMPORAL_NAMESPACE": bare_namespace.namespace}  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "mqgather.cli", "status", "ORDER-1"], env=env,
                         capture_output=True, timeout=60)  # fmt: skip
    said = out.stderr.decode()
    assert out.returncode == 1 and "Traceback" not in said, said
    assert "Error: Temporal refused the call (INVALID_ARGUMENT" in said
    assert "start one against this namespace" in said


@pytest.mark.parametrize(
    "args",
    [
        [b"status", b"ORDER-1", b"--aggregate", b"or\xffders"],
        [b"salvage", b"--all", b"--aggregate", b"or\xffders"],
        [b"release", b"ORDER-1", b"--aggregate", b"or\xffders"],
    ],
)
def test_an_argument_that_is_not_utf8_is_named_wherever_it_would_have_gone(bare_namespace, args):
    # Python reads it into a lone surrogate, which no request to Temporal can carry: the
    # encoding's traceback, until the command names the argument.
    env = {**os.environ, "TEMPORAL_ADDRESS": bare_namespace.service_client.config.target_host,
           "TEMPORAL_NAMESPACE": bare_namespace.namespace}  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "mqgather.cli", *args], env=env,
                         capture_output=True, timeout=60)  # fmt: skip
    said = out.stderr.decode()
    assert out.returncode == 1 and "Traceback" not in said, said
    assert "the argument 'or\\udcffders' is not UTF-8 text" in said


@pytest.mark.parametrize("name", [b"TEMPORAL_API_KEY", b"TEMPORAL_NAMESPACE", b"MQGATHER_KEYS",
                                  b"SOME_DB_PASSWORD"])  # fmt: skip
def test_an_environment_variable_that_is_not_utf8_is_named_not_shown(name):
    # Temporal's loader reads every variable: on a TEMPORAL_ one it said "not valid
    # unicode", on any other it panicked; both printed the value, a key ring's too.
    env = {**os.environb, b"TEMPORAL_ADDRESS": b"127.0.0.1:9", name: b"secret\xff"}
    out = subprocess.run([sys.executable, "-m", "mqgather.cli", "status", "ORDER-1"], env=env,
                         capture_output=True, timeout=60)  # fmt: skip
    said = out.stderr.decode()
    assert out.returncode == 1 and "Traceback" not in said, said
    assert f"Error: {name.decode()}: not UTF-8 text, which Temporal's client cannot read" in said
    assert "secret" not in said
