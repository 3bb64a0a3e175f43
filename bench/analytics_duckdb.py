"""The gather facts computed by a single-node engine, DuckDB, from the same export files:
the reference the Spark job is set beside on one machine.

Per closed gather: its id and run, events, start and end, outcome, legs expected,
received and missing, completion time and each received leg's first arrival (ms from
the start), read from the same events and payloads as ``analytics.transforms``.
"""

from __future__ import annotations

import duckdb

from mqgather.names import GATHER_WORKFLOW, SIGNAL_REPLIES

_PAYLOADS = "STRUCT(payloads STRUCT(data VARCHAR)[])"
_EVENT = (
    "STRUCT(eventTime VARCHAR, eventType VARCHAR, "
    f"workflowExecutionStartedEventAttributes STRUCT(workflowType STRUCT(name VARCHAR), "
    f"input {_PAYLOADS}), "
    f"workflowExecutionSignaledEventAttributes STRUCT(signalName VARCHAR, input {_PAYLOADS}), "
    f"workflowExecutionCompletedEventAttributes STRUCT(result {_PAYLOADS}))"
)
_CLOSED = (
    "'EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED', 'EVENT_TYPE_WORKFLOW_EXECUTION_FAILED', "
    "'EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT', 'EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED', "
    "'EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED'"
)

FACTS = f"""
WITH h AS (
  SELECT workflowId, runId, history.events AS ev
  FROM read_json($files, format = 'newline_delimited', maximum_object_size = 268435456,
                 columns = {{workflowId: 'VARCHAR', runId: 'VARCHAR',
                            history: 'STRUCT(events {_EVENT}[])'}})
), base AS (
  SELECT workflowId AS gather_id, runId AS run_id, len(ev) AS events,
    list_filter(ev, lambda e: e.eventType = 'EVENT_TYPE_WORKFLOW_EXECUTION_STARTED')[1] AS s,
    list_filter(ev, lambda e: e.eventType IN ({_CLOSED}))[-1] AS c,
    list_filter(ev, lambda e: e.eventType = 'EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED'
                AND e.workflowExecutionSignaledEventAttributes.signalName = '{SIGNAL_REPLIES}')
      AS signals
  FROM h
), closed AS (
  SELECT gather_id, run_id, events,
    CAST(s.eventTime AS TIMESTAMP) AS start_time, CAST(c.eventTime AS TIMESTAMP) AS end_time,
    c.eventType AS close_type,
    decode(from_base64(c.workflowExecutionCompletedEventAttributes.result.payloads[1].data))
      AS r,
    signals
  FROM base
  WHERE s.workflowExecutionStartedEventAttributes.workflowType.name = '{GATHER_WORKFLOW}'
    AND c IS NOT NULL AND run_id IS NOT NULL
), arrivals AS (
  SELECT gather_id, run_id, unnest(json_extract_string(
           decode(from_base64(sig.workflowExecutionSignaledEventAttributes.input.payloads[1].data)),
           '$.replies[*].leg')) AS leg,
         CAST(sig.eventTime AS TIMESTAMP) AS arrived_at
  FROM (SELECT gather_id, run_id, unnest(signals) AS sig FROM closed)
), latency AS (
  SELECT a.gather_id, a.run_id,
    map(list(a.leg), list(epoch_us(a.first_at) - epoch_us(c.start_time))) AS leg_latency_us
  FROM (SELECT gather_id, run_id, leg, min(arrived_at) AS first_at FROM arrivals GROUP BY ALL) a
  JOIN closed c USING (gather_id, run_id)
  GROUP BY ALL
)
SELECT c.gather_id, c.run_id, c.events, c.start_time, c.end_time,
  CASE WHEN c.close_type = 'EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED'
       THEN json_extract_string(c.r, '$.state')
       ELSE replace(c.close_type, 'EVENT_TYPE_WORKFLOW_EXECUTION_', '') END AS outcome,
  CAST(json_extract(c.r, '$.legs_expected') AS VARCHAR[]) AS legs_expected,
  CAST(json_extract(c.r, '$.legs_received') AS VARCHAR[]) AS legs_received,
  CAST(json_extract(c.r, '$.legs_missing') AS VARCHAR[]) AS legs_missing,
  (epoch_us(c.end_time) - epoch_us(c.start_time)) / 1000.0 AS completion_ms,
  l.leg_latency_us
FROM closed c LEFT JOIN latency l USING (gather_id, run_id)
"""


def gather_facts(files: list[str], out: str) -> dict[str, int]:
    """Compute the facts of ``files`` into the Parquet file ``out``; gathers by outcome."""
    with duckdb.connect() as db:
        db.execute(f"COPY ({FACTS}) TO '{out}' (FORMAT parquet)", {"files": files})
        rows = db.execute(
            "SELECT outcome, count(*) FROM read_parquet($out) GROUP BY outcome", {"out": out}
        ).fetchall()
    return {str(outcome): int(n) for outcome, n in rows}
