"""The worker's cost per gather in two parts, measured in one process with nothing else
running beside it, each against the floor's same part:

- the workflow side: the SDK replaying a gather's recorded history (decoding its
  payloads, running the workflow code, encoding its commands, evicting it), against the
  same for the floor's workflow (``bench.trivial``'s TrivialLocal);
- the activity side: the merge and PUT of one gather on an embedded queue manager, its
  input decoded and its result encoded as the worker does, against the floor's local
  activity that does nothing.

CPU time of this process only, so the figures hold still from run to run where the whole
pipeline's do not (the server, the bridge and the worker share the cores there). What
the pipeline's worker spends beyond these two parts is the SDK's own machinery between
them (polling, the local activity's hand-offs, the Rust core) and contention.

    python -m bench.worker_parts GATHERS_DIR FLOOR_DIR   # histories as JSON files
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter
from temporalio.testing import ActivityEnvironment
from temporalio.worker import (
    Interceptor,
    Replayer,
    StartLocalActivityInput,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from activities.batch import CollectorActivities
from bench.figures import command_line
from bench.trivial import TrivialLocalWorkflow, nothing
from bridge.mq.admin import setup_queues
from bridge.mq.connect import open_transport
from mqgather.config import parse_config
from mqgather.runtime.codec import converter_from_env
from tests.activities.environment import attempt_env
from workflows.gather import GatherWorkflow
from workflows.models import PutResponseInput

#: Replays per measure: enough that a run's figure moves by a few percent at most.
REPLAYS = 1000


@dataclass
class Parts:
    """ms of CPU per gather (or floor workflow) of each part."""

    workflow: float
    workflow_floor: float
    activity: float
    activity_floor: float

    def lines(self) -> list[str]:
        """The parts as printed lines, each with its floor and the difference."""
        return [
            f"workflow side (replayed): gather {self.workflow:.2f} ms, floor "
            f"{self.workflow_floor:.2f} ms, +{self.workflow - self.workflow_floor:.2f} ms",
            f"activity side (merge + ledger + PUT, converted): gather {self.activity:.2f} ms, "
            f"floor {self.activity_floor:.2f} ms, +{self.activity - self.activity_floor:.2f} ms",
        ]


class _Capture(Interceptor):
    """Keeps the input of every local activity the replayed workflows start."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        kept = self.inputs

        class Outbound(WorkflowOutboundInterceptor):
            def start_local_activity(self, input: StartLocalActivityInput) -> Any:
                kept.extend(input.args)
                return super().start_local_activity(input)

        class Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(Outbound(outbound))

        return Inbound


async def _each(histories: Sequence[WorkflowHistory]) -> AsyncIterator[WorkflowHistory]:
    for history in histories:
        yield history


async def replay_cpu(
    workflow: type,
    converter: DataConverter,
    histories: Sequence[WorkflowHistory],
    interceptors: Sequence[Interceptor] = (),
) -> float:
    """ms of CPU per history to replay ``histories`` (each must replay cleanly)."""
    replayer = Replayer(
        workflows=[workflow],
        data_converter=converter,
        workflow_runner=UnsandboxedWorkflowRunner(),
        interceptors=interceptors,
    )
    start = time.process_time()
    async with replayer.workflow_replay_iterator(_each(histories)) as results:
        async for result in results:
            if result.replay_failure is not None:
                raise result.replay_failure
    return 1000 * (time.process_time() - start) / len(histories)


def _copies(histories: Sequence[WorkflowHistory], n: int) -> list[WorkflowHistory]:
    """``n`` histories cycling through ``histories``, each under a workflow id of its own."""
    return [WorkflowHistory(f"replay-{i}", histories[i % len(histories)].events) for i in range(n)]


def activity_cpu(inputs: Sequence[PutResponseInput], n: int) -> float:
    """ms of CPU per call of the merge and PUT on a fresh embedded queue manager (with the
    queues of the inputs' aggregates), its input decoded from a payload and its result
    encoded (each call a gather of its own, so the ledger lets every PUT through)."""
    converter = pydantic_data_converter.payload_converter
    payloads = [converter.to_payloads([inp])[0] for inp in inputs]
    # An attempt that started now, with a gather's timeout: the test default started in
    # 1970 with 1 s, past which every commit backs out.
    env = attempt_env()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"local:{tmp}/qm.db"
        qm = open_transport(url)
        aggregates = {i.aggregate.name: i.aggregate.model_dump() for i in inputs}
        setup_queues(qm, parse_config({"aggregates": aggregates}, "the gathers' inputs"))
        qm.close()
        acts = CollectorActivities(lambda: open_transport(url))

        def one(i: int) -> None:
            (inp,) = converter.from_payloads([payloads[i % len(payloads)]], [PutResponseInput])
            inp = inp.model_copy(update={"gather_id": f"{inp.gather_id}-{i}"})
            converter.to_payloads([env.run(acts.put_response, inp)])

        for i in range(20):
            one(n + i)  # the connection, the queues' pages
        start = time.process_time()
        for i in range(n):
            one(i)
        return 1000 * (time.process_time() - start) / n


def floor_activity_cpu(n: int) -> float:
    """ms of CPU per call of the floor's local activity, converted the same way."""
    converter = pydantic_data_converter.payload_converter
    payload = converter.to_payloads(["x"])[0]
    env = ActivityEnvironment()
    start = time.process_time()
    for _ in range(n):
        (value,) = converter.from_payloads([payload], [str])
        converter.to_payloads([env.run(nothing, value)])
    return 1000 * (time.process_time() - start) / n


async def measure(
    gathers: Sequence[WorkflowHistory],
    floors: Sequence[WorkflowHistory],
    replays: int = REPLAYS,
) -> Parts:
    """Both parts for these recorded gathers and floor workflows."""
    capture = _Capture()
    converter = converter_from_env()
    await replay_cpu(GatherWorkflow, converter, _copies(gathers, len(gathers)), [capture])
    await replay_cpu(TrivialLocalWorkflow, pydantic_data_converter, _copies(floors, 50))
    inputs = [i for i in capture.inputs if isinstance(i, PutResponseInput)]
    if not inputs:
        raise ValueError("the gathers' histories start no merge and PUT")
    return Parts(
        workflow=await replay_cpu(GatherWorkflow, converter, _copies(gathers, replays)),
        workflow_floor=await replay_cpu(
            TrivialLocalWorkflow, pydantic_data_converter, _copies(floors, replays)
        ),
        activity=activity_cpu(inputs, replays),
        activity_floor=floor_activity_cpu(replays),
    )


def _load(directory: Path) -> list[WorkflowHistory]:
    return [
        WorkflowHistory.from_json(path.stem, path.read_text())
        for path in sorted(directory.glob("*.json"))
    ]


def main() -> None:
    """Measure both parts for histories saved as JSON files."""
    parser = command_line(__doc__)
    parser.add_argument("gathers", type=Path, help="a folder of gather histories (JSON)")
    parser.add_argument("floors", type=Path, help="a folder of TrivialLocal histories (JSON)")
    parser.add_argument("--replays", type=int, default=REPLAYS,
                        help="replays and calls of each part")  # fmt: skip
    ns = parser.parse_args()
    parts = asyncio.run(measure(_load(ns.gathers), _load(ns.floors), ns.replays))
    print("\n".join(parts.lines()))


if __name__ == "__main__":
    main()
