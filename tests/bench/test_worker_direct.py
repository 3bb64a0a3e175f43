"""The direct worker bench's reading of traced counts (the bench itself is not a test)."""

from __future__ import annotations

import pytest

from bench.worker_direct import (
    ROOT,
    Sampled,
    Traced,
    area,
    area_table,
    native_area,
    native_table,
    native_top,
    top_functions,
)

SDK = "/venv/lib/python3.11/site-packages/temporalio"


def test_code_is_put_in_its_area_by_where_it_lives():
    assert area(f"{ROOT}workflows/logic.py:460:leg_status") == "mqgather: workflows/"
    assert area(f"{ROOT}bridge/mq/local_qm.py:485:put").startswith("mqgather: the MQ layer")
    # The SDK has a bridge package of its own: it is the SDK's, not mqgather's MQ layer.
    assert area(f"{SDK}/bridge/worker.py:292:visit_payload") == "SDK (temporalio)"
    assert area(f"{ROOT}.venv/lib/python3.11/site-packages/pydantic/main.py:1:x") == "pydantic"
    assert area("/usr/lib/python3.11/json/encoder.py:205:iterencode") == "json (stdlib)"
    assert area("/usr/lib/python3.11/enum.py:1:x") == "other"


def test_traced_counts_are_read_per_workflow_and_the_gathers_extra_found(tmp_path):
    lines = {
        "gather": [f"40\t0.004\t{ROOT}workflows/logic.py:1:rules", f"20\t0.002\t{SDK}/w.py:1:run"],
        "visible floor": [f"10\t0.001\t{SDK}/w.py:1:run"],
        "floor": [f"8\t0.001\t{SDK}/w.py:1:run"],
    }
    traced = {}
    for kind, rows in lines.items():
        (tmp_path / kind).write_text("\n".join(rows) + "\n")
        traced[kind] = Traced.read(tmp_path / kind, workflows=2)
    assert traced["gather"].per_area() == {
        "mqgather: workflows/": (20.0, 2.0),
        "SDK (temporalio)": (10.0, 1.0),
    }
    table = area_table(traced).splitlines()
    total = next(line for line in table if line.startswith("total"))
    # gather 30 calls / 3 ms per workflow, the visible floor 5 / 0.5: 25 / 2.5 more.
    assert total.split()[1:] == ["30", "/", "3.00", "5", "/", "0.50", "4", "/", "0.50",
                                 "25", "/", "2.50"]  # fmt: skip
    first = top_functions(traced["gather"], traced["visible floor"]).splitlines()[0]
    assert first.split()[:3] == ["+2.000", "ms", "20.0"] and "workflows/logic.py" in first


def test_sampled_code_is_put_in_the_area_of_the_shared_object_it_ran_in():
    site = "/venv/lib/python3.11/site-packages"
    assert native_area(f"{site}/pydantic_core/_pydantic_core.cpython-311-x86_64.so") == (
        "pydantic-core (Rust)"
    )
    # The path names python3.11, yet the object is the SDK's core, not the interpreter.
    assert native_area(f"{site}/temporalio/bridge/temporal_sdk_bridge.abi3.so") == (
        "SDK core (Rust)"
    )
    assert native_area("/usr/lib/libpython3.11.so.1.0") == "Python interpreter"
    assert native_area("/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64.so") == (
        "Python interpreter"
    )
    assert native_area("/usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6") == "SQLite"
    assert native_area("[kernel.kallsyms]") == "kernel"
    assert native_area("/usr/lib/x86_64-linux-gnu/libc.so.6") == "C library"
    assert native_area("/opt/libzstd.so.1") == "other native code"


def _script(pid: int, rows: list[tuple[str, str, int]]) -> str:
    """``perf script -F pid,ip,sym,dso`` lines: each (symbol, object, samples)."""
    return "".join(
        f"{pid:>6}  ffffffff8120{i:04x} {symbol} ({dso})\n"
        for i, (symbol, dso, n) in enumerate(rows)
        for _ in range(n)
    )


def test_a_process_samples_are_read_from_every_cpu_and_scaled_to_its_measured_cpu():
    lib = "/usr/lib/libpython3.11.so.1.0"
    pydantic = "/site-packages/pydantic_core/_pydantic_core.cpython-311-x86_64.so"
    kernel = "[kernel.kallsyms]"
    idle = _script(0, [("pv_native_safe_halt", kernel, 50)])
    busy = [("_PyEval_EvalFrameDefault", lib, 6), ("[unknown]", pydantic, 2),
            ("finish_task_switch.isra.0", kernel, 2)]  # fmt: skip
    other = [("_PyEval_EvalFrameDefault", lib, 3), ("do_syscall_64", kernel, 1)]
    script = idle + _script(41, busy) + _script(7, other)
    gather, visible = Sampled.read(script, 41), Sampled.read(script, 7)
    assert gather.ms(10.0, by_area=True) == {
        "Python interpreter": 6.0, "pydantic-core (Rust)": 2.0, "kernel": 2.0,
    }  # fmt: skip
    cpu = {"gather": 10.0, "visible floor": 4.0, "floor": 4.0}
    table = native_table({"gather": gather, "visible floor": visible, "floor": visible}, cpu)
    rows = {line[:24].strip(): line[24:].split() for line in table.splitlines()[1:]}
    # The gather's 6 ms in the interpreter against the visible floor's 3 of its 4.
    assert rows["Python interpreter"] == ["6.00", "3.00", "3.00", "+3.00"]
    assert rows["total"] == ["10.00", "4.00", "4.00", "+6.00"]
    assert next(iter(rows)) == "Python interpreter"  # the largest difference first
    top = native_top(gather, visible, cpu).splitlines()
    assert top[0].split() == ["+3.000", "ms", "Python", "interpreter:", "_PyEval_EvalFrameDefault"]
    assert any("pydantic-core (Rust): [unknown]" in line for line in top)


def test_no_sample_of_the_process_is_an_error_that_says_so():
    with pytest.raises(ValueError, match="no sample of process 41"):
        Sampled.read(_script(7, [("x", "[kernel.kallsyms]", 3)]), 41)
