"""An operator resets a closed gather or a collector (the Temporal UI's Reset,
``temporal workflow reset``): the run after the reset takes messages the run before never
had, or batches them otherwise; none may end in two places, or in none."""

from __future__ import annotations

import pytest

from bridge.mq.models import MQMessage, PutOptions
from mqgather.config import AggregateSpec
from tests.collecting import Collecting, collecting, order
from tests.conftest import standin_connector
from tests.harness import THREE_LEGS, pipeline, reset_to_first_task, status, until
from workflows.collect_models import collector_id
from workflows.models import GatherResult


async def _cancelled_then_reset(p, spec: AggregateSpec, correl: bytes, legs: list[str]):
    """Once the gather has ``legs``, cancel it (its partial goes to the timeout queue),
    then reset it; (its result, a handle on the run after the reset holding ``legs``)."""
    handle = p.handle(spec, correl)
    await until(lambda: status(handle), lambda s: s.legs_received == legs)
    await handle.cancel()
    before = await p.result(spec, correl)
    run = await reset_to_first_task(p.client, handle)
    after = p.client.get_workflow_handle(handle.id, run_id=run, result_type=GatherResult)
    await until(lambda: status(after), lambda s: s.legs_received == legs)
    return before, after


@pytest.mark.parametrize("over", ["embedded", "ibmmq"])
@pytest.mark.parametrize("size", [2, 4096], ids=["inline", "held"])
async def test_a_reply_a_reset_gather_takes_after_its_close_goes_late_not_into_a_second_final(
    temporal_env, tmp_path, size, over
):
    spec = AggregateSpec(name="reset", legs=THREE_LEGS, timeout_seconds=300,
                         inline_reply_bytes=1024)  # fmt: skip
    transport = (lambda path: standin_connector(path)) if over == "ibmmq" else None
    async with pipeline(temporal_env.client, tmp_path, [spec], transport=transport) as p:
        sent = await p.scatter(spec)
        p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}')
        p.reply(spec, sent.correl_id, "STOCK", b'{"s":1}')
        before, after = await _cancelled_then_reset(p, spec, sent.correl_id, ["CREDIT", "STOCK"])
        tax = p.reply(spec, sent.correl_id, "TAX", b'"' + b"t" * size + b'"')
        result = await after.result()
        partial = await p.wait_message("GATHER.TIMEOUT")
        late = await p.wait_message("GATHER.LATE")
        for queue in ("ORDER.RESPONSE", "GATHER.TIMEOUT", "GATHER.LATE", spec.hold_queue,
                      spec.reply_queue, "GATHER.FAILURE"):  # fmt: skip
            assert p.empty(queue), queue
    assert before.state == "CANCELLED" and partial.properties["mqgather_missing"] == "TAX"
    # The reset run took TAX, but the gather had answered: TAX goes where a reply after
    # the close goes, intact, and the gather's outcome stays the one it was answered as.
    assert (late.msg_id, late.body) == (tax.msg_id, tax.body)
    assert result.state == "CANCELLED" and "GATHER.LATE" in result.error


@pytest.mark.parametrize(
    ("duplicates", "leg"), [("first", "STOCK"), ("last", "CREDIT")], ids=["new-leg", "newer-reply"]
)
async def test_a_reset_gather_that_ends_as_it_did_still_sends_its_new_reply_late(
    temporal_env, tmp_path, duplicates, leg
):
    """The same outcome twice: the final's MsgId is the same, and before, the ledger took
    the second for a retry of the first, so the new reply went nowhere. With the policy
    "last", a newer CREDIT makes the one the partial carried a duplicate: that one is not
    copied to the duplicate queue as well."""
    spec = AggregateSpec(name="resetsame", legs=THREE_LEGS, timeout_seconds=300,
                         duplicates=duplicates)  # fmt: skip
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}')
        _, after = await _cancelled_then_reset(p, spec, sent.correl_id, ["CREDIT"])
        new = p.reply(spec, sent.correl_id, leg, b'{"n":2}')
        await until(lambda: status(after), lambda s: len(s.legs_received) + s.duplicates == 2)
        await after.cancel()
        result = await after.result()
        partial = await p.wait_message("GATHER.TIMEOUT")
        late = await p.wait_message("GATHER.LATE")
        for queue in ("ORDER.RESPONSE", "GATHER.TIMEOUT", "GATHER.LATE", spec.duplicate_queue,
                      spec.reply_queue):  # fmt: skip
            assert p.empty(queue), queue
    assert b'"c"' in partial.body and b'"n"' not in partial.body
    assert (late.msg_id, late.body) == (new.msg_id, new.body)
    assert result.state == "CANCELLED"


async def _reset_then_put(c: Collecting, messages: int) -> list[str]:
    """Reset France's collector; once its run after the reset has ``messages`` and
    nothing open or waiting, the orders in every batch put, in order (the queue emptied)."""
    handle = c.client.get_workflow_handle(collector_id(c.spec.name, "France"))
    await reset_to_first_task(c.client, handle)
    await until(lambda: c.status("France"),
                lambda s: s.messages == messages and s.open_messages == s.waiting_to_put == 0,
                timeout=30)  # fmt: skip
    texts = []
    while c.depth("CMAOUT.FR"):
        body = (await c.take("CMAOUT.FR")).body.decode()
        texts += [part.split("</Test>")[0] for part in body.split("<Test>")[1:]]
    return texts


async def test_a_reset_collector_puts_what_the_run_before_had_not_put_once(temporal_env, tmp_path):
    """B waits in an open batch when the collector is reset. The run after the reset takes
    A and B into one batch, numbered as A's was: before, the ledger took it for A's batch
    and B was never put."""
    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("France", "CMAOUT.FR", max_messages=100, max_delay_seconds=3)
        c.send("France", order("A"))
        await until(lambda: c.status("France"), lambda s: s.batches == 1, timeout=30)
        c.send("France", order("B"))
        await until(lambda: c.status("France"), lambda s: s.open_messages == 1)
        texts = await _reset_then_put(c, 2)
        assert c.depth("CMAIN") == 0
    assert sorted(texts) == ["A", "B"]


async def test_a_reset_collector_puts_nothing_the_run_before_put(temporal_env, tmp_path):
    """A went alone (its delay), B and C together (the count). After a reset, A and B
    fill one batch and C goes in the next, numbered as B's was: before, C was put again."""
    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("France", "CMAOUT.FR", max_messages=2, max_delay_seconds=1)
        c.send("France", order("A"))
        await until(lambda: c.status("France"), lambda s: s.batches == 1, timeout=30)
        for text in ("B", "C"):  # one unit of work: the bridge gets them in one batch
            message = MQMessage(properties={"destination": "France"}, body=order(text))
            c.qm.put(c.spec.input_queue, message, PutOptions(syncpoint=True))
        c.qm.commit()
        await until(lambda: c.status("France"), lambda s: s.batches == 2, timeout=30)
        texts = await _reset_then_put(c, 3)
    assert texts == ["A", "B", "C"]
