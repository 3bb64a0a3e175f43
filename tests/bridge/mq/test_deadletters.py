"""Dead letters put back where they were going, on every transport."""

from __future__ import annotations

from bridge.mq.deadletters import retry_dead_letters, undead
from bridge.mq.dlh import dead_letter
from bridge.mq.models import MQMessage, PutOptions


def test_undead_gives_back_the_message_as_it_was_before_its_header():
    sent = MQMessage(body=b"\xc8\xc5\xd3\xd3\xd6", format="MQSTR", coded_char_set_id=37,
                     encoding=785, correl_id=b"C" * 24, properties={"leg": "CREDIT"})  # fmt: skip
    header, back = undead(dead_letter(sent, 2053, "APP.REPLY", "QM1", "mqgather"))
    assert (header.reason, header.dest_q_name, header.dest_q_mgr_name) == (2053, "APP.REPLY", "QM1")
    assert back == sent


def test_a_chosen_dead_letter_moves_in_one_unit_of_work_and_a_refused_one_stays(
    connect, make_queue
):
    qm = connect()
    dlq, target = make_queue(qm), make_queue(qm, maxdepth=1)
    for body, reason in ((b"first", 2053), (b"second", 2053), (b"other", 2035)):
        letter = dead_letter(MQMessage(body=body), reason, target, qm.qmgr_name, "mqgather")
        qm.put(dlq, letter, PutOptions(set_all_context=True))
    qm.commit()
    seen = []
    report = retry_dead_letters(qm, dlq, reasons={2053}, each=seen.append)
    # The first fills the target (MAXDEPTH 1); the second is refused and stays.
    assert [r.fate for r in report.chosen] == [r.fate for r in seen] == ["put", "refused"]
    assert report.chosen[1].error is not None and report.chosen[1].error.reason == "MQRC_Q_FULL"
    assert report.passed_over == 1
    assert [m.body for m in qm.browse(target)] == [b"first"]
    left = list(qm.browse(dlq))
    assert [undead(m)[1].body for m in left] == [b"second", b"other"]
    assert left[0].backout_count == 1  # backed out once, as runmqdlq's retry would leave it
