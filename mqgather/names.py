"""Names that separate processes, recorded histories and operators' tools must agree on.

Temporal: the task queue, the workflow type, its signals, updates, query and
activities, and the search attributes. The environment variables mqgather reads. The
MQ message properties mqgather writes or reads. Change a Temporal name only with a new
workflow version: recorded histories carry it.
"""

from temporalio.common import SearchAttributeKey

# ------------------------------------------------------------------ Temporal
TASK_QUEUE = "mqgather"
GATHER_WORKFLOW = "Gather"
#: Every gather's workflow id starts with this: ``gather:<aggregate>:<CorrelId hex>``.
GATHER_ID_PREFIX = "gather:"

SIGNAL_EXPECT = "expect"
SIGNAL_REPLIES = "replies"
SIGNAL_UNDELIVERED = "undelivered"
QUERY_STATUS = "status"
QUERY_CONSUMED = "consumed"
#: Which messages, by key (MsgId and fingerprint: workflows.redelivery), were taken.
QUERY_TAKEN = "taken"
#: The replies a gather holds that are in no place yet (for one that ended unanswered).
QUERY_UNPLACED = "unplaced"
UPDATE_RELEASE = "release"
UPDATE_EXTEND = "extend"
UPDATE_CANCEL = "cancel"
UPDATE_REREQUEST = "rerequest"
ACTIVITY_PUT_RESPONSE = "put_response"
ACTIVITY_ROUTE_REPLIES = "route_replies"
ACTIVITY_SEND_REQUEST = "send_request"
ACTIVITY_HOLD_REPLIES = "hold_replies"
#: The collector: one workflow per collector and destination.
COLLECT_WORKFLOW = "Collect"
SIGNAL_COLLECT = "collect"
ACTIVITY_PUT_BATCH = "put_batch"
#: One salvage of a workflow at a time: a lease is a run of this type under
#: ``salvage:<workflow id>`` on a task queue no worker polls (workers.lease).
SALVAGE_LEASE_WORKFLOW = "SalvageLease"
SALVAGE_LEASE_QUEUE = "mqgather-salvage-leases"
SALVAGE_LEASE_PREFIX = "salvage:"

#: Patch: before a collector continues as new it waits for one server event, so a signal
#: racing it is taken (gathers carry the same step in their input; see workflows.settling).
PATCH_SETTLE = "settle-before-close"
#: Patch: a redelivery is the same MsgId and content; another message that reuses a
#: MsgId is taken (collectors recorded before tell by MsgId alone; gathers carry the
#: same step in their input).
PATCH_BY_CONTENT = "redelivery-by-content"
#: Patch: a collector's batch closes before its messages outgrow what its PUT's input
#: carries (BATCH_CARRIED_BYTES); collectors recorded before count bodies alone.
PATCH_BATCH_CARRIED = "batch-carried-bytes"
#: Patch: a collector whose state outgrew a payload while it settled PUTs its closed
#: batches before it continues as new (collectors recorded before carried them).
PATCH_CARRY_FITS = "carry-within-payload"

AGGREGATE_NAME = SearchAttributeKey.for_keyword("AggregateName")
CORREL_ID = SearchAttributeKey.for_keyword("CorrelId")
GATHER_STATE = SearchAttributeKey.for_keyword("GatherState")
LEGS_PENDING = SearchAttributeKey.for_int("LegsPending")
LEGS_RECEIVED = SearchAttributeKey.for_int("LegsReceived")
#: The CorrelId as text when it is printable ASCII (trailing NULs dropped); matched
#: exactly, case included. ``CorrelId`` is always the 48 lower-case hex digits.
CORREL_ID_TEXT = SearchAttributeKey.for_keyword("CorrelIdText")
LEGS_MISSING = SearchAttributeKey.for_keyword_list("LegsMissing")
GATHER_DEADLINE = SearchAttributeKey.for_datetime("GatherDeadline")
#: Legs whose request a gather sent again (set once it has re-requested one).
LEGS_REREQUESTED = SearchAttributeKey.for_keyword_list("LegsRerequested")
COLLECTOR_NAME = SearchAttributeKey.for_keyword("CollectorName")
COLLECT_DESTINATION = SearchAttributeKey.for_keyword("CollectorDestination")
BATCH_SIZE = SearchAttributeKey.for_int("BatchSize")
BATCH_CLOSES_AT = SearchAttributeKey.for_datetime("BatchClosesAt")
#: Temporal's own search attributes for worker versioning (the version is
#: ``<deployment>:<build id>``; the behavior ``Pinned`` or ``AutoUpgrade``).
SA_DEPLOYMENT_VERSION = "TemporalWorkerDeploymentVersion"
SA_VERSIONING_BEHAVIOR = "TemporalWorkflowVersioningBehavior"
#: Counted by the gather workflow through the Temporal SDK's metrics (Prometheus name).
METRIC_GATHERS_STARTED = "mqgather_gathers_started"
#: Registered on the namespace by the worker and the dev server.
SEARCH_ATTRIBUTES = (
    AGGREGATE_NAME,
    CORREL_ID,
    CORREL_ID_TEXT,
    GATHER_STATE,
    LEGS_PENDING,
    LEGS_RECEIVED,
    LEGS_MISSING,
    GATHER_DEADLINE,
    LEGS_REREQUESTED,
    COLLECTOR_NAME,
    COLLECT_DESTINATION,
    BATCH_SIZE,
    BATCH_CLOSES_AT,
)

# ----------------------------------------------------- environment variables
ENV_MQ = "MQGATHER_MQ"
ENV_CONFIG = "MQGATHER_CONFIG"
ENV_MQ_USER = "MQGATHER_MQ_USER"
ENV_MQ_PASSWORD = "MQGATHER_MQ_PASSWORD"
ENV_MQ_PASSWORD_FILE = "MQGATHER_MQ_PASSWORD_FILE"
#: The password of the TLS key repository (a PKCS#12 or CMS file), or a file holding it.
ENV_MQ_KEYREPO_PASSWORD = "MQGATHER_MQ_KEYREPO_PASSWORD"
ENV_MQ_KEYREPO_PASSWORD_FILE = "MQGATHER_MQ_KEYREPO_PASSWORD_FILE"
ENV_IBMMQ_TEST = "MQGATHER_IBMMQ_TEST"
ENV_OTEL = "MQGATHER_OTEL"
ENV_METRICS_PORT = "MQGATHER_METRICS_PORT"
ENV_METRICS_HOST = "MQGATHER_METRICS_HOST"
#: Worker versioning: the worker deployment and this worker's build id.
ENV_DEPLOYMENT = "MQGATHER_DEPLOYMENT"
ENV_BUILD_ID = "MQGATHER_BUILD_ID"
ENV_MAX_CACHED_GATHERS = "MQGATHER_MAX_CACHED_GATHERS"
ENV_HELD_MB = "MQGATHER_HELD_MB"
#: Payload encryption: the key ring as JSON, or the path of a file holding it.
ENV_KEYS = "MQGATHER_KEYS"
ENV_KEYS_FILE = "MQGATHER_KEYS_FILE"
#: The codec server's bearer token, or the path of a file holding it.
ENV_CODEC_TOKEN = "MQGATHER_CODEC_TOKEN"
ENV_CODEC_TOKEN_FILE = "MQGATHER_CODEC_TOKEN_FILE"
#: Temporal's own client settings, which mqgather honours and sets for its children.
ENV_TEMPORAL_ADDRESS = "TEMPORAL_ADDRESS"
ENV_TEMPORAL_NAMESPACE = "TEMPORAL_NAMESPACE"
ENV_TEMPORAL_CONFIG_FILE = "TEMPORAL_CONFIG_FILE"
#: gRPC compression of mqgather's own Temporal clients: none (default) or gzip.
ENV_GRPC_COMPRESSION = "MQGATHER_GRPC_COMPRESSION"

# ------------------------------------------------------ MQ message properties
#: PutApplName in the MQDLH of what mqgather puts on the dead-letter queue.
APPL_NAME = "mqgather"
#: Names the aggregate when several share one reply queue (written by scatter).
PROP_AGGREGATE = "aggregate"
#: Why a message was moved, from which queue, by which gather, after how many backouts.
PROP_REASON = "mqgather_reason"
PROP_SOURCE_QUEUE = "mqgather_source_queue"
PROP_GATHER_ID = "mqgather_gather_id"
PROP_BACKOUT_COUNT = "mqgather_backout_count"
#: On a response: the gather's outcome, the legs it used and those it missed.
PROP_STATE = "mqgather_state"
PROP_MISSING = "mqgather_missing"
PROP_USED = "mqgather_used"
#: On a response: the legs whose request the gather sent again (absent when none).
PROP_REREQUESTED = "mqgather_rerequested"
#: On a re-request: which request of the leg it is (2 for the first re-request).
PROP_ATTEMPT = "mqgather_attempt"
#: On a collector's batch: its destination, how many messages, why it closed.
PROP_DESTINATION = "mqgather_destination"
PROP_BATCH_SIZE = "mqgather_batch_size"
PROP_BATCH_REASON = "mqgather_batch_reason"
#: On each part of a batch longer than its target queue's MAXMSGL, put as several
#: messages: which part (from 1) and how many (absent on a batch put whole).
PROP_BATCH_PART = "mqgather_batch_part"
PROP_BATCH_PARTS = "mqgather_batch_parts"
#: W3C trace context, as IBM MQ's own instrumentation carries it.
PROP_TRACEPARENT = "traceparent"
PROP_TRACESTATE = "tracestate"
TRACE_PROPERTIES = (PROP_TRACEPARENT, PROP_TRACESTATE)
