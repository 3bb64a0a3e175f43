"""Parts of a chaos run shared by the chaos test and ``bench/chaos.py``: the stack as
processes that can be killed, a requester that consumes responses at once, and the
aggregate they serve."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from temporalio.client import Client

from bridge.mq.errors import NoMessageAvailable
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage
from mqgather.config import AggregateSpec, LegSpec
from mqgather.runtime.temporal import dev_server_args, require_temporal_cli
from tests.harness import free_ports

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip
SPEC = AggregateSpec(name="chaos", legs=LEGS, timeout_seconds=600)
#: Reply sizes of large gathers: one leg inline, two held (one of them megabytes).
LARGE = {"CREDIT": 2000, "STOCK": 300 * 1024, "TAX": 3 * 1024 * 1024}


class Requester:
    """Takes every response off the queue as soon as it is there, in its own thread."""

    def __init__(self, path: Path, queue: str) -> None:
        self.taken: list[MQMessage] = []
        #: When each response was taken (``time.monotonic``), in the order of ``taken``.
        self.taken_at: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(path, queue), daemon=True)
        self._thread.start()

    def _run(self, path: Path, queue: str) -> None:
        with LocalQueueManager(path) as qm:
            while not self._stop.is_set():
                try:
                    message = qm.get(queue, wait_ms=100, syncpoint=False)
                except NoMessageAvailable:
                    continue
                self.taken_at.append(time.monotonic())
                self.taken.append(message)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


class Stack:
    """The dev server, a worker and a bridge as processes that can be killed."""

    def __init__(self, tmp: Path, path: Path) -> None:
        binary = require_temporal_cli("run it through `make test` or `make bench`")
        self.port, ui_port = free_ports(2)
        self.server_args = [binary, *dev_server_args(str(tmp / "t.db"), self.port, ui_port),
                            "--headless"]  # fmt: skip
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
        config = tmp / "mqgather.toml"
        config.write_text(
            "[aggregates.chaos]\ntimeout_seconds = 600\n"
            'legs = [{name = "CREDIT", sequence = 10}, {name = "STOCK", sequence = 20}, '
            '{name = "TAX", sequence = 30}]\n'
        )
        self.env.update(TEMPORAL_ADDRESS=f"localhost:{self.port}", MQGATHER_MQ=f"local:{path}",
                        MQGATHER_CONFIG=str(config))  # fmt: skip
        self.task_queue = f"chaos-{uuid.uuid4().hex[:8]}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        #: The command that starts a part other than the server, where it is not
        #: mqgather's own (the floor's worker, in the chaos benchmark).
        self.commands: dict[str, list[str]] = {}
        self.logs = tmp

    def start(self, part: str) -> None:
        if part == "server":
            args = self.server_args
        else:
            args = self.commands.get(part) or [sys.executable, "-m", "mqgather.cli", part,
                                               "--task-queue", self.task_queue]  # fmt: skip
        log = open(self.logs / f"{part}.log", "ab")  # noqa: SIM115
        self.procs[part] = subprocess.Popen(args, env=self.env, stdout=log, stderr=log)

    def kill(self, part: str) -> None:
        proc = self.procs[part]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)


async def scatter_retrying(
    client: Client, qm: LocalQueueManager, correl: bytes, task_queue: str
) -> None:
    """Register a gather and put its leg requests, retrying while the server is down (a
    start it dropped is backed out, so a retry sends nothing twice)."""
    from bridge.fanout import ScatterError, scatter

    while True:
        try:
            await scatter(client, qm, SPEC, correl_id=correl, task_queue=task_queue)
            return
        except ScatterError:
            raise
        except Exception:  # noqa: BLE001  (a start it dropped, and connection errors)
            await asyncio.sleep(0.2)


def reply_body(leg: str, size: int) -> bytes:
    """A leg's JSON reply of about ``size`` bytes."""
    return json.dumps({"leg": leg, "pad": "x" * max(size - 30, 0)}).encode()


def put_replies(
    qm: LocalQueueManager, correl: bytes, sizes: dict[str, int] | None = None
) -> list[bytes]:
    """One reply per leg in one unit of work (of ``sizes[leg]`` bytes, "{}" without
    sizes); their MsgIds."""
    put = []
    for leg in LEGS:
        body = reply_body(leg.name, sizes[leg.name]) if sizes else b"{}"
        reply = MQMessage(correl_id=correl, properties={"leg": leg.name}, body=body)
        put.append(qm.put(SPEC.reply_queue, reply).msg_id)
    qm.commit()
    return put
