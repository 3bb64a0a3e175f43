"""A process that dies by SIGKILL after a chosen step of its MQ work: each write its
embedded queue manager connections commit to the file is a step (through the IBM MQ
adapter over the stand-in too), and (through a client interceptor) each answer it has
from Temporal. A first run with no step chosen goes to its end (or, when it would run
for ever, as a bridge does, dies after its first commit) and names every step on the
way, so that a test can then kill one run after each."""

from __future__ import annotations

import contextlib
import functools
import json
import multiprocessing as mp
import os
import signal
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio import client as temporal
from temporalio.contrib.pydantic import pydantic_data_converter

from bridge.mq.hold import body_digest
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, fingerprint
from bridge.mq.transport import Transport
from mqgather.config import AggregateSpec
from mqgather.constants import GATHER_HOLD
from tests.activities.test_mq import drain
from tests.harness import THREE_LEGS, prepare_queues
from workflows.models import HeldBody, Reply

#: The name of the step a run with no step chosen dies after.
COMMIT = "queue manager: commit"
#: What a test puts on a fresh queue manager: the work's input, and the check of where
#: every message went once the work was done again.
Make = Callable[[LocalQueueManager], tuple[BaseModel, Callable[[LocalQueueManager], None]]]
Connect = Callable[[], Transport]
#: The transports a unit of work is killed on: the embedded queue manager, and the IBM MQ
#: adapter over the stand-in for IBM's library.
TRANSPORTS = ("embedded", "ibmmq-standin")
#: The queues a response of the sweeps' aggregate goes to.
OUT = ("OUT.A", "OUT.B")
#: The sweeps' aggregate: three legs, its response to both queues of OUT.
SPEC = AggregateSpec(name="steps", legs=THREE_LEGS, destination="destinationList",
                     destination_list=OUT)  # fmt: skip
#: Every queue a message could end on, but the ledger (which keeps a marker per PUT).
QUEUES = (*OUT, "GATHER.LATE", "GATHER.DUPLICATE", "GATHER.UNKNOWN", "GATHER.FAILURE",
          "GATHER.HOLD", "SYSTEM.DEAD.LETTER.QUEUE", "ORDER.RESPONSE")  # fmt: skip


#: Processes forked from a server that started afresh and imported what they run (a fork
#: of the test's own process would inherit its Temporal client's threads).
CTX = mp.get_context("forkserver")
CTX.set_forkserver_preload(["tests.crashing", "tests.e2e.test_crash_points",
                            "tests.activities.test_crash_points",
                            "tests.workers.test_crash_points",
                            "tests.bridge.mq.test_deadletters"])  # fmt: skip


class Steps:
    """Counts steps once ``armed``, writing each one's name to ``record``, and dies by
    SIGKILL after step ``die_after``; with none chosen, after the first step named
    ``end`` (a process that would run on for ever), or never when ``end`` is None."""

    def __init__(
        self, die_after: int | None, record: str, *, armed: bool = False, end: str | None = COMMIT
    ) -> None:
        self.die_after = die_after
        self.record = record
        self.count = 0
        self.armed = armed
        self.end = end

    def step(self, name: str) -> None:
        if not self.armed:
            return
        self.count += 1
        with open(self.record, "a") as out:
            out.write(f"{name}\n")
        if self.count == self.die_after or (self.die_after is None and name == self.end):
            os.kill(os.getpid(), signal.SIGKILL)


def step_names(record: Path) -> list[str]:
    """The steps a run named, in order."""
    return record.read_text().splitlines() if record.exists() else []


def kill_points(names: list[str]) -> list[int]:
    """The steps to kill a run after, of those a run to its end named (the last left out:
    that is the run to its end): each, but for the middle of a run of like steps (the
    IBM MQ adapter's MQGETs of one batch), after any of which a death leaves the same to
    back out as after the first or the last."""
    return [
        n
        for n in range(1, len(names))
        if not (1 < n < len(names) and names[n - 2] == names[n - 1] == names[n])
    ]


def run_to_death(
    target: Callable[..., None], args: tuple[Any, ...], die_after: int | None, record: Path,
    *, dies: bool = True,
) -> str:  # fmt: skip
    """Run ``target(*args, die_after, record)`` in a process of its own, which must die by
    SIGKILL (or, unless ``dies``, end by itself); which step it died after, said."""
    process = CTX.Process(target=target, args=(*args, die_after, str(record)))
    process.start()
    process.join(60)
    names = step_names(record)
    if die_after is None:
        where = f"the run to its end ({len(names)} steps)"
    else:
        where = f"step {die_after}: {names[die_after - 1] if die_after <= len(names) else '?'}"
    assert process.exitcode == (-signal.SIGKILL if dies else 0), f"{where}: {process.exitcode}"
    return f"killed after {where}"


class CountingQueueManager(LocalQueueManager):
    """The embedded queue manager, each write it commits a step named by the call that
    made it; the first get arms the count."""

    def __init__(self, path: str | Path, steps: Steps, **options: Any) -> None:
        self.steps = steps
        self.doing = "connect"
        super().__init__(path, **options)

    @contextlib.contextmanager
    def _write(self, read_only: bool = False) -> Iterator[Any]:
        with super()._write(read_only) as db:
            yield db
        # Opening the connection writes too (it backs out a dead one's work): not a step.
        if not read_only and self.doing != "connect":
            self.steps.step(f"queue manager: {self.doing}")

    def get_batch(self, *args: Any, **kwargs: Any) -> list[MQMessage]:
        self.steps.armed = True
        self.doing = "get_batch"
        return super().get_batch(*args, **kwargs)

    def get(self, queue: str, *args: Any, **kwargs: Any) -> MQMessage:
        # The IBM MQ adapter gets a batch one MQGET at a time.
        self.steps.armed = True
        self.doing = f"get from {queue}"
        return super().get(queue, *args, **kwargs)

    def put(self, queue: str, *args: Any, **kwargs: Any) -> MQMessage:
        self.doing = f"put to {queue}"
        return super().put(queue, *args, **kwargs)

    def commit(self) -> None:
        self.doing = "commit"
        super().commit()

    def backout(self) -> None:
        self.doing = "backout"
        super().backout()


async def counted_client(address: str, steps: Steps) -> temporal.Client:
    """A client of the Temporal server at ``address`` whose answered calls are steps."""
    return await temporal.Client.connect(
        address, data_converter=pydantic_data_converter, interceptors=[CountingCalls(steps)]
    )


class CountingCalls(temporal.Interceptor):
    """Counts each call to Temporal that was answered (an error is an answer too)."""

    def __init__(self, steps: Steps) -> None:
        self.steps = steps

    def intercept_client(self, next: temporal.OutboundInterceptor) -> temporal.OutboundInterceptor:
        return _CountingOut(next, self.steps)


class _CountingOut(temporal.OutboundInterceptor):
    def __init__(self, next: temporal.OutboundInterceptor, steps: Steps) -> None:
        super().__init__(next)
        self.steps = steps

    async def start_workflow(self, input: temporal.StartWorkflowInput) -> Any:
        try:
            return await super().start_workflow(input)
        finally:
            self.steps.step(f"Temporal: start {input.id} with {input.start_signal}")

    async def signal_workflow(self, input: temporal.SignalWorkflowInput) -> None:
        try:
            await super().signal_workflow(input)
        finally:
            self.steps.step(f"Temporal: signal {input.id}")

    async def query_workflow(self, input: temporal.QueryWorkflowInput) -> Any:
        try:
            return await super().query_workflow(input)
        finally:
            self.steps.step(f"Temporal: query {input.id}")

    async def describe_workflow(self, input: temporal.DescribeWorkflowInput) -> Any:
        try:
            return await super().describe_workflow(input)
        finally:
            self.steps.step(f"Temporal: describe {input.id}")


def connector(transport: str, path: str | Path, steps: Steps | None = None) -> Connect:
    """Connections to the embedded queue manager at ``path``: straight ("embedded"), or
    through the IBM MQ adapter over the stand-in for IBM's library ("ibmmq-standin");
    with ``steps``, each write the queue manager commits is one of them."""
    if transport == "embedded":
        if steps is None:
            return lambda: LocalQueueManager(path)
        return lambda: CountingQueueManager(path, steps)
    from tests.conftest import standin_connector
    from tests.mqi_standin import ibmmqc

    connect = standin_connector(Path(path))
    if steps is not None:
        # Every connection the stand-in opens on the file counts its writes.
        ibmmqc.LocalQueueManager = functools.partial(CountingQueueManager, steps=steps)  # type: ignore[misc,assignment]
    return connect


def each_step(
    tmp_path: Path, child: Callable[..., None], args: tuple[Any, ...], make: Make,
    again: Callable[[Connect, Any], object], *, transport: str = "embedded",
    extra: tuple[str, ...] = (), empty: tuple[str, ...] = (), ends: bool = True,
) -> None:  # fmt: skip
    """Kill ``child(*args, transport, path, input, die_after, record)`` after each step
    of its work in turn, each time on a fresh queue manager holding what ``make`` put
    there (and the ``extra`` queues); then do the work ``again(connect, input)`` in this
    process over the same ``transport``, as its retry or the next run would, and check
    where every message went: ``make``'s check, and every queue of ``empty`` left with
    nothing more. The first run goes to its end (dying after its commit when ``ends``)
    and names the steps."""

    def once(die_after: int | None) -> Path:
        path = tmp_path / f"qm-{die_after}.db"
        prepare_queues(path, extra)
        record = tmp_path / f"steps-{die_after}.txt"
        with LocalQueueManager(path) as qm:
            inp, check = make(qm)
        dies = ends or die_after is not None
        child_args = (*args, transport, str(path), inp.model_dump_json())
        where = run_to_death(child, child_args, die_after, record, dies=dies)
        try:
            again(connector(transport, path), inp)
        except Exception as exc:
            raise AssertionError(f"{where}: done again, it failed: {exc}") from exc
        with LocalQueueManager(path) as qm:
            try:
                check(qm)
            except AssertionError as exc:
                raise AssertionError(f"{where}: {exc}") from None
            left = {queue: len(drain(qm, queue)) for queue in empty}
            assert not any(left.values()), (where, left)
        return record

    names = step_names(once(None))
    assert len(names) >= 3 and (names[-1] == COMMIT or not ends), names
    for step in kill_points(names):
        once(step)


def reply(n: int, leg: str, hold_on: LocalQueueManager | None = None) -> Reply:
    """A reply of leg ``leg``, its body ``n`` KB; with ``hold_on``, one held on the
    default hold queue (put there and committed, as the bridge leaves it)."""
    message = MQMessage(msg_id=bytes([n]) * 24, correl_id=b"C" * 24,
                        body=f'{{"n": {n}, "pad": "{"x" * 1000 * n}"}}'.encode(),
                        properties={"leg": leg, "n": n})  # fmt: skip
    received = {"leg": leg, "source_queue": "GATHER.IN", "received_at": datetime.now(UTC)}
    if hold_on is None:
        return Reply(message=message, **received)
    hold_on.put(GATHER_HOLD, message)
    hold_on.commit()
    held = HeldBody(queue=GATHER_HOLD, msg_id=message.msg_id, correl_id=message.correl_id,
                    sha256=body_digest(message))  # fmt: skip
    bare = message.model_copy(update={"body": b"", "properties": {}})
    return Reply(message=bare, held=held, size=len(message.body),
                 fingerprint=fingerprint(message), **received)  # fmt: skip


def forwarded(where: dict[str, list[int]]) -> Callable[[LocalQueueManager], None]:
    """The check that each queue of ``where`` holds the replies numbered there, once each,
    whole, and that the hold queue is empty."""

    def check(qm: LocalQueueManager) -> None:
        for queue, numbers in where.items():
            got = drain(qm, queue)
            assert [(m.msg_id, m.properties.get("n")) for m in got] == [
                (bytes([n]) * 24, n) for n in numbers
            ], queue
            assert [json.loads(m.body)["n"] for m in got] == numbers, queue
        assert drain(qm, SPEC.hold_queue) == []

    return check
