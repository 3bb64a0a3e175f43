"""The bridge's fingerprint of a reply against the floor of the same reply's signal
payload: what telling a redelivery by content adds to the work the bridge does per reply
anyway (the platform's pydantic data converter encoding the reply for its signal).

Both are timed in one process, alternated round by round, on a typical reply (a short
JSON body, a leg and a trace property); the figure is their ratio, median and range.

    python -m bench.fingerprint [--rounds K] [--calls N]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from temporalio.contrib.pydantic import pydantic_data_converter

from bench.figures import command_line
from bridge.mq.models import MQMessage, fingerprint
from workflows.models import Reply, ReplyBatch


def _per_call_us(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1000


def main() -> None:
    """Time both, alternated, and print each round and the ratio."""
    parser = command_line(__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each")
    parser.add_argument("--calls", type=int, default=20_000, help="calls per round")
    args = parser.parse_args()
    now = datetime.now(UTC)
    message = MQMessage(
        msg_id=b"A" * 24, correl_id=b"C" * 24, put_date_time=now,
        properties={"leg": "CREDIT", "traceparent": f"00-{'a' * 32}-{'b' * 16}-01"},
        body=b'{"credit":{"ok":true,"limit":1000}}',
    )  # fmt: skip
    reply = Reply(message=message, leg="CREDIT", received_at=now, fingerprint=fingerprint(message))
    converter = pydantic_data_converter.payload_converter

    def ours() -> object:
        return fingerprint(message)

    def floor() -> object:
        return converter.to_payloads([ReplyBatch(replies=[reply])])

    _per_call_us(ours, args.calls // 10)  # warm both up
    _per_call_us(floor, args.calls // 10)
    ratios = []
    for round_ in range(1, args.rounds + 1):
        spent, base = _per_call_us(ours, args.calls), _per_call_us(floor, args.calls)
        ratios.append(spent / base)
        print(f"round {round_}: fingerprint {spent:.2f} µs, signal payload {base:.2f} µs, "
              f"ratio {spent / base:.2f}", flush=True)  # fmt: skip
    print(f"fingerprint / the reply's signal payload: {statistics.median(ratios):.2f} "
          f"({min(ratios):.2f} to {max(ratios):.2f}) over {args.rounds} rounds")  # fmt: skip


if __name__ == "__main__":
    main()
