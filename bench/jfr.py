"""Where the Spark JVM spends its CPU: Java Flight Recorder samples of a piece of work,
sorted by the area of code on their stacks.

The JVM must run with :data:`JAVA_OPTIONS` (deeper stacks than JFR's default of 64, so
a sample deep in the JSON parser still shows the operator above it) and ``jcmd`` must be
on the PATH (it comes with the JDK). A sample counts for the first area of :data:`CALLERS`
whose code is anywhere on its stack (so a JSON parse inside ``from_json`` counts as
``from_json``), else for the area of :data:`NEAREST` whose code is nearest its top.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Frames kept per sample, recorded and read back: deep enough for Spark's stacks.
STACK_DEPTH = 512
#: The driver's options: that depth, and exact line tables for the JIT-compiled code the
#: samples land in.
JAVA_OPTIONS = (
    f"-XX:FlightRecorderOptions=stackdepth={STACK_DEPTH} -XX:+UnlockDiagnosticVMOptions "
    "-XX:+DebugNonSafepoints"
)

#: Areas that a sample counts for when their code is anywhere on its stack (what they
#: call, JSON parsing included, is theirs), first match first.
CALLERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("from_json of a payload (JsonToStructs)", ("JsonToStructs",)),
    ("base64 decoding", ("UnBase64", "Base64$Decoder")),
    ("string search (contains)", ("UTF8String.contains",)),
)
#: The other areas: a sample counts for the one whose code is nearest its top.
NEAREST: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reading the files' lines", ("LineReader", "LineRecordReader")),
    ("JSON parsing of the files (Jackson, Spark's converters)",
     ("JacksonParser", "com.fasterxml.jackson")),
    ("rows written in Spark's row format outside whole-stage code generation (the "
     "scan's copy of each parsed line, a projection that falls back)",
     ("SpecificUnsafeProjection",)),
    ("the cache (columnar batches)", (".columnar.", "InMemoryRelation", "CachedBatch")),
    ("Parquet writing", (".parquet.",)),
    ("shuffle and sort", ("ShuffleWriter", "ExternalSorter", "ShuffleExternalSorter",
                          ".shuffle.sort.")),
    ("generated code of the projections and aggregations", ("GeneratedClass",)),
)  # fmt: skip
OTHER = "other JVM work (scheduling, the task's own loop)"


@dataclass
class Profile:
    """Samples of one piece of work, by area."""

    samples: int
    by_area: Counter[str]

    def lines(self) -> list[str]:
        """A line per area: its share of the samples, largest first."""
        total = self.samples or 1
        return [f"    {100 * n / total:5.1f} %  {area}" for area, n in self.by_area.most_common()]


def area_of(frames: Sequence[str]) -> str:
    """The area a sample counts for, from its frames (``class.method``, top first)."""
    for area, marks in CALLERS:
        if any(mark in frame for frame in frames for mark in marks):
            return area
    for frame in frames:
        for area, marks in NEAREST:
            if any(mark in frame for mark in marks):
                return area
    return OTHER


def classify(stacks: Iterable[Sequence[str]]) -> Profile:
    """The samples' areas."""
    by_area = Counter(area_of(frames) for frames in stacks)
    return Profile(sum(by_area.values()), by_area)


def _stacks(recording: Path) -> list[list[str]]:
    """The executor threads' sampled stacks of a recording, as ``class.method`` frames."""
    printed = subprocess.run(
        ["jfr", "print", "--json", "--stack-depth", str(STACK_DEPTH),
         "--events", "jdk.ExecutionSample", str(recording)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    stacks = []
    for event in json.loads(printed)["recording"]["events"]:
        values = event["values"]
        thread = (values.get("sampledThread") or {}).get("javaName") or ""
        if not thread.startswith("Executor task"):
            continue  # the driver's own threads: planning, not the work measured
        frames = values["stackTrace"]["frames"] if values.get("stackTrace") else []
        stacks.append(
            [
                f"{f['method']['type']['name'].replace('/', '.')}.{f['method']['name']}"
                for f in frames
            ]
        )
    return stacks


def available() -> str | None:
    """None when the JDK's tools are here; else what is missing."""
    missing = [tool for tool in ("jcmd", "jfr") if shutil.which(tool) is None]
    return f"{', '.join(missing)} not on the PATH (they come with the JDK)" if missing else None


def record(pid: int, work: Callable[[], object]) -> Profile:
    """Run ``work`` while the JVM ``pid`` records, and sort its executors' samples.

    Raises:
        subprocess.CalledProcessError: ``jcmd`` or ``jfr`` failed (its stderr says why).
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "work.jfr"
        name = f"bench-{os.getpid()}"
        jcmd = ["jcmd", str(pid)]
        subprocess.run([*jcmd, "JFR.start", f"name={name}", "settings=profile",
                        f"filename={out}"], capture_output=True, check=True)  # fmt: skip
        try:
            work()
        finally:
            subprocess.run([*jcmd, "JFR.stop", f"name={name}"], capture_output=True, check=True)
        return classify(_stacks(out))
