"""Where a process's CPU goes: py-spy samples it while a measure runs, and each sample
is put in one share by the code on its stack.

A sample's share is the first in ``SHARES`` whose marks appear anywhere on its stack, so
a pydantic validation inside the merge counts as the merge, and one inside the SDK's
payload conversion as model validation and serialisation. Idle samples (the event loop
waiting) are not taken.

    python -m bench.profile collapsed.txt   # the shares of a py-spy raw file, in percent
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

#: (share, marks in a frame's "function (file:line)" text), in order of precedence.
SHARES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("merge (activities/merge.py)", ("(activities/merge.py",)),
    (
        "ledger check and MQ PUT/GET (activities/mq.py, bridge/mq)",
        ("(activities/mq.py", "(bridge/mq/", "sqlite3"),
    ),
    (
        "search attributes and current details",
        ("_publish (", "upsert_search_attributes", "set_current_details"),
    ),
    ("logging and telemetry", ("opentelemetry", "/logging/", "metric_meter", "/prometheus")),
    (
        "model validation and serialisation (pydantic, payload conversion)",
        ("pydantic", "temporalio/converter.py", "json/", "/codec.py"),
    ),
    ("bridge: reading, checking and signalling replies (bridge/)", ("(bridge/",)),
    ("workflow rules and handlers (workflows/)", ("(workflows/",)),
    ("SDK: activations, commands, protobuf (temporalio)", ("temporalio",)),
)
OTHER = "other Python (event loop, threads, CLI)"
NATIVE = "native threads, not sampled (the SDK's Rust core: gRPC, protobuf, its own work)"


def shares(raw: str) -> dict[str, int]:
    """Samples per share from py-spy's raw (collapsed) output: ``frame;frame;... count``."""
    counts: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        share = next((name for name, marks in SHARES if any(m in stack for m in marks)), OTHER)
        counts[share] += int(n)
    return dict(counts.most_common())


def table(counts: dict[str, int], cpu_ms: float, per_sample_ms: float) -> str:
    """Each share in ms per gather and percent of ``cpu_ms``, the process's CPU per
    gather; a sample holding the GIL stands for ``per_sample_ms`` of it, and what the
    samples do not cover ran in native threads."""
    rows = {name: n * per_sample_ms for name, n in counts.items()}
    rows[NATIVE] = max(0.0, cpu_ms - sum(rows.values()))
    return "\n".join(
        f"  {ms:6.2f} ms  {100 * ms / cpu_ms if cpu_ms else 0:5.1f} %  {name}"
        for name, ms in sorted(rows.items(), key=lambda kv: -kv[1])
    )


class Sampler:
    """py-spy attached to one process until ``stop``."""

    def __init__(self, pid: int, out: Path, rate: int = 250) -> None:
        binary = shutil.which("py-spy")
        if binary is None:
            raise FileNotFoundError("py-spy is not installed (pip install -e '.[dev]')")
        self.out = out
        self.rate = rate
        # --gil: only the thread running Python code is sampled, so a sample is CPU time
        # spent in Python (idle threads and native threads are not).
        args = [binary, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
                "--gil", "--output", str(out)]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> dict[str, int]:
        """Stop sampling; the samples per share."""
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=60)
        if not self.out.exists():
            raise RuntimeError(f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}")
        return shares(self.out.read_text())


if __name__ == "__main__":
    found = shares(Path(sys.argv[1]).read_text())
    total = sum(found.values()) or 1
    print("\n".join(f"  {100 * n / total:5.1f} %  {name}" for name, n in found.items()))
