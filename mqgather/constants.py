"""Defaults: the state directory, the queue manager's defaults and the demo's queues.

Names shared with other processes (task queue, signals, environment variables,
message properties) are in :mod:`mqgather.names`.
"""

# Embedded defaults: everything lives under one state directory.
STATE_DIR = ".mqgather"
DEFAULT_MQ = f"local:{STATE_DIR}/qm.db"
DEFAULT_CONFIG_FILE = "mqgather.toml"

#: The characters an MQ object name (a queue's, a queue manager's) may hold, as a regex
#: character range: A-Z, a-z, 0-9, period, forward slash, underscore and percent.
MQ_NAME_CHARACTERS = "A-Za-z0-9._/%"
#: MQ_Q_NAME_LENGTH and MQ_Q_MGR_NAME_LENGTH: the longest queue or queue manager name.
MQ_NAME_LENGTH = 48

# Queue manager defaults (the values of a freshly created IBM MQ queue manager).
DEFAULT_QMGR_NAME = "MQGATHER"
DEAD_LETTER_QUEUE = "SYSTEM.DEAD.LETTER.QUEUE"
DEFAULT_MAXDEPTH = 5000
DEFAULT_MAXMSGL = 4 * 1024 * 1024
QMGR_MAXMSGL = 100 * 1024 * 1024
#: MAXUMSGS: messages got and put under syncpoint that one unit of work may hold, and the
#: most it may be set to.
DEFAULT_MAXUMSGS = 10_000
MAX_MAXUMSGS = 999_999_999
#: The smallest MAXUMSGS one unit of work of a bridge fits in: a reply's get, the COD
#: its sender may ask of it, its move and the COA the move may cause; a collector's
#: batch of one (its get from the hold queue, its put and that put's COA, the batch's
#: message and the ledger marker). The queue manager counts the COA and COD reports it
#: generates under syncpoint in the unit of work.
LEAST_MAXUMSGS_GATHER = 4
LEAST_MAXUMSGS_COLLECTOR = 5
#: The largest MAXDEPTH (and BOTHRESH) a queue may be given.
MAX_QUEUE_DEPTH = 999_999_999
#: The largest MQMD Expiry a put may give (tenths of a second, about 3.2 years): above it,
#: and at 0 or below -1 (MQEI_UNLIMITED), MQ refuses the put with MQRC_EXPIRY_ERROR.
MAX_EXPIRY_TENTHS = 999_999_999
#: The longest a ledger marker may be kept (its Expiry): MAX_EXPIRY_TENTHS in hours.
MAX_LEDGER_HOURS = MAX_EXPIRY_TENTHS // 36_000
#: The longest wait anything may be given, in seconds: a gather's or a leg's deadline, a
#: re-request's delay, an operator's extend (366 days). A time far past it (or infinite)
#: is no wait a timer can keep: it would stop the gather's workflow at its first step.
MAX_WAIT_SECONDS = 366 * 24 * 3600.0
#: Bytes one search attribute's value may take (its JSON), as Temporal allows by default
#: (``limit.searchAttributesSizeOfValue``): an upsert past it fails the workflow task,
#: and the server then ends the workflow.
SEARCH_VALUE_BYTES = 2048
#: The most bytes of state a gather carries into a run of its own when Temporal suggests
#: continuing as new: well under the 2 MB Temporal takes in one payload, beside the
#: gather's input.
CARRIED_STATE_BYTES = 1536 * 1024
#: A reply a gather took inline is moved to its hold queue, when its state is too large
#: to carry into a new run, from this size up: a held reply's reference (its MQMD) costs
#: the state about 800 bytes, so a smaller body gains nothing by leaving.
MOVE_MIN_BYTES = 1024
#: The most replies one move to the hold queue takes (one local activity): its units of
#: work stay small, and a gather's signals are read between two moves.
MOVE_BATCH = 200
#: The most bytes a collector's batch's messages take as its PUT's input carries them
#: (their JSON): past it the batch closes, as past its max_bytes, since Temporal takes
#: 2 MB in one payload and the PUT of a larger batch failed each time.
BATCH_CARRIED_BYTES = 1024 * 1024
#: The longest reason an operator may give (release, cancel, re-request): it travels in
#: the gather's result and as a property of the message PUT.
MAX_REASON_CHARS = 1000

# Queues of the default aggregate (the demo).
GATHER_IN = "GATHER.IN"
ORDER_RESPONSE = "ORDER.RESPONSE"
GATHER_TIMEOUT = "GATHER.TIMEOUT"
GATHER_LATE = "GATHER.LATE"
GATHER_UNKNOWN = "GATHER.UNKNOWN"
GATHER_FAILURE = "GATHER.FAILURE"
GATHER_BACKOUT = "GATHER.BACKOUT"
GATHER_DUPLICATE = "GATHER.DUPLICATE"
#: Report messages (COA, COD, expiry, exception, ...) that reach a reply queue: about a
#: request, not an answer to it, so never a leg's reply unless an aggregate says so.
GATHER_REPORT = "GATHER.REPORT"
#: Where the bridge keeps replies too large to travel inside a signal (claim check): the
#: gather's history holds a reference, the body stays on the queue manager.
GATHER_HOLD = "GATHER.HOLD"
#: A reply whose body and properties exceed this many bytes is held on the hold queue
#: instead of travelling in its signal (well under the 256 KB at which Temporal warns).
DEFAULT_INLINE_REPLY_BYTES = 64 * 1024
#: Once one bridge has signalled a gather this many bytes of replies inline, it holds
#: the gather's later replies on the hold queue: a flood for one CorrelId then adds only
#: references (about 800 bytes each) to its history. Temporal fails a workflow task
#: while more than 2 MB of signals wait for it, and ends a workflow past 50 MB of
#: history; a flood of inline replies did both, and its gather was ended, its replies
#: taken.
DEFAULT_GATHER_INLINE_BYTES = 1024 * 1024
#: A collector's destination takes this many bytes of messages inline a second, at most
#: this many at once; past them its messages wait on the hold queue (as a gather's).
DEFAULT_DESTINATION_INLINE_BYTES = 1024 * 1024
#: Gathers (or destinations) whose inline bytes one bridge counts at once, the least
#: recent forgotten.
INLINE_TRACKED = 16384
#: The most legs a gather may expect (listed, counted, or a logical group's messages):
#: each costs its state, status and result about 180 bytes, so a gather of this many
#: stays inside a Temporal payload (2 MB); twice as many would make its result too large
#: to record and its workflow fail at the close.
MAX_LEGS = 5000
#: Re-requests of a lost leg: at most this many per leg, first after this many seconds.
MAX_LEG_RETRIES = 10
DEFAULT_RETRY_AFTER_SECONDS = 5.0
#: A leg's request is kept with its gather (for re-requests) up to this size: it travels
#: in the registration signal and the gather's state.
MAX_KEPT_REQUEST_BYTES = 64 * 1024
#: The most an aggregate may carry inline: two such replies and the gather's input fit
#: one signal under Temporal's 2 MB payload limit.
MAX_INLINE_REPLY_BYTES = 512 * 1024
#: Held-reply bytes a worker merges at once (MB): about twice this in memory at the
#: peak (the bodies and the response); a gather larger than it is merged alone.
DEFAULT_HELD_MB = 64
MB = 1024 * 1024
#: How long an activity waits for room in that budget before it fails and is retried:
#: well inside the activity's timeout, so a waiting thread never outlives its attempt.
HELD_BUDGET_WAIT_SECONDS = 20.0
#: How long an attempt of a gather's (or collector's) MQ work waits for an earlier
#: attempt that still runs in the same worker: with the budget's wait, inside the
#: activity's timeout.
EARLIER_ATTEMPT_WAIT_SECONDS = 20.0
#: Markers of the PUTs already done (response, forwarded reply), one per PUT, committed in
#: the PUT's own unit of work: a retried activity finds them even when the requester has
#: consumed the response already.
LEDGER_QUEUE = "MQGATHER.LEDGER"
#: MAXMSGL a ledger queue needs: a marker keeps 17 bytes of each message its PUT
#: carried (a gather's replies, as many as its state holds; a batch's up to 10,000
#: messages), beside a note of at most 1 KB.
LEDGER_MAXMSGL = 1024 * 1024
#: How long a PUT's marker is kept (its MQ Expiry), by default: what the ledger remembers.
DEFAULT_LEDGER_HOURS = 168.0

# Queues of the default collector (seed 002's CMAIn, CMAOut.OT and a failure queue).
COLLECT_IN = "COLLECT.IN"
COLLECT_DEFAULT_OUT = "COLLECT.OUT.OTHER"
COLLECT_FAILURE = "COLLECT.FAILURE"
#: Where the collector's bridge keeps messages too large to travel inside a signal.
COLLECT_HOLD = "COLLECT.HOLD"
#: Target queues of the demo's collector rules.
COLLECT_DEMO_OUT = ("COLLECT.OUT.FR", "COLLECT.OUT.UK", "COLLECT.OUT.SP")
#: Backouts after which a bridge moves a message aside when its input queue has
#: BOTHRESH(0), MQ's default (``--backout-threshold``): with no threshold, a message that
#: fails every time was backed out for ever, and held back every message behind it.
BRIDGE_BACKOUT_THRESHOLD = 5
#: Messages per MQ unit of work of the gathers' bridge (``mqgather bridge --batch-size``).
BRIDGE_BATCH_SIZE = 100
#: Messages per MQ unit of work of the collector's bridge: the more per get, the more per
#: destination signal, and a signal costs the server the same whatever it carries.
COLLECT_BATCH_SIZE = 1000
#: The collector's rules, embedded: a SQLite file in the state directory.
DEFAULT_RULES_DB = f"{STATE_DIR}/collector-rules.db"

#: Gathers (and collectors) a worker keeps in memory between their workflow tasks. One
#: that is not cached is replayed from its history when its next reply or timer comes:
#: more CPU then, and memory bounded by this many whatever the number of open gathers.
DEFAULT_MAX_CACHED_GATHERS = 1000
#: How long a stopping worker may take to finish its activities before the process ends
#: anyway. Ending then is a crash as far as MQ and Temporal know: the unit of work backs
#: out and the activity is retried, so nothing is lost; a worker that never ends is never
#: restarted by its supervisor.
WORKER_STOP_GRACE_SECONDS = 10.0
#: The worker deployment gather workers join when versioning is on and none is named.
DEFAULT_DEPLOYMENT = "mqgather"
#: Payloads larger than this are compressed (zlib) before they are sealed: bodies of text
#: shrink several-fold, and below this the compressor's own cost outweighs the saving.
COMPRESS_PAYLOADS_ABOVE_BYTES = 1024
#: Where /metrics listens unless told otherwise: this host only.
DEFAULT_METRICS_HOST = "127.0.0.1"

#: Before a workflow ends or continues as new it waits this long for one event from the
#: server, so a signal racing its close is taken rather than lost (names.PATCH_SETTLE).
SETTLE_SECONDS = 0.001

#: How long one salvage of a gather or a collector may hold its lease (one salvage of a
#: workflow at a time): a salvage killed midway blocks the next for at most this long.
SALVAGE_LEASE_SECONDS = 900.0
#: A salvage stops this long before its lease lapses, so that a unit of work begun just
#: before commits before another salvage may start.
SALVAGE_LEASE_MARGIN_SECONDS = 60.0
#: How often a salvage asks Temporal whether its lease still holds (an operator may end
#: it by hand), between two units of work; and how long it waits for the answer.
SALVAGE_LEASE_RECHECK_SECONDS = 1.0
SALVAGE_LEASE_RECHECK_TIMEOUT_SECONDS = 10.0
#: How long one attempt of a gather's or a collector's MQ work (a local activity) may
#: run: past it the attempt is retried, and it backs out instead of committing.
MQ_ATTEMPT_SECONDS = 60.0
#: A local activity's attempt that reaches its commit this long after its start first
#: confirms with Temporal that its worker still holds the workflow task it runs in.
#: Sooner, it cannot have lost it: the SDK renews a workflow task at 80 % of its 10 s
#: timeout, so the task lasts at least 2 s past any moment its worker holds it.
TASK_CONFIRM_AFTER_SECONDS = 1.0
#: How long that confirmation waits for Temporal's answer; without one, it backs out.
TASK_CONFIRM_TIMEOUT_SECONDS = 10.0
#: What salvage waits past that after a run that ended with MQ work under way, so that
#: an attempt whose commit began just before its end has finished it.
SALVAGE_AFTER_ATTEMPT_SECONDS = 5.0
#: How often a salvage tells on stderr how far it has come.
SALVAGE_PROGRESS_SECONDS = 2.0
