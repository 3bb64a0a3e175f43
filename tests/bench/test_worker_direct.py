"""The direct worker bench's reading of traced counts (the bench itself is not a test)."""

from __future__ import annotations

from bench.worker_direct import ROOT, Traced, area, area_table, top_functions

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
