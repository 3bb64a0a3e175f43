"""`mqgather queues` as a person types it in a shell."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

MQGATHER = shutil.which("mqgather")


def run(args: list[str], cwd: Path, stdin: bytes | None = None, mq: str | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MQGATHER_")}
    if mq:
        env["MQGATHER_MQ"] = mq
    return subprocess.run(
        [MQGATHER or "mqgather", *args], cwd=cwd, input=stdin, capture_output=True, env=env,
        timeout=60,
    )  # fmt: skip


pytestmark = pytest.mark.skipif(MQGATHER is None, reason="mqgather is not installed")


def test_put_browse_get_from_a_shell(tmp_path):
    assert run(["queues", "define", "APP.Q"], tmp_path).returncode == 0
    put = run(
        [
            "queues", "put", "APP.Q", "--correl-id", "ORDER-42", "--property", "leg=CREDIT",
            "--property", "attempt:int=2", "--reply-to-q", "ORDER.REPLY", "--body", '{"ok":1}',
        ],
        tmp_path,
    )  # fmt: skip
    assert put.returncode == 0, put.stderr
    msg_id = put.stdout.decode().strip()
    assert msg_id.startswith("hex:") and len(msg_id) == 4 + 48

    browsed = run(["queues", "browse", "APP.Q", "--json"], tmp_path)
    lines = browsed.stdout.decode().splitlines()
    assert len(lines) == 1
    shown = json.loads(lines[0])
    assert shown["correl_id"] == "hex:" + (b"ORDER-42" + b"\x00" * 16).hex()
    assert shown["msg_id"] == msg_id
    assert shown["properties"] == {
        "leg": {"type": "string", "value": "CREDIT"},
        "attempt": {"type": "int64", "value": 2},
    }
    assert shown["reply_to_q"] == "ORDER.REPLY"
    # The identity and origin context the queue manager set on the put (default context).
    assert shown["user_identifier"] == getpass.getuser()[:12] and shown["put_appl_type"] == 6
    assert shown["accounting_token"] == "hex:" + "00" * 32
    assert (shown["body_encoding"], shown["body"]) == ("text", '{"ok":1}')
    # Browsing did not remove it; get by CorrelId does.
    got = run(["queues", "get", "APP.Q", "--correl-id", "ORDER-42"], tmp_path)
    assert got.returncode == 0 and got.stdout == b'{"ok":1}\n'
    empty = run(["queues", "browse", "APP.Q", "--json"], tmp_path)
    assert empty.stdout == b""
    again = run(["queues", "get", "APP.Q"], tmp_path)
    assert again.returncode == 2 and b"MQRC_NO_MSG_AVAILABLE" in again.stderr


def test_body_from_stdin_and_binary_body_as_base64(tmp_path):
    run(["queues", "define", "BIN.Q"], tmp_path)
    assert run(["queues", "put", "BIN.Q"], tmp_path, stdin=b"\xff\x00\x01").returncode == 0
    shown = json.loads(run(["queues", "browse", "BIN.Q", "--json"], tmp_path).stdout)
    assert shown["body_encoding"] == "base64" and shown["body"] == "/wAB"


def test_list_shows_depth_and_clear_empties(tmp_path):
    run(["queues", "define", "D.Q"], tmp_path)
    for i in range(3):
        run(["queues", "put", "D.Q", "--body", str(i)], tmp_path)
    listed = [
        json.loads(x) for x in run(["queues", "list", "--json"], tmp_path).stdout.splitlines()
    ]
    assert {q["name"]: q["curdepth"] for q in listed}["D.Q"] == 3
    assert b"cleared 3" in run(["queues", "clear", "D.Q"], tmp_path).stdout
    listed = [
        json.loads(x)
        for x in run(["queues", "list", "D.*", "--json"], tmp_path).stdout.splitlines()
    ]
    assert [(q["name"], q["curdepth"]) for q in listed] == [("D.Q", 0)]


def test_alter_inhibits_a_queue_and_setup_leaves_it_so(tmp_path):
    run(["queues", "setup"], tmp_path)
    run(["queues", "put", "GATHER.IN", "--body", "waits"], tmp_path)
    altered = run(["queues", "alter", "GATHER.IN", "--get", "disabled"], tmp_path)
    assert altered.returncode == 0
    assert b"PUT(ENABLED) GET(DISABLED)" in altered.stdout
    assert b"BOQNAME(GATHER.BACKOUT)" in altered.stdout  # the rest as it was
    refused = run(["queues", "get", "GATHER.IN"], tmp_path)
    assert refused.returncode != 0 and b"MQRC_GET_INHIBITED (2016)" in refused.stderr
    assert run(["queues", "setup"], tmp_path).returncode == 0  # e.g. during a rollout
    (row,) = [json.loads(x) for x in run(["queues", "list", "GATHER.IN", "--json"],
                                         tmp_path).stdout.splitlines()]  # fmt: skip
    assert (row["get"], row["put"], row["curdepth"]) == ("disabled", "enabled", 1)
    assert b"get" in run(["queues", "list", "GATHER.IN"], tmp_path).stdout
    run(["queues", "alter", "GATHER.IN", "--get", "enabled"], tmp_path)
    assert run(["queues", "get", "GATHER.IN"], tmp_path).stdout.strip() == b"waits"
    nothing = run(["queues", "alter", "GATHER.IN"], tmp_path)
    assert nothing.returncode == 2 and b"name at least one attribute" in nothing.stderr


def test_check_finds_what_would_stop_mqgather_and_changes_nothing(tmp_path):
    before = run(["queues", "check"], tmp_path)
    assert before.returncode == 1 and b"problem(s)" in before.stderr
    assert b"GATHER.IN" in before.stdout and b"not defined" in before.stdout
    run(["queues", "setup"], tmp_path)
    clean = run(["queues", "check"], tmp_path)
    assert clean.returncode == 0, clean.stdout
    assert b"checks out" in clean.stdout and b"MAXUMSGS 10000" in clean.stdout
    run(["queues", "alter", "GATHER.FAILURE", "--put", "disabled"], tmp_path)
    run(["queues", "alter", "GATHER.IN", "--bothresh", "0"], tmp_path)
    run(["queues", "define", "GATHER.LATE", "--maxmsgl", "1000", "--replace"], tmp_path)
    found = run(["queues", "check", "--json"], tmp_path)
    assert found.returncode == 1 and b"3 problem(s)" in found.stderr
    problems = {(f["queue"], f["problem"].split(":")[0])
                for f in map(json.loads, found.stdout.splitlines())}  # fmt: skip
    assert problems == {
        ("GATHER.FAILURE", "PUT(DISABLED)"),
        ("GATHER.IN", "BOTHRESH(0)"),
        ("GATHER.LATE", "MAXMSGL(1000) is below GATHER.IN's (104857600)"),
    }
    assert b"GATHER.LATE" in run(["queues", "check"], tmp_path).stdout  # the table
    listed = [json.loads(x) for x in run(["queues", "list", "GATHER.*", "--json"],
                                         tmp_path).stdout.splitlines()]  # fmt: skip
    assert {q["name"]: q["put"] for q in listed}["GATHER.FAILURE"] == "disabled"


def test_setup_defines_the_default_queues(tmp_path):
    assert run(["queues", "setup"], tmp_path).returncode == 0
    names = {
        json.loads(x)["name"]
        for x in run(["queues", "list", "--json"], tmp_path).stdout.splitlines()
    }
    assert {
        "GATHER.IN",
        "ORDER.RESPONSE",
        "GATHER.TIMEOUT",
        "GATHER.LATE",
        "GATHER.FAILURE",
    } <= names


def _assert_one_line_error(result, *fragments: str):
    err = result.stderr.decode()
    assert result.returncode != 0
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in err, err


def test_missing_queue_is_a_one_line_error(tmp_path):
    result = run(["queues", "put", "NO.SUCH.Q", "--body", "x"], tmp_path)
    _assert_one_line_error(result, "MQRC_UNKNOWN_OBJECT_NAME", "NO.SUCH.Q")


def test_corrupt_database_is_a_one_line_error(tmp_path):
    bad = tmp_path / "broken.db"
    bad.write_bytes(b"garbage" * 1000)
    result = run(["queues", "list"], tmp_path, mq=f"local:{bad}")
    _assert_one_line_error(result, str(bad), "MQRC_Q_MGR_NOT_AVAILABLE")


def test_unwritable_database_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory")
    result = run(["queues", "list"], tmp_path, mq=f"local:{blocker}/qm.db")
    _assert_one_line_error(result, str(blocker))
    result = run(["queues", "list"], tmp_path, mq="local:/proc/mqgather-qm.db")
    _assert_one_line_error(result, "/proc/mqgather-qm.db")


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("bogus:thing", "--mq"),
        ("ibmmq://QM1@host-without-port/CH", "host(port)"),
        ("local:", "local:"),
    ],
)
def test_bad_connection_string_is_a_one_line_error(tmp_path, url, fragment):
    _assert_one_line_error(run(["queues", "list", "--mq", url], tmp_path), fragment)


def test_a_bad_url_error_names_where_it_came_from(tmp_path):
    _assert_one_line_error(run(["queues", "list"], tmp_path, mq="bogus:thing"), "MQGATHER_MQ")
    result = run(["queues", "list", "--mq", "ibmmq://QM1@h(1)/CH?pasword=x"], tmp_path)
    _assert_one_line_error(result, "--mq", "pasword")


def test_a_local_file_in_a_missing_directory_is_an_error(tmp_path):
    url = f"local:{tmp_path}/no/such/dir/qm.db"
    _assert_one_line_error(run(["queues", "list", "--mq", url], tmp_path), "--mq", "does not exist")
    assert not (tmp_path / "no").exists()
    # mqgather's own state directory is still created on demand.
    assert run(["queues", "list", "--mq", "local:.mqgather/qm.db"], tmp_path).returncode == 0
    assert (tmp_path / ".mqgather" / "qm.db").exists()


def test_bad_property_and_id_are_one_line_errors(tmp_path):
    run(["queues", "define", "P.Q"], tmp_path)
    _assert_one_line_error(
        run(["queues", "put", "P.Q", "--body", "x", "--property", "n:int=abc"], tmp_path),
        "--property",
    )
    _assert_one_line_error(
        run(["queues", "put", "P.Q", "--body", "x", "--correl-id", "x" * 30], tmp_path), "24"
    )


def test_property_types_parse():
    from mqgather.cli.queues import parse_property

    assert parse_property("leg=CREDIT") == ("leg", "CREDIT")
    assert parse_property("n:int=-3") == ("n", -3)
    assert parse_property("f:float=2.5") == ("f", 2.5)
    assert parse_property("b:bool=yes") == ("b", True)
    assert parse_property("z:null=") == ("z", None)
    assert parse_property("raw:bytes=hex:" + "ab" * 40) == ("raw", b"\xab" * 40)
    assert parse_property("raw:bytes=text") == ("raw", b"text")


def test_browse_shows_a_dead_letter_header_apart(tmp_path):
    from datetime import UTC, datetime

    from bridge.mq import dlh
    from bridge.mq.local_qm import LocalQueueManager
    from bridge.mq.models import MQMessage, PutOptions

    original = MQMessage(correl_id=b"ORDER-42", body=b'{"ok":1}')
    dead = dlh.dead_letter(original, 2085, "NO.SUCH.Q", "QM1", "mqgather",
                           datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))  # fmt: skip
    with LocalQueueManager(tmp_path / ".mqgather" / "qm.db") as qm:
        qm.put("SYSTEM.DEAD.LETTER.QUEUE", dead, PutOptions(syncpoint=False))
    shown = json.loads(run(["queues", "browse", "SYSTEM.DEAD.LETTER.QUEUE", "--json"], tmp_path)
                       .stdout)  # fmt: skip
    header = shown["dead_letter_header"]
    assert shown["format"] == "MQDEAD" and shown["body"] == '{"ok":1}'
    assert header["reason"] == 2085 and header["reason_name"] == "MQRC_UNKNOWN_OBJECT_NAME"
    assert header["dest_q_name"] == "NO.SUCH.Q" and header["format"] == "MQSTR"
    assert header["put_date"] == "20260102" and header["put_time"] == "03040500"


def test_put_in_ebcdic_and_browse_shows_the_ccsid_and_the_text(tmp_path):
    assert run(["queues", "define", "APP.Q"], tmp_path).returncode == 0
    put = run(["queues", "put", "APP.Q", "--ccsid", "37", "--encoding", "785",
               "--body", "Grüße [1]"], tmp_path)  # fmt: skip
    assert put.returncode == 0, put.stderr
    shown = json.loads(run(["queues", "browse", "APP.Q", "--json"], tmp_path).stdout)
    assert (shown["coded_char_set_id"], shown["encoding"]) == (37, 785)
    assert (shown["body_encoding"], shown["body"]) == ("text", "Grüße [1]")
    got = run(["queues", "get", "APP.Q"], tmp_path)
    assert got.stdout == "Grüße [1]".encode("cp037") + b"\n"
    bad = run(["queues", "put", "APP.Q", "--ccsid", "9999", "--body", "x"], tmp_path)
    assert bad.returncode == 1 and b"--ccsid: CCSID 9999" in bad.stderr


def test_groups_from_a_shell_logical_and_physical_order(tmp_path):
    assert run(["queues", "define", "GRP.Q"], tmp_path).returncode == 0
    # Physical order: the application names the group and numbers, 2 before 1, 3 missing.
    for seq in ("2", "1"):
        done = run(
            ["queues", "put", "GRP.Q", "--group-id", "BATCH-7", "--seq", seq, "--in-group",
             "--body", f"part {seq}"],
            tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    logical = run(
        ["queues", "put", "GRP.Q", "--logical-order", "--body", "x", "--body", "y"], tmp_path
    )
    assert logical.returncode == 0, logical.stderr
    lines = logical.stdout.decode().splitlines()
    assert "seq 1  in-group" in lines[0] and "seq 2  last-in-group" in lines[1]
    # The incomplete BATCH-7 is invisible to an all-available browse and get.
    shown = run(["queues", "browse", "GRP.Q", "--logical-order", "--all-available"], tmp_path)
    assert [line.split()[3] for line in shown.stdout.decode().splitlines()] == ["'x'", "'y'"]
    got = run(["queues", "get", "GRP.Q", "--logical-order", "--all-available"], tmp_path)
    assert got.returncode == 0 and got.stdout == b"x\ny\n"
    assert run(["queues", "get", "GRP.Q", "--all-available"], tmp_path).returncode == 2
    last = run(
        ["queues", "put", "GRP.Q", "--group-id", "BATCH-7", "--seq", "3", "--last",
         "--body", "part 3"],
        tmp_path,
    )  # fmt: skip
    assert last.returncode == 0, last.stderr
    got = run(["queues", "get", "GRP.Q", "--logical-order", "--all-available", "--json"], tmp_path)
    rows = [json.loads(line) for line in got.stdout.decode().splitlines()]
    assert [(r["body"], r["msg_seq_number"], r["group_status"]) for r in rows] == [
        ("part 1", 1, "in-group"),
        ("part 2", 2, "in-group"),
        ("part 3", 3, "last-in-group"),
    ]
    assert rows[0]["group_id"] == "hex:" + b"BATCH-7".ljust(24, b"\0").hex()


def test_group_options_that_contradict_are_refused(tmp_path):
    assert run(["queues", "define", "GRP.Q"], tmp_path).returncode == 0
    two = run(["queues", "put", "GRP.Q", "--body", "a", "--body", "b"], tmp_path)
    assert two.returncode != 0 and b"--logical-order" in two.stderr
    mixed = run(
        ["queues", "put", "GRP.Q", "--logical-order", "--seq", "2", "--body", "a"], tmp_path
    )
    assert mixed.returncode != 0 and b"--seq" in mixed.stderr


def test_a_get_whose_output_cannot_be_written_leaves_the_message_on_the_queue(tmp_path):
    # `mqgather queues get Q | consumer` where the consumer is gone: the body cannot be
    # written, so the get is backed out rather than committed and the message lost.
    run(["queues", "define", "APP.Q"], tmp_path)
    assert run(["queues", "put", "APP.Q", "--body", "keep me"], tmp_path).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("MQGATHER_")}
    for extra in ([], ["--json"]):
        reader = subprocess.Popen([MQGATHER or "mqgather", "queues", "get", "APP.Q", *extra],
                                  cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)  # fmt: skip
        reader.stdout.close()  # before the command can write: it starts in a second or so
        _, err = reader.communicate(timeout=60)
        assert reader.returncode == 1, err
        assert b"not written" in err and b"left on APP.Q" in err
        browsed = json.loads(run(["queues", "browse", "APP.Q", "--json"], tmp_path).stdout)
        assert browsed["body"] == "keep me"


def test_browse_names_a_report_and_a_segment(tmp_path):
    from bridge.mq.local_qm import LocalQueueManager
    from bridge.mq.models import MQMT_REPORT, MQMessage, MsgFlags, PutOptions

    assert run(["queues", "define", "GATHER.REPORT"], tmp_path).returncode == 0
    with LocalQueueManager(tmp_path / ".mqgather" / "qm.db") as qm:
        for message in (
            MQMessage(msg_type=MQMT_REPORT, feedback=2053, report=0x40, body=b"head of it"),
            MQMessage(msg_flags=MsgFlags.LAST_SEGMENT, offset=4096, body=b"tail"),
        ):
            qm.put("GATHER.REPORT", message, PutOptions(syncpoint=False))
    shown = run(["queues", "browse", "GATHER.REPORT"], tmp_path).stdout.decode().splitlines()
    assert "report MQRC_Q_FULL (2053)" in shown[0] and "segment" not in shown[0]
    assert "segment at 4096 (last)" in shown[1] and "report" not in shown[1]
    report, segment = (
        json.loads(line)
        for line in run(
            ["queues", "browse", "GATHER.REPORT", "--json"], tmp_path
        ).stdout.splitlines()
    )
    assert (report["msg_type"], report["feedback"], report["report"]) == (MQMT_REPORT, 2053, 0x40)
    assert report["feedback_name"] == "MQRC_Q_FULL (2053)"
    assert (segment["offset"], segment["original_length"], segment["msg_flags"]) == (4096, 4, 4)


def test_retry_puts_dead_letters_back_where_they_were_going_once_each(tmp_path):
    """runmqdlq's RETRY: a dead letter chosen by reason and destination loses its MQDLH and
    goes to the queue (and queue manager) the header names, its MQMD and context kept,
    in the unit of work that takes it off the dead-letter queue; one refused again stays,
    once; a message that is no dead letter is passed over."""
    from bridge.mq.deadletters import undead
    from bridge.mq.dlh import dead_letter
    from bridge.mq.local_qm import LocalQueueManager
    from bridge.mq.models import MQMessage, PutOptions, QueueAttributes
    from mqgather.constants import DEAD_LETTER_QUEUE

    def dead(body: bytes, queue: str, reason: int, qmgr: str = "MQGATHER") -> MQMessage:
        sent = MQMessage(body=body, correl_id=body.ljust(24, b"\0"), format="MQSTR",
                         coded_char_set_id=500, user_identifier="requester1")  # fmt: skip
        return dead_letter(sent, reason, queue, qmgr, "mqgather")

    with LocalQueueManager(tmp_path / ".mqgather" / "qm.db") as qm:
        qm.define(QueueAttributes(name="APP.REPLY", maxdepth=1))
        qm.put("APP.REPLY", MQMessage(body=b"filler"), PutOptions(syncpoint=False))
        letters = [
            dead(b"full one", "APP.REPLY", 2053),
            dead(b"no route", "APP.REPLY", 2087, qmgr="QM9"),
            dead(b"full two", "APP.REPLY", 2053),
            dead(b"unknown", "NO.SUCH.Q", 2085),
        ]
        for letter in [*letters, MQMessage(body=b"plain")]:
            qm.put(DEAD_LETTER_QUEUE, letter, PutOptions(syncpoint=False, set_all_context=True))

    dry = run(["queues", "retry", "--dry-run"], tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert b"would put back 4 of 4" in dry.stderr and b"1 passed over" in dry.stderr
    # Still full: both Q_FULL letters are refused again and stay.
    full = run(["queues", "retry", "--reason", "MQRC_Q_FULL"], tmp_path)
    assert full.returncode == 1 and full.stdout.count(b"MQRC_Q_FULL again") == 2
    assert run(["queues", "alter", "APP.REPLY", "--maxdepth", "10"], tmp_path).returncode == 0
    again = run(["queues", "retry", "--reason", "2053", "--dest", "APP.REPLY"], tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert b"put back 2 of 2" in again.stderr
    rest = run(["queues", "retry"], tmp_path)
    assert rest.returncode == 1
    assert b"to APP.REPLY@QM9" in rest.stdout and b"MQRC_UNKNOWN_REMOTE_Q_MGR again" in rest.stdout
    assert b"to NO.SUCH.Q" in rest.stdout and b"MQRC_UNKNOWN_OBJECT_NAME again" in rest.stdout

    with LocalQueueManager(tmp_path / ".mqgather" / "qm.db") as qm:
        delivered = [m for m in qm.browse("APP.REPLY") if m.body != b"filler"]
        left = list(qm.browse(DEAD_LETTER_QUEUE))
    assert [m.body for m in delivered] == [b"full one", b"full two"]
    assert {(m.format, m.coded_char_set_id, m.user_identifier) for m in delivered} == {
        ("MQSTR", 500, "requester1")
    }
    assert [m.correl_id[:8] for m in delivered] == [b"full one", b"full two"]
    # The two refused again are there once each, as they were; the plain one untouched.
    assert len(left) == 3 and left[-1].body == b"plain"
    assert sorted(undead(m)[1].body for m in left[:2]) == [b"no route", b"unknown"]


def test_a_put_for_another_queue_manager_waits_on_the_transmission_queue_named_after_it(
    tmp_path,
):
    assert run(["queues", "define", "QM9", "--usage", "xmitq"], tmp_path).returncode == 0
    put = run(["queues", "put", "APP.REPLY", "--to-qmgr", "QM9", "--body", "für QM9"], tmp_path)
    assert put.returncode == 0, put.stderr
    listed = [json.loads(line) for line in
              run(["queues", "list", "QM9", "--json"], tmp_path).stdout.splitlines()]  # fmt: skip
    assert [(q["usage"], q["curdepth"]) for q in listed] == [("xmitq", 1)]
    shown = json.loads(run(["queues", "browse", "QM9", "--json"], tmp_path).stdout)
    header = shown["transmission_header"]
    assert (header["remote_q_name"], header["remote_q_mgr_name"]) == ("APP.REPLY", "QM9")
    assert header["message"]["msg_id"] == put.stdout.decode().strip()
    assert (shown["format"], shown["body"]) == ("MQXMIT", "für QM9")
    listed_plain = run(["queues", "browse", "QM9"], tmp_path).stdout.decode()
    assert "for APP.REPLY@QM9" in listed_plain and "'für QM9'" in listed_plain
    nowhere = run(["queues", "put", "APP.REPLY", "--to-qmgr", "QM7", "--body", "x"], tmp_path)
    assert nowhere.returncode != 0 and b"MQRC_UNKNOWN_REMOTE_Q_MGR" in nowhere.stderr


def test_a_wait_mq_would_refuse_is_refused_not_taken_for_ever(tmp_path):
    # MQGET takes 0 to 2**31-1 ms or MQWI_UNLIMITED (-1); anything else is
    # MQRC_WAIT_INTERVAL_ERROR, not a wait without end.
    assert run(["queues", "define", "APP.Q"], tmp_path).returncode == 0
    done = run(["queues", "get", "APP.Q", "--wait", "-5"], tmp_path)
    assert done.returncode == 2
    assert b"Invalid value for '--wait': -5 is not in the range -1<=x<=2147483647" in done.stderr
    empty = run(["queues", "get", "APP.Q", "--wait", "10"], tmp_path)
    assert empty.returncode == 2 and b"MQRC_NO_MSG_AVAILABLE" in empty.stderr


def test_a_queue_name_mq_does_not_allow_is_refused(tmp_path):
    done = run(["queues", "define", "BAD NAME"], tmp_path)
    assert done.returncode != 0
    assert b"MQRCCF_OBJECT_NAME_ERROR" in done.stderr and b"' '" in done.stderr
    assert b"BAD NAME" not in run(["queues", "list"], tmp_path).stdout
