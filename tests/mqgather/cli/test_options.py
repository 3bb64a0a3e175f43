"""What the commands share: a salvage's progress, and how a command's event loop ends."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest


def test_a_long_salvage_tells_how_far_it_has_come(capsys):
    from mqgather.cli.options import with_progress

    checks = []
    check = with_progress(lambda: checks.append(1), "gather:a:00", every=0)
    for _ in range(3):
        check()
    told = capsys.readouterr().err.splitlines()
    assert len(checks) == 3
    assert [line.split(" (")[0] for line in told] == [
        f"gather:a:00: sending message {n}" for n in (1, 2, 3)]  # fmt: skip
    quiet = with_progress(lambda: None, "gather:a:00")  # every 2 s: not yet
    quiet()
    assert capsys.readouterr().err == ""


#: A worker process as `mqgather worker` runs it (``run`` around ``serve``), whose one
#: local activity (as the gather's MQ work is) makes a call that does not return, like a
#: PUT to a queue manager gone silent.
_HOLDING_WORKER = """
import asyncio, os, sys, threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from mqgather.cli.options import run
from workers.worker import WorkerStopped, serve

HELD = threading.Event()


@activity.defn
def hold() -> None:
    HELD.set()
    threading.Event().wait(300)


@workflow.defn
class Holding:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_local_activity(hold, start_to_close_timeout=timedelta(seconds=300))


async def main(stop):
    client = await Client.connect(sys.argv[1])
    queue = sys.argv[2]
    worker = Worker(client, task_queue=queue, workflows=[Holding], activities=[hold],
                    activity_executor=ThreadPoolExecutor(2),
                    workflow_runner=UnsandboxedWorkflowRunner())
    serving = asyncio.create_task(serve(worker, stop, grace=0.5))
    await client.start_workflow(Holding.run, id=queue, task_queue=queue)
    await asyncio.to_thread(HELD.wait, 60)
    print("holding", flush=True)
    await serving


try:
    run(main)
except WorkerStopped as exc:
    print(f"stopped: {exc}", flush=True)
os._exit(0)
"""


@pytest.mark.timeout(180)
async def test_a_worker_that_gives_up_on_its_activity_ends_its_process(temporal_env, tmp_path):
    """A local activity the SDK waits for until its own timeout (here 300 s): the process
    still ends at the worker's grace, its event loop not waiting for it again as it
    cancels what is left. The unit of work dies with the process and backs out."""
    script = tmp_path / "holding_worker.py"
    script.write_text(_HOLDING_WORKER)
    queue = f"holding-{uuid.uuid4().hex[:10]}"
    root = Path(__file__).resolve().parents[3]
    process = subprocess.Popen(
        [sys.executable, str(script), temporal_env.client.service_client.config.target_host,
         queue], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    try:
        said = await asyncio.to_thread(_read_until, process, "holding")
        process.send_signal(signal.SIGTERM)
        rest, _ = await asyncio.to_thread(process.communicate, timeout=30)
    finally:
        process.kill()
        await temporal_env.client.get_workflow_handle(queue).terminate("test over")
    assert "stopped: the worker had not stopped 0.5s after it was asked to" in said + rest


def _read_until(process: subprocess.Popen[str], text: str) -> str:
    """The process's output up to the line holding ``text`` (all of it if it ends first)."""
    seen = []
    assert process.stdout is not None
    for line in process.stdout:
        seen.append(line)
        if text in line:
            break
    return "".join(seen)
