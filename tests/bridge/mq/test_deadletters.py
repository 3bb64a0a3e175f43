"""Dead letters put back where they were going, on every transport."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from bridge.mq.deadletters import retry_dead_letters, undead
from bridge.mq.dlh import dead_letter
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, PutOptions
from mqgather.constants import DEAD_LETTER_QUEUE
from tests.activities.test_mq import drain
from tests.crashing import OUT, TRANSPORTS, Connect, Steps, connector, each_step


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


class _Letters(BaseModel):
    """Where the dead letters of a crash-point run wait."""

    queue: str = DEAD_LETTER_QUEUE


def _retry_dying_after(transport: str, path: str, letters: str, die_after: int | None,
                       record: str) -> None:  # fmt: skip
    # With no step chosen it runs to its end: a retry commits once per dead letter.
    steps = Steps(die_after, record, armed=True, end=None)
    queue = _Letters.model_validate_json(letters).queue
    retry_dead_letters(connector(transport, path, steps)(), queue)


def _dead_letters(qm: LocalQueueManager) -> tuple[BaseModel, Callable[[LocalQueueManager], None]]:
    """Two dead letters for OUT.A, one of them in EBCDIC with a NaN property; and the
    check that each is there once, as it was before its header."""
    sent = [MQMessage(body=b"first", properties={"n": 1}),
            MQMessage(body=b"\xc8\xc5\xd3\xd3\xd6", coded_char_set_id=37, encoding=785,
                      properties={"n": 2, "score": math.nan})]  # fmt: skip
    for message in sent:
        letter = dead_letter(message, 2053, OUT[0], qm.qmgr_name, "mqgather")
        qm.put(DEAD_LETTER_QUEUE, letter, PutOptions(set_all_context=True))
    qm.commit()

    def check(qm: LocalQueueManager) -> None:
        got = drain(qm, OUT[0])
        assert [(m.body, m.coded_char_set_id) for m in got] == [
            (m.body, m.coded_char_set_id) for m in sent
        ]
        score = got[1].properties["score"]
        assert isinstance(score, float) and math.isnan(score)

    return _Letters(), check


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_retry_killed_after_any_write_is_finished_by_the_next_each_letter_once(
    tmp_path, transport: str
):
    def again(connect: Connect, letters: Any) -> object:
        transport = connect()
        try:
            return retry_dead_letters(transport, letters.queue)
        finally:
            transport.close()

    each_step(tmp_path, _retry_dying_after, (), _dead_letters, again, transport=transport,
              extra=OUT, empty=(DEAD_LETTER_QUEUE, *OUT), ends=False)  # fmt: skip
