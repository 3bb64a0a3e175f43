"""The embedded queue manager: IBM MQ queue semantics in one SQLite file.

Many processes may open the same file. Every MQ call is one short SQLite write
transaction, so a unit of work never holds the database lock while the application
works between get and commit: a got message is marked as owned by the connection
(invisible to others) and the mark is resolved at commit or backout.

Each connection holds an exclusive ``flock`` on a lock file of its own for its whole
life. When the process dies (even by SIGKILL) the kernel drops the lock; any other
connection notices within ``RECOVERY_INTERVAL`` seconds of its next MQ call (and every
new connection at once) and backs the dead connection's unit of work out: its got
messages become available with BackoutCount + 1 and its uncommitted puts are discarded.

A get that waits sleeps until some connection commits: on Linux the kernel wakes it when
the file's write-ahead log is written (:mod:`bridge.mq.doorbell`), elsewhere it looks
every few milliseconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bridge.mq import reports, xqh
from bridge.mq.dlh import dead_letter
from bridge.mq.doorbell import Doorbell, open_doorbell
from bridge.mq.errors import (
    ConnectionBroken,
    GroupOrderError,
    MessageTooBig,
    MQError,
    NoMessageAvailable,
    NotAuthorized,
    ObjectAlreadyExists,
    ObjectNameError,
    QueueFull,
    QueueInhibited,
    QueueManagerUnavailable,
    SyncpointLimitReached,
    TruncatedMessage,
    UnknownObjectName,
    UnknownRemoteQueueManager,
)
from bridge.mq.models import (
    GROUP_FLAGS,
    ID_LENGTH,
    MQACT_NONE,
    MQAT_UNIX,
    MQENC_NATIVE,
    MQPER_NOT_PERSISTENT,
    MQPER_PERSISTENCE_AS_Q_DEF,
    NONE_ID,
    Match,
    MQMessage,
    MsgFlags,
    PutOptions,
    QueueAttributes,
    decode_properties,
    descriptor_refusal,
    encode_properties,
    stored_original_length,
    wait_refusal,
)
from bridge.mq.transport import WAIT_UNLIMITED, Browse, Transport
from mqgather.ccsid import CCSID_UTF8
from mqgather.constants import (
    DEAD_LETTER_QUEUE,
    DEFAULT_MAXUMSGS,
    DEFAULT_QMGR_NAME,
    MAX_MAXUMSGS,
    MAX_QUEUE_DEPTH,
    QMGR_MAXMSGL,
)
from mqgather.limits import queue_name_problem

#: Seconds within which a live connection backs out the work of a dead one.
RECOVERY_INTERVAL = 1.0
#: Longest pause between two looks at the queue during a get-wait where no doorbell
#: (:mod:`bridge.mq.doorbell`) rings on commits: it bounds how late a waiting bridge sees
#: one. A look is one PRAGMA read, yet 200 a second kept an idle bridge at 1 % of a core.
_MAX_POLL = 0.005
#: With a doorbell, the longest sleep between two looks all the same: a ring the file
#: system never gave (a write it does not report) is seen this late at worst.
_IDLE_LOOK = 0.25
#: After a ring, how long the looks come as often as without a doorbell: SQLite writes
#: the log before it makes the commit visible, so the first look can come too soon.
_AFTER_RING = 0.02
_BUSY_TIMEOUT_MS = 30_000
#: The first and the longest pause between two tries for the writers' turn
#: (:meth:`LocalQueueManager._writers_turn`). SQLite's own wait on a busy file sleeps
#: 1, 2, 5, 10 ms and on: a commit that met another's paid a millisecond or more where
#: the other's transaction had taken a tenth of one.
_TURN_FIRST_PAUSE = 0.00005
_TURN_MAX_PAUSE = 0.001
#: The file in ``PATH.locks`` whose lock is the writers' turn (not a connection's lock,
#: whose names the sweep derives from the connections table).
TURN_FILE = "writers"
#: The file in ``PATH.locks`` whose lock a connection holds while it opens the database
#: (WAL mode, the schema, the queue manager's first rows): connections opening a new
#: queue manager at once met "database is locked", which SQLite's busy wait does not
#: cover, about once in twenty starts of four.
OPENING_FILE = "opening"

# Message states.
_AVAILABLE = 0
_PUT_PENDING = 1  # put under syncpoint, not yet committed
_GOT_PENDING = 2  # got under syncpoint, not yet committed (2 in the schema's triggers)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS qmgr (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS queues (
    name TEXT PRIMARY KEY,
    maxdepth INTEGER NOT NULL,
    maxmsgl INTEGER NOT NULL,
    bothresh INTEGER NOT NULL,
    boqname TEXT NOT NULL,
    descr TEXT NOT NULL,
    curdepth INTEGER NOT NULL DEFAULT 0,
    put_enabled INTEGER NOT NULL DEFAULT 1,
    get_enabled INTEGER NOT NULL DEFAULT 1,
    usage TEXT NOT NULL DEFAULT 'normal'
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    state INTEGER NOT NULL,
    owner TEXT,
    priority INTEGER NOT NULL,
    msg_id BLOB NOT NULL,
    correl_id BLOB NOT NULL,
    group_id BLOB NOT NULL,
    msg_seq_number INTEGER NOT NULL,
    msg_flags INTEGER NOT NULL,
    format TEXT NOT NULL,
    persistence INTEGER NOT NULL,
    expiry_at REAL,
    reply_to_q TEXT NOT NULL,
    reply_to_qmgr TEXT NOT NULL,
    put_appl_name TEXT NOT NULL,
    put_date_time TEXT,
    backout_count INTEGER NOT NULL,
    properties TEXT NOT NULL,
    body BLOB NOT NULL,
    ccsid INTEGER NOT NULL DEFAULT 1208,
    encoding INTEGER NOT NULL DEFAULT 546,
    user_identifier TEXT NOT NULL DEFAULT '',
    accounting_token BLOB NOT NULL DEFAULT X'',
    appl_identity_data TEXT NOT NULL DEFAULT '',
    put_appl_type INTEGER NOT NULL DEFAULT 0,
    appl_origin_data TEXT NOT NULL DEFAULT '',
    msg_type INTEGER,
    report INTEGER NOT NULL DEFAULT 0,
    feedback INTEGER NOT NULL DEFAULT 0,
    msg_offset INTEGER NOT NULL DEFAULT 0,
    original_length INTEGER NOT NULL DEFAULT -1
);
CREATE INDEX IF NOT EXISTS messages_order ON messages (queue, state, priority DESC, id);
-- A get that matches an id finds it through its own index, in queue order, however deep
-- the queue (the ledger's check before every PUT is one). Files from before these indexes
-- had ones without the order, which the planner passed over for messages_order.
DROP INDEX IF EXISTS messages_correl;
DROP INDEX IF EXISTS messages_msgid;
DROP INDEX IF EXISTS messages_group;
CREATE INDEX IF NOT EXISTS messages_correl_order
    ON messages (queue, correl_id, state, priority DESC, id);
CREATE INDEX IF NOT EXISTS messages_msgid_order
    ON messages (queue, msg_id, state, priority DESC, id);
CREATE INDEX IF NOT EXISTS messages_group_order
    ON messages (queue, group_id, state, priority DESC, id);
CREATE INDEX IF NOT EXISTS messages_owner ON messages (owner) WHERE owner IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_expiry ON messages (expiry_at) WHERE expiry_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS connections (conn_id TEXT PRIMARY KEY, pid INTEGER, started REAL);
-- CURDEPTH as MQ keeps it: up on a put (an uncommitted one too, counted below by
-- uncommitted_puts until its row is written at commit) and on the backout of a get; down
-- on a get (an uncommitted one too) and on the backout of a put. State 2 is got under
-- syncpoint. Files from before kept got messages in CURDEPTH until commit (depth_down).
CREATE TRIGGER IF NOT EXISTS depth_up AFTER INSERT ON messages BEGIN
    UPDATE queues SET curdepth = curdepth + 1 WHERE name = NEW.queue;
END;
DROP TRIGGER IF EXISTS depth_down;
CREATE TRIGGER IF NOT EXISTS depth_gone AFTER DELETE ON messages WHEN OLD.state != 2 BEGIN
    UPDATE queues SET curdepth = curdepth - 1 WHERE name = OLD.queue;
END;
CREATE TRIGGER IF NOT EXISTS depth_got AFTER UPDATE OF state ON messages
WHEN OLD.state != 2 AND NEW.state = 2 BEGIN
    UPDATE queues SET curdepth = curdepth - 1 WHERE name = NEW.queue;
END;
CREATE TRIGGER IF NOT EXISTS depth_back AFTER UPDATE OF state ON messages
WHEN OLD.state = 2 AND NEW.state != 2 BEGIN
    UPDATE queues SET curdepth = curdepth + 1 WHERE name = NEW.queue;
END;
-- Puts of open units of work, per connection and queue: in CURDEPTH (and so against
-- MAXDEPTH) for every connection, as on MQ, though their rows are written at commit.
CREATE TABLE IF NOT EXISTS uncommitted_puts (
    conn_id TEXT NOT NULL,
    queue TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (conn_id, queue)
) WITHOUT ROWID;
-- Large bodies live apart from their message's row (which then holds X''): a get under
-- syncpoint rewrites the row's state without rewriting megabytes, and a body, the only
-- column here, is written in place by incremental blob I/O.
CREATE TABLE IF NOT EXISTS bodies (id INTEGER PRIMARY KEY, body BLOB NOT NULL);
CREATE TRIGGER IF NOT EXISTS bodies_gone AFTER DELETE ON messages BEGIN
    DELETE FROM bodies WHERE id = OLD.id;
END;
"""

_INSERT_COLUMNS = (
    "queue, state, owner, priority, msg_id, correl_id, group_id, msg_seq_number, msg_flags, "
    "format, persistence, expiry_at, reply_to_q, reply_to_qmgr, put_appl_name, "
    "put_date_time, backout_count, properties, body, ccsid, encoding, user_identifier, "
    "accounting_token, appl_identity_data, put_appl_type, appl_origin_data, msg_type, "
    "report, feedback, msg_offset, original_length"
)
_INSERT = (
    f"INSERT INTO messages ({_INSERT_COLUMNS}) "
    f"VALUES ({','.join('?' * len(_INSERT_COLUMNS.split(',')))})"
)
#: The row's body column. A body past ``_BODY_APART`` bytes goes to the bodies table.
_BODY_COLUMN = 18
_BODY_APART = 256 * 1024


def _insert(db: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """Insert message rows in their order (the queue's order); a large body is written
    into place in the bodies table, so SQLite neither copies it nor builds a record of it
    in memory (two more copies of a 30 MB response)."""
    small: list[tuple[Any, ...]] = []
    for row in rows:
        body = row[_BODY_COLUMN]
        if len(body) <= _BODY_APART:
            small.append(row)
            continue
        if small:
            db.executemany(_INSERT, small)
            small = []
        shape = (*row[:_BODY_COLUMN], b"", *row[_BODY_COLUMN + 1 :])
        rowid = db.execute(_INSERT, shape).lastrowid
        assert rowid is not None  # an INSERT always sets it
        db.execute("INSERT INTO bodies (id, body) VALUES (?, zeroblob(?))", (rowid, len(body)))
        with db.blobopen("bodies", "body", rowid) as blob:
            blob.write(body)
    if small:
        db.executemany(_INSERT, small)


#: MQGMO_ALL_MSGS_AVAILABLE, for the message ``m``: in no group, or in one whose messages
#: 1..N are all on the queue with N the last in the group.
_GROUP_COMPLETE = f"""(
    (m.msg_flags & {int(GROUP_FLAGS)}) = 0
    OR EXISTS (
        SELECT 1 FROM messages l
        WHERE l.queue = m.queue AND l.group_id = m.group_id AND l.state = {_AVAILABLE}
          AND (l.msg_flags & {int(MsgFlags.LAST_MSG_IN_GROUP)}) != 0
          AND (l.expiry_at IS NULL OR l.expiry_at > :now)
          AND (
            SELECT COUNT(DISTINCT s.msg_seq_number) FROM messages s
            WHERE s.queue = m.queue AND s.group_id = m.group_id AND s.state = {_AVAILABLE}
              AND (s.msg_flags & {int(GROUP_FLAGS)}) != 0
              AND s.msg_seq_number <= l.msg_seq_number
              AND (s.expiry_at IS NULL OR s.expiry_at > :now)
          ) = l.msg_seq_number
    )
)"""
#: Messages a logical-order get may start with: the first of a group, or one in no group.
_GROUP_FIRST = f"(m.msg_seq_number = 1 OR (m.msg_flags & {int(GROUP_FLAGS)}) = 0)"


@dataclass(frozen=True)
class _GroupPosition:
    """Where a connection is in a group it puts or gets in logical order."""

    group_id: bytes
    next_seq: int
    syncpoint: bool


@dataclass(frozen=True)
class _Choice:
    """What a get selects, besides the queue and its position."""

    match: Match | None = None
    logical_order: bool = False
    all_available: bool = False
    max_length: int | None = None


_COLUMNS = (
    "m.id, m.priority, m.msg_id, m.correl_id, m.group_id, m.msg_seq_number, m.msg_flags, "
    "m.format, m.persistence, m.expiry_at, m.reply_to_q, m.reply_to_qmgr, m.put_appl_name, "
    "m.put_date_time, m.backout_count, m.properties, COALESCE(b.body, m.body), m.ccsid, "
    "m.encoding, "
    "m.user_identifier, m.accounting_token, m.appl_identity_data, m.put_appl_type, "
    "m.appl_origin_data, m.msg_type, m.report, m.feedback, m.msg_offset, m.original_length"
)
#: Columns added since the first file format, with their definitions: an older file gets
#: them when first opened (its messages take the defaults, which is what they were).
_ADDED_COLUMNS = {
    "ccsid": "INTEGER NOT NULL DEFAULT 1208",
    "encoding": "INTEGER NOT NULL DEFAULT 546",
    "user_identifier": "TEXT NOT NULL DEFAULT ''",
    "accounting_token": "BLOB NOT NULL DEFAULT X''",
    "appl_identity_data": "TEXT NOT NULL DEFAULT ''",
    "put_appl_type": "INTEGER NOT NULL DEFAULT 0",
    "appl_origin_data": "TEXT NOT NULL DEFAULT ''",
    "msg_type": "INTEGER",
    "report": "INTEGER NOT NULL DEFAULT 0",
    "feedback": "INTEGER NOT NULL DEFAULT 0",
    "msg_offset": "INTEGER NOT NULL DEFAULT 0",
    "original_length": "INTEGER NOT NULL DEFAULT -1",
}


#: Columns added to the queues table since the first file format (PUT, GET, USAGE).
_ADDED_QUEUE_COLUMNS = {
    "put_enabled": "INTEGER NOT NULL DEFAULT 1",
    "get_enabled": "INTEGER NOT NULL DEFAULT 1",
    "usage": "TEXT NOT NULL DEFAULT 'normal'",
}
#: A queue's attributes as read, in QueueAttributes' terms.
_QUEUE_KEYS = ("name", "maxdepth", "maxmsgl", "bothresh", "boqname", "descr", "put", "get",
               "usage", "curdepth")  # fmt: skip
_PUT, _GET, _USAGE = (_QUEUE_KEYS.index(key) for key in ("put", "get", "usage"))
_QUEUE_COLUMNS = (
    "name, maxdepth, maxmsgl, bothresh, boqname, descr, "
    "CASE put_enabled WHEN 0 THEN 'disabled' ELSE 'enabled' END, "
    "CASE get_enabled WHEN 0 THEN 'disabled' ELSE 'enabled' END, usage, curdepth"
)


def _login_name() -> str:
    try:
        return getpass.getuser()[:12]
    except (KeyError, OSError):  # no passwd entry and no LOGNAME: MQ would use the uid
        return str(os.getuid())[:12]


def _default_appl_name() -> str:
    return (Path(sys.argv[0]).name or "python")[:28]


def _translate(exc: sqlite3.Error, path: Path) -> MQError:
    """Map an SQLite failure to the MQ reason an application would see."""
    text = str(exc)
    if "not a database" in text or "malformed" in text:
        return QueueManagerUnavailable(
            f"{path} is not an embedded queue manager file ({text}); "
            "move it aside or point MQGATHER_MQ at another file"
        )
    if "readonly" in text or "unable to open" in text or "permission" in text.lower():
        return NotAuthorized(f"{path} cannot be written ({text}); check its permissions")
    if "disk is full" in text:
        return MQError(f"{path}: {text}", reason="MQRC_STORAGE_MEDIUM_FULL")
    if "locked" in text or "busy" in text:
        return MQError(f"{path}: {text}", reason="MQRC_RESOURCE_PROBLEM")
    return MQError(f"{path}: {text}", reason="MQRC_UNEXPECTED_ERROR")


class LocalQueueManager(Transport):
    """A connection to the embedded queue manager stored in ``path``.

    Args:
        path: the SQLite file; created, with its dead-letter queue, if absent.
        qmgr_name: the queue manager name recorded at creation.
    """

    def __init__(self, path: str | os.PathLike[str], *, qmgr_name: str = DEFAULT_QMGR_NAME):
        self.path = Path(path)
        # SQLite's write-ahead log beside the file: every commit writes to it.
        self._wal = self.path.with_name(self.path.name + "-wal")
        self.conn_id = uuid.uuid4().hex
        # The default context of this connection's puts: MQ fixes both at MQCONN.
        self._appl_name = _default_appl_name()
        self._user = _login_name()
        self._lock = threading.RLock()
        self._got_pending = False
        self._puts: list[tuple[str, tuple[Any, ...]]] = []
        # Messages got and put under syncpoint in the open unit of work, and the queue
        # manager's MAXUMSGS as read when it began.
        self._uncommitted = 0
        self._maxumsgs = DEFAULT_MAXUMSGS
        self._browse_pos: dict[str, tuple[int, int]] = {}
        # Logical-order positions per queue: gets, browses and puts each keep their own,
        # as each MQ object handle does.
        self._get_groups: dict[str, _GroupPosition] = {}
        self._browse_groups: dict[str, _GroupPosition] = {}
        self._put_groups: dict[str, _GroupPosition] = {}
        # The get and put positions when the unit of work began: a backout restores them.
        self._uow_groups: tuple[dict[str, _GroupPosition], dict[str, _GroupPosition]] | None = None
        self._last_sweep = 0.0
        self._closed = False
        self._bell: Doorbell | None = None
        self._bell_refused = False
        self._bell_lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock_dir = self.path.with_name(self.path.name + ".locks")
            self._lock_dir.mkdir(exist_ok=True)
            self._lock_file = open(self._lock_dir / f"{self.conn_id}.lock", "w")  # noqa: SIM115
            self._turn_file = open(self._lock_dir / TURN_FILE, "a")  # noqa: SIM115
            opening = open(self._lock_dir / OPENING_FILE, "a")  # noqa: SIM115
        except OSError as exc:
            raise QueueManagerUnavailable(
                f"cannot create the embedded queue manager at {self.path}: {exc.strerror}"
            ) from exc
        fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            fcntl.flock(opening, fcntl.LOCK_EX)  # dropped by the kernel if the holder dies
            self._db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30
            )
            self._db.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            # A file from before CURDEPTH left out got messages and counted none put.
            recount = self._db.execute(
                "SELECT (SELECT COUNT(*) FROM sqlite_master WHERE name = 'queues') "
                "AND NOT (SELECT COUNT(*) FROM sqlite_master WHERE name = 'depth_got')"
            ).fetchone()[0]
            # executescript commits any open transaction, so the script carries its own.
            self._db.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
            with self._write() as db:
                if recount:
                    db.execute(
                        "UPDATE queues SET curdepth = (SELECT COUNT(*) FROM messages m "
                        f"WHERE m.queue = queues.name AND m.state != {_GOT_PENDING})"
                    )
                have = {r[1] for r in db.execute("PRAGMA table_info(messages)")}
                for column, definition in _ADDED_COLUMNS.items():
                    if column not in have:
                        db.execute(f"ALTER TABLE messages ADD COLUMN {column} {definition}")
                have = {r[1] for r in db.execute("PRAGMA table_info(queues)")}
                for column, definition in _ADDED_QUEUE_COLUMNS.items():
                    if column not in have:
                        db.execute(f"ALTER TABLE queues ADD COLUMN {column} {definition}")
                row = db.execute("SELECT value FROM qmgr WHERE key = 'name'").fetchone()
                if row is None:
                    db.execute("INSERT INTO qmgr VALUES ('name', ?)", (qmgr_name,))
                    db.execute("INSERT INTO qmgr VALUES ('deadq', ?)", (DEAD_LETTER_QUEUE,))
                    self._define(
                        db,
                        QueueAttributes(
                            name=DEAD_LETTER_QUEUE, maxdepth=MAX_QUEUE_DEPTH, maxmsgl=QMGR_MAXMSGL
                        ),
                    )
                    row = (qmgr_name,)
                self.qmgr_name = row[0]
                self._maxumsgs = self._read_maxumsgs(db)
                db.execute(
                    "INSERT INTO connections VALUES (?, ?, ?)",
                    (self.conn_id, os.getpid(), time.time()),
                )
        except sqlite3.Error as exc:
            self._release_lock()
            raise _translate(exc, self.path) from exc
        except MQError:
            self._release_lock()
            raise
        finally:
            opening.close()  # its lock with it
        self._sweep(force=True)

    # ------------------------------------------------------------------ plumbing

    @contextlib.contextmanager
    def _write(self, read_only: bool = False) -> Iterator[sqlite3.Connection]:
        """One short transaction: BEGIN IMMEDIATE ... COMMIT, or for a read (a browse, an
        inquiry) a deferred one, which takes no write lock from the other connections."""
        with self._lock:
            if getattr(self, "_closed", False):
                raise ConnectionBroken("the connection is closed")
            db = self._db
            turn = not read_only and self._writers_turn()
            try:
                try:
                    db.execute("BEGIN" if read_only else "BEGIN IMMEDIATE")
                except sqlite3.Error as exc:
                    raise _translate(exc, self.path) from exc
                try:
                    yield db
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                    raise
                try:
                    db.execute("COMMIT")
                except sqlite3.Error as exc:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                    raise _translate(exc, self.path) from exc
            finally:
                if turn:
                    fcntl.flock(self._turn_file, fcntl.LOCK_UN)

    def _writers_turn(self) -> bool:
        """Wait for this connection's turn to write, taken on a file lock every connection
        shares, so that a write waits about as long as the one before it takes; False when
        the turn did not come within the busy timeout (SQLite's own wait then decides, as
        it does for a writer that takes no turns)."""
        deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
        pause = _TURN_FIRST_PAUSE
        while True:
            try:
                fcntl.flock(self._turn_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(pause)
                pause = min(2 * pause, _TURN_MAX_PAUSE)

    def _call(self, fn: Any, *args: Any, read_only: bool = False) -> Any:
        """Run ``fn(db, *args)`` in a transaction (a write one unless ``read_only``),
        translating SQLite errors."""
        try:
            with self._write(read_only) as db:
                return fn(db, *args)
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc

    def _release_lock(self) -> None:
        with contextlib.suppress(OSError):
            self._turn_file.close()
        with contextlib.suppress(OSError):
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            os.unlink(self._lock_file.name)

    def _sweep(self, force: bool = False) -> None:
        """Back out the units of work of dead connections and purge expired messages."""
        now = time.monotonic()
        if not force and now - self._last_sweep < RECOVERY_INTERVAL:
            return
        self._last_sweep = now
        try:
            rows = self._db.execute(
                "SELECT conn_id FROM connections WHERE conn_id != ?", (self.conn_id,)
            ).fetchall()
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc
        for (conn_id,) in rows:
            lock_path = self._lock_dir / f"{conn_id}.lock"
            try:
                handle = open(lock_path, "a")  # noqa: SIM115
            except OSError:
                continue
            try:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # the owner is alive
                self._call(self._recover_dead, conn_id)
                with contextlib.suppress(OSError):
                    os.unlink(lock_path)
            finally:
                handle.close()
        self._call(
            lambda db: db.execute(
                "DELETE FROM messages WHERE expiry_at IS NOT NULL AND expiry_at <= ? AND state = ?",
                (time.time(), _AVAILABLE),
            )
        )

    def _recover_dead(self, db: sqlite3.Connection, conn_id: str) -> None:
        self._end_uow(db, conn_id, commit=False)
        db.execute("DELETE FROM connections WHERE conn_id = ?", (conn_id,))

    @staticmethod
    def _end_uow(db: sqlite3.Connection, owner: str, *, commit: bool) -> None:
        if commit:
            db.execute("DELETE FROM messages WHERE owner = ? AND state = ?", (owner, _GOT_PENDING))
            db.execute(
                "UPDATE messages SET state = ?, owner = NULL WHERE owner = ? AND state = ?",
                (_AVAILABLE, owner, _PUT_PENDING),
            )
        else:
            db.execute("DELETE FROM messages WHERE owner = ? AND state = ?", (owner, _PUT_PENDING))
            db.execute(
                "UPDATE messages SET state = ?, owner = NULL, backout_count = backout_count + 1 "
                "WHERE owner = ? AND state = ?",
                (_AVAILABLE, owner, _GOT_PENDING),
            )
        LocalQueueManager._let_go(db, owner)

    @staticmethod
    def _queue_row(db: sqlite3.Connection, queue: str) -> tuple[Any, ...]:
        """The queue's attributes in the order of ``_QUEUE_KEYS``."""
        row = db.execute(f"SELECT {_QUEUE_COLUMNS} FROM queues WHERE name = ?", (queue,)).fetchone()
        if row is None:
            raise UnknownObjectName(f"queue {queue!r} is not defined")
        return tuple(row)

    @staticmethod
    def _define(db: sqlite3.Connection, attrs: QueueAttributes, replace: bool = False) -> None:
        for what, name in (("queue", attrs.name), ("BOQNAME", attrs.boqname)):
            if problem := queue_name_problem(name):
                raise ObjectNameError(f"{what} {name!r}: {problem}")
        exists = db.execute("SELECT 1 FROM queues WHERE name = ?", (attrs.name,)).fetchone()
        values = (attrs.maxdepth, attrs.maxmsgl, attrs.bothresh, attrs.boqname, attrs.descr)
        if exists and not replace:
            raise ObjectAlreadyExists(f"queue {attrs.name!r} already exists")
        if exists:
            db.execute(
                "UPDATE queues SET maxdepth=?, maxmsgl=?, bothresh=?, boqname=?, descr=? "
                "WHERE name=?",
                (*values, attrs.name),
            )
        else:
            db.execute(
                "INSERT INTO queues (name, maxdepth, maxmsgl, bothresh, boqname, descr) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (attrs.name, *values),
            )
        # PUT and GET change only when given: defining a queue again leaves an operator's
        # PUT(DISABLED) as it is.
        for column, value in (("put_enabled", attrs.put), ("get_enabled", attrs.get)):
            if value is not None:
                db.execute(
                    f"UPDATE queues SET {column} = ? WHERE name = ?",
                    (int(value == "enabled"), attrs.name),
                )
        if attrs.usage is not None:
            db.execute("UPDATE queues SET usage = ? WHERE name = ?", (attrs.usage, attrs.name))

    # ------------------------------------------------------------------ the MQI

    def put(
        self,
        queue: str,
        message: MQMessage,
        options: PutOptions | None = None,
        *,
        qmgr: str = "",
    ) -> MQMessage:
        remote = self.address(queue, qmgr).qmgr
        # Name resolution first, as MQOPEN does it.
        xmitq = self.route(remote) if remote else ""
        opts = options or PutOptions()
        if len(message.body) > QMGR_MAXMSGL:
            raise MessageTooBig(
                f"{len(message.body)} bytes exceed the queue manager's MAXMSGL",
                reason="MQRC_MSG_TOO_BIG_FOR_Q_MGR",
            )
        msg_id = message.msg_id
        if msg_id == NONE_ID:
            msg_id = self._new_id()
        updates: dict[str, Any] = {
            "msg_id": msg_id,
            "backout_count": 0,
            "original_length": stored_original_length(message),
        }
        if not message.reply_to_qmgr.strip():
            # MQ names itself where a put leaves ReplyToQMgr blank: replies come back here.
            updates["reply_to_qmgr"] = self.qmgr_name
        if message.persistence == MQPER_PERSISTENCE_AS_Q_DEF:
            # The queues here are defined with MQ's default DEFPSIST(NO).
            updates["persistence"] = MQPER_NOT_PERSISTENT
        group_fields, position = self._put_group(queue, message, opts)
        updates.update(group_fields)
        if not opts.set_all_context or message.put_date_time is None:
            updates["put_date_time"] = datetime.now(UTC)
        if not opts.set_all_context:
            # Default context, as MQ gives a put without MQPMO_SET_ALL_CONTEXT.
            updates.update(
                put_appl_name=self._appl_name,
                user_identifier=self._user,
                accounting_token=MQACT_NONE,
                appl_identity_data="",
                put_appl_type=MQAT_UNIX,
                appl_origin_data="",
            )
        stored = message.model_copy(update=updates)
        target, landed = queue, stored
        if xmitq:
            target, landed = xmitq, self._behind_xqh(stored, queue, remote)
        row = self._row(target, landed)
        # The queue manager that owns the destination confirms the arrival: for another
        # queue manager's queue that is the other one, once a channel gets it there.
        coa = not xmitq and reports.asks(stored, reports.MQFB_COA)

        def arrival(db: sqlite3.Connection) -> tuple[str, tuple[Any, ...]] | None:
            if not coa or not self._confirms(db, queue):
                return None
            return self._confirmation(db, stored, reports.MQFB_COA)

        if opts.syncpoint:
            # Checked and counted in CURDEPTH now, written by commit: the unit of work
            # holds no lock meanwhile.
            def hold(db: sqlite3.Connection) -> tuple[str, tuple[Any, ...]] | None:
                room = self._room(db)
                if room < 1:
                    raise self._limit_reached(f"putting to queue {target!r}")
                self._check_put(db, target, landed)
                self._hold(db, target)
                report = arrival(db)
                if report is not None:
                    if room < 2:
                        # MQ counts the COA it generates in the unit of work too.
                        raise self._limit_reached(f"putting to queue {target!r} with a COA")
                    self._hold(db, report[0])
                return report

            with self._lock:
                report = self._call(hold)
                self._puts.append((target, row))
                self._uncommitted += 1
                if report is not None:
                    self._puts.append(report)
                    self._uncommitted += 1
                self._advance_put_group(queue, message, position)
            return stored

        def op(db: sqlite3.Connection) -> None:
            self._check_put(db, target, landed)
            _insert(db, [row])
            report = arrival(db)
            if report is not None:
                _insert(db, [report[1]])

        self._call(op)
        self._advance_put_group(queue, message, position)
        return stored

    def route(self, qmgr: str) -> str:
        """The transmission queue a message for queue manager ``qmgr`` waits on: the local
        queue of that name, defined USAGE(XMITQ). An embedded queue manager has no
        channels, queue manager aliases, default transmission queue or clusters, so that
        is its only route.

        Raises:
            UnknownRemoteQueueManager: no queue of that name (MQRC_UNKNOWN_REMOTE_Q_MGR).
            MQError: MQRC_XMIT_Q_USAGE_ERROR, the queue of that name is not USAGE(XMITQ).
        """
        return str(self._call(self._route, qmgr, read_only=True))

    def _route(self, db: sqlite3.Connection, qmgr: str) -> str:
        try:
            row = self._queue_row(db, qmgr)
        except UnknownObjectName:
            raise UnknownRemoteQueueManager(
                f"queue manager {self.qmgr_name} has no route to queue manager {qmgr!r}: "
                f"define a transmission queue of that name (USAGE(XMITQ))"
            ) from None
        if row[_USAGE] != "xmitq":
            raise MQError(
                f"queue {qmgr!r}, the route to queue manager {qmgr!r}, is not a "
                "transmission queue (USAGE(XMITQ))",
                reason="MQRC_XMIT_Q_USAGE_ERROR",
            )
        return qmgr

    @staticmethod
    def _behind_xqh(message: MQMessage, queue: str, qmgr: str) -> MQMessage:
        """The message as it waits on a transmission queue for queue manager ``qmgr``:
        behind an MQXQH, where MQ keeps it until a channel sends it on (MAXMSGL and
        MAXDEPTH are the transmission queue's then)."""
        return message.model_copy(
            update={
                "format": xqh.MQFMT_XMIT_Q_HEADER,
                "coded_char_set_id": CCSID_UTF8,
                "encoding": MQENC_NATIVE,
                "body": xqh.pack(message, queue, qmgr),
            }
        )

    def _hold(self, db: sqlite3.Connection, queue: str) -> None:
        """Count a put of the open unit of work in ``queue``'s CURDEPTH until it ends."""
        db.execute("UPDATE queues SET curdepth = curdepth + 1 WHERE name = ?", (queue,))
        db.execute(
            "INSERT INTO uncommitted_puts VALUES (?, ?, 1) "
            "ON CONFLICT (conn_id, queue) DO UPDATE SET count = count + 1",
            (self.conn_id, queue),
        )

    @staticmethod
    def _let_go(db: sqlite3.Connection, owner: str) -> None:
        """Take a unit of work's puts out of CURDEPTH as it ends: committed, their rows
        count now; backed out, they are gone."""
        db.execute(
            "UPDATE queues SET curdepth = curdepth - (SELECT u.count FROM uncommitted_puts u "
            "WHERE u.conn_id = ? AND u.queue = queues.name) "
            "WHERE name IN (SELECT queue FROM uncommitted_puts WHERE conn_id = ?)",
            (owner, owner),
        )
        db.execute("DELETE FROM uncommitted_puts WHERE conn_id = ?", (owner,))

    def _confirmation(
        self, db: sqlite3.Connection, about: MQMessage, feedback: int
    ) -> tuple[str, tuple[Any, ...]] | None:
        """The COA or COD this queue manager sends about ``about`` (whose queue
        :meth:`_confirms`), as the queue and row it lands on; None when it is discarded.

        It goes to the ReplyToQ at the ReplyToQMgr; when that refuses it, to the
        dead-letter queue behind an MQDLH naming why, and when that refuses it too it is
        discarded: a report never fails the call that caused it.
        """
        report = reports.confirmation(
            about, feedback, qmgr_name=self.qmgr_name, msg_id=self._new_id(),
            now=datetime.now(UTC),
        )  # fmt: skip
        # MQ reads a name up to its first NUL, trailing blanks dropped.
        to, qmgr = self.address(about.reply_to_q.split("\0", 1)[0].rstrip(), about.reply_to_qmgr)
        try:
            target, landed = to, report
            if qmgr:
                target = self._route(db, qmgr)
                landed = self._behind_xqh(report, to, qmgr)
            self._check_put(db, target, landed)
        except MQError as exc:
            deadq = self._read_deadq(db)
            if not deadq:
                return None
            target = deadq
            landed = dead_letter(report, exc.code, to, qmgr or self.qmgr_name, report.put_appl_name)
            try:
                self._check_put(db, target, landed)
            except MQError:
                return None
        return target, self._row(target, landed)

    def _confirms(self, db: sqlite3.Connection, queue: str) -> bool:
        """Whether a message's arrival on ``queue``, or its delivery off it, is confirmed
        here: not on the dead-letter queue, where a message waits, not its destination,
        nor on a transmission queue, where the queue manager at the other end confirms."""
        return queue != self._read_deadq(db) and self._queue_row(db, queue)[_USAGE] != "xmitq"

    @staticmethod
    def _read_deadq(db: sqlite3.Connection) -> str:
        row = db.execute("SELECT value FROM qmgr WHERE key = 'deadq'").fetchone()
        return str(row[0]) if row else ""

    def _new_id(self) -> bytes:
        """A MsgId or GroupId as MQ makes them: "AMQ ", the queue manager, unique bytes."""
        return (b"AMQ " + self.qmgr_name.encode()[:12].ljust(12) + os.urandom(8))[:ID_LENGTH]

    def _put_group(
        self, queue: str, message: MQMessage, opts: PutOptions
    ) -> tuple[dict[str, Any], _GroupPosition | None]:
        """The GroupId, MsgSeqNumber and MsgFlags a put stores, and the position after it.

        Raises:
            GroupOrderError: MQRC_INCOMPLETE_GROUP for a message in no group while a group
                is being put in logical order; MQRC_INCONSISTENT_UOW when a group's puts
                mix syncpoint and no syncpoint.
        """
        flags = message.msg_flags
        if not flags & GROUP_FLAGS:
            if opts.logical_order and queue in self._put_groups:
                raise GroupOrderError(
                    f"a group is being put to queue {queue!r} in logical order; "
                    "put its last message (last in group) first",
                    reason="MQRC_INCOMPLETE_GROUP",
                )
            return {}, None
        flags |= MsgFlags.MSG_IN_GROUP
        if not opts.logical_order:
            # Physical order: the caller's GroupId and sequence, a new id for MQGI_NONE.
            group_id = message.group_id if message.group_id != NONE_ID else self._new_id()
            return {"group_id": group_id, "msg_flags": int(flags)}, None
        current = self._put_groups.get(queue)
        if current is not None and current.syncpoint != opts.syncpoint:
            raise GroupOrderError(
                f"the group being put to queue {queue!r} began "
                f"{'inside' if current.syncpoint else 'outside'} syncpoint; "
                "put all its messages the same way",
                reason="MQRC_INCONSISTENT_UOW",
            )
        if current is None:
            current = _GroupPosition(self._new_id(), 1, opts.syncpoint)
        fields = {
            "group_id": current.group_id,
            "msg_seq_number": current.next_seq,
            "msg_flags": int(flags),
        }
        return fields, _GroupPosition(current.group_id, current.next_seq + 1, opts.syncpoint)

    def _advance_put_group(
        self, queue: str, message: MQMessage, position: _GroupPosition | None
    ) -> None:
        if position is None:
            return
        if position.syncpoint:
            self._save_groups()
        if message.msg_flags & MsgFlags.LAST_MSG_IN_GROUP:
            self._put_groups.pop(queue, None)
        else:
            self._put_groups[queue] = position

    def _save_groups(self) -> None:
        """Remember the group positions as they were when the unit of work began."""
        if self._uow_groups is None:
            self._uow_groups = (dict(self._get_groups), dict(self._put_groups))

    def _room(self, db: sqlite3.Connection) -> int:
        """Messages the unit of work may still get or put under syncpoint: MAXUMSGS, read
        as the unit of work begins (an ALTER QMGR applies to the next), less those it
        holds."""
        if not self._uncommitted:
            self._maxumsgs = self._read_maxumsgs(db)
        return self._maxumsgs - self._uncommitted

    def _limit_reached(self, doing: str) -> SyncpointLimitReached:
        return SyncpointLimitReached(
            f"{doing}: the unit of work already holds {self._uncommitted} messages, "
            f"MAXUMSGS({self._maxumsgs}) of queue manager {self.qmgr_name}; commit or back "
            "out first"
        )

    @staticmethod
    def _read_maxumsgs(db: sqlite3.Connection) -> int:
        row = db.execute("SELECT value FROM qmgr WHERE key = 'maxumsgs'").fetchone()
        return int(row[0]) if row else DEFAULT_MAXUMSGS

    def _check_put(self, db: sqlite3.Connection, queue: str, message: MQMessage) -> None:
        """What MQ checks on a put once the queue is known: its descriptor, its length
        against the queue's MAXMSGL, and the queue's depth (CURDEPTH, which counts every
        connection's uncommitted puts and leaves out messages got under syncpoint)."""
        row = self._queue_row(db, queue)
        if row[_PUT] == "disabled":
            raise QueueInhibited(f"queue {queue!r} is PUT(DISABLED)")
        _, maxdepth, maxmsgl, *_rest, curdepth = row
        refusal = descriptor_refusal(message)
        if refusal is not None:
            reason, detail = refusal
            raise MQError(f"putting to queue {queue!r}: {detail}", reason=reason)
        size = len(message.body)
        if size > maxmsgl:
            raise MessageTooBig(f"{size} bytes exceed MAXMSGL({maxmsgl}) of queue {queue!r}")
        if curdepth >= maxdepth:
            raise QueueFull(f"queue {queue!r} is at MAXDEPTH({maxdepth})")

    @staticmethod
    def _row(queue: str, m: MQMessage) -> tuple[Any, ...]:
        return (
            queue,
            _AVAILABLE,
            None,
            m.priority,
            m.msg_id,
            m.correl_id,
            m.group_id,
            m.msg_seq_number,
            m.msg_flags,
            m.format,
            m.persistence,
            time.time() + m.expiry / 10 if m.expiry > 0 else None,
            m.reply_to_q,
            m.reply_to_qmgr,
            m.put_appl_name,
            m.put_date_time.isoformat() if m.put_date_time else None,
            0,
            json.dumps(encode_properties(m.properties)),
            m.body,
            m.coded_char_set_id,
            m.encoding,
            m.user_identifier,
            m.accounting_token,
            m.appl_identity_data,
            m.put_appl_type,
            m.appl_origin_data,
            m.msg_type,
            m.report,
            m.feedback,
            m.offset,
            m.original_length,
        )

    def get(
        self,
        queue: str,
        *,
        wait_ms: int = 0,
        syncpoint: bool = True,
        match: Match | None = None,
        browse: Browse | None = None,
        logical_order: bool = False,
        all_available: bool = False,
        max_length: int | None = None,
    ) -> MQMessage:
        """As :meth:`Transport.get`; ``max_length`` is the caller's buffer: a longer
        message stays where it is (and the group position too) and the get fails with
        MQRC_TRUNCATED_MSG_FAILED, as an MQGET into a short buffer does."""
        mode = {"browse": browse}
        if browse == "first":
            self._browse_groups.pop(queue, None)
        choice = _Choice(match, logical_order, all_available, max_length)

        def attempt(db: sqlite3.Connection) -> list[MQMessage]:
            got = self._take(db, queue, syncpoint, choice, mode["browse"], 1)
            if not got and mode["browse"] == "first":
                # Nothing yet: later arrivals are the "first" from where the cursor is.
                mode["browse"] = "next"
                self._browse_pos.pop(queue, None)
            return got

        return self._poll(queue, wait_ms, attempt, read_only=browse is not None)[0]

    def get_batch(
        self, queue: str, max_messages: int, *, wait_ms: int = 0, match: Match | None = None
    ) -> list[MQMessage]:
        try:
            return self._poll(
                queue,
                wait_ms,
                lambda db: self._take(db, queue, True, _Choice(match), None, max_messages),
            )
        except NoMessageAvailable:
            return []

    def _poll(
        self,
        queue: str,
        wait_ms: int,
        attempt: Callable[[sqlite3.Connection], list[MQMessage]],
        read_only: bool = False,
    ) -> list[MQMessage]:
        """Run ``attempt`` until it finds messages or the wait ends (``read_only``: it
        changes nothing, as a browse)."""
        refusal = wait_refusal(wait_ms)
        if refusal is not None:
            raise MQError(
                f"getting from queue {queue!r}: {refusal}", reason="MQRC_WAIT_INTERVAL_ERROR"
            )
        deadline = None if wait_ms == WAIT_UNLIMITED else time.monotonic() + wait_ms / 1000
        pause = 0.001

        def first_try(db: sqlite3.Connection) -> tuple[list[MQMessage], int]:
            got = attempt(db)
            # Read inside the same transaction, so no commit can slip in unseen.
            version = 0 if got else int(db.execute("PRAGMA data_version").fetchone()[0])
            return got, version

        while True:
            self._sweep()
            got, version = self._call(first_try, read_only=read_only)
            if got:
                return got
            if deadline is not None and time.monotonic() >= deadline:
                raise NoMessageAvailable(f"no message on queue {queue!r}")
            # Wait until another connection commits something, or the wait ends.
            with self._waiting_bell() as bell:
                hurry = 0.0  # until when looks follow one another as without a doorbell
                while self._data_version() == version:
                    now = time.monotonic()
                    if now - self._last_sweep >= RECOVERY_INTERVAL:
                        break
                    if deadline is not None and now >= deadline:
                        raise NoMessageAvailable(f"no message on queue {queue!r}")
                    left = RECOVERY_INTERVAL - (now - self._last_sweep)
                    if deadline is not None:
                        left = min(left, deadline - now)
                    if bell is not None and not bell.gone and now >= hurry:
                        if bell.wait(min(left, _IDLE_LOOK)):
                            # The log is written a moment before the commit shows.
                            hurry = time.monotonic() + _AFTER_RING
                            pause = 0.0005
                        continue
                    time.sleep(min(pause, left))
                    pause = min(pause * 2, _MAX_POLL)
                pause = 0.001

    @contextlib.contextmanager
    def _waiting_bell(self) -> Iterator[Doorbell | None]:
        """The connection's doorbell for one wait, its earlier rings taken (the look
        that follows sees their commits). None where there is none, or while another
        thread waits on this connection: one waiter takes the rings, others look on the
        clock. Opened at the connection's first wait and kept until it closes: closing
        one makes the kernel wait out a grace period, milliseconds."""
        if not self._bell_lock.acquire(blocking=False):
            yield None
            return
        try:
            if self._bell is not None and self._bell.gone:
                self._drop_bell()
            if self._bell is None and not self._bell_refused:
                self._bell = open_doorbell(self._wal)
                self._bell_refused = self._bell is None
            if self._bell is not None:
                self._bell.wait(0)
            yield self._bell
        finally:
            if self._closed:
                self._drop_bell()  # the connection closed during the wait
            self._bell_lock.release()

    def _drop_bell(self) -> None:
        if self._bell is not None:
            self._bell.close()
            self._bell = None

    def _data_version(self) -> int:
        with self._lock:
            try:
                return int(self._db.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc

    def _take(
        self,
        db: sqlite3.Connection,
        queue: str,
        syncpoint: bool,
        choice: _Choice,
        browse: Browse | None,
        limit: int,
    ) -> list[MQMessage]:
        if self._queue_row(db, queue)[_GET] == "disabled":
            raise QueueInhibited(f"queue {queue!r} is GET(DISABLED)", reason="MQRC_GET_INHIBITED")
        now = time.time()
        where = [
            "m.queue = :queue",
            f"m.state = {_AVAILABLE}",
            "(m.expiry_at IS NULL OR m.expiry_at > :now)",
        ]
        counted = syncpoint and browse is None
        room = self._room(db) if counted else limit
        # Take no more than the unit of work has room for; with none left, a get that
        # finds a message fails as MQ's does.
        limit = min(limit, max(room, 1))
        params: dict[str, Any] = {"queue": queue, "now": now, "limit": limit}
        positions = self._browse_groups if browse else self._get_groups
        position = positions.get(queue) if choice.logical_order else None
        if position is not None:
            if not browse and position.syncpoint != syncpoint:
                raise GroupOrderError(
                    f"the group being got from queue {queue!r} began "
                    f"{'inside' if position.syncpoint else 'outside'} syncpoint; "
                    "get all its messages the same way",
                    reason="MQRC_INCONSISTENT_UOW",
                )
            # Inside a group only its next message is eligible, whatever the match says.
            where += ["m.group_id = :group", "m.msg_seq_number = :seq"]
            params.update(group=position.group_id, seq=position.next_seq)
        else:
            if choice.match is not None:
                for field in ("msg_id", "correl_id", "group_id"):
                    value = getattr(choice.match, field)
                    if value is not None:
                        where.append(f"m.{field} = :{field}")
                        params[field] = value
            if choice.logical_order:
                where.append(_GROUP_FIRST)
            if choice.all_available:
                where.append(_GROUP_COMPLETE)
            if browse == "next" and queue in self._browse_pos:
                where.append("(m.priority < :prio OR (m.priority = :prio AND m.id > :last))")
                params["prio"], params["last"] = self._browse_pos[queue]
        rows = db.execute(
            f"SELECT {_COLUMNS} FROM messages m LEFT JOIN bodies b ON b.id = m.id "
            f"WHERE {' AND '.join(where)} "
            "ORDER BY m.priority DESC, m.id LIMIT :limit",
            params,
        ).fetchall()
        if not rows:
            return []
        messages = [self._to_message(row, now) for row in rows]
        if position is not None and choice.match is not None:
            self._check_group_match(queue, choice.match, messages[0])
        if choice.max_length is not None and len(messages[0].body) > choice.max_length:
            raise TruncatedMessage(
                f"the message on queue {queue!r} is {len(messages[0].body)} bytes, "
                f"longer than the {choice.max_length}-byte buffer",
                messages[0],
            )
        # A destructive get confirms delivery to whoever asked (COD).
        cod = [browse is None and reports.asks(m, reports.MQFB_COD) for m in messages]
        if any(cod) and not self._confirms(db, queue):
            cod = [False] * len(messages)
        if counted:
            # Each message, and the COD it asks for, counts toward MAXUMSGS: take those
            # that fit.
            fits, need = 0, 0
            for asked in cod:
                need += 1 + asked
                if need > room:
                    break
                fits += 1
            if not fits:
                raise self._limit_reached(f"getting from queue {queue!r}")
            rows, messages, cod = rows[:fits], messages[:fits], cod[:fits]
            self._uncommitted += fits
        ids = [(row[0],) for row in rows]
        if browse is not None:
            if position is None:
                # A group's place among the others is its first message's place.
                self._browse_pos[queue] = (rows[-1][1], rows[-1][0])
        elif syncpoint:
            db.executemany(
                f"UPDATE messages SET state = {_GOT_PENDING}, owner = '{self.conn_id}' "
                "WHERE id = ?",
                ids,
            )
            self._got_pending = True
        else:
            db.executemany("DELETE FROM messages WHERE id = ?", ids)
        if any(cod):
            for message, asked in zip(messages, cod, strict=True):
                report = self._confirmation(db, message, reports.MQFB_COD) if asked else None
                if report is None:
                    continue
                if syncpoint:
                    self._hold(db, report[0])
                    self._puts.append(report)
                    self._uncommitted += 1
                else:
                    _insert(db, [report[1]])
        if choice.logical_order:
            self._advance_get_group(positions, queue, messages[0], syncpoint and not browse)
        return messages

    @staticmethod
    def _check_group_match(queue: str, match: Match, message: MQMessage) -> None:
        for field in ("msg_id", "correl_id", "group_id"):
            value = getattr(match, field)
            if value is not None and value != getattr(message, field):
                raise GroupOrderError(
                    f"inside a group on queue {queue!r} only its next message can be got; "
                    f"its {field} is not the one matched",
                    reason="MQRC_MATCH_OPTIONS_ERROR",
                )

    def _advance_get_group(
        self,
        positions: dict[str, _GroupPosition],
        queue: str,
        message: MQMessage,
        in_uow: bool,
    ) -> None:
        if in_uow:
            self._save_groups()
        if message.in_group and not message.msg_flags & MsgFlags.LAST_MSG_IN_GROUP:
            positions[queue] = _GroupPosition(message.group_id, message.msg_seq_number + 1, in_uow)
        else:
            positions.pop(queue, None)

    @staticmethod
    def _to_message(row: tuple[Any, ...], now: float) -> MQMessage:
        (
            _,
            priority,
            msg_id,
            correl_id,
            group_id,
            seq,
            flags,
            fmt,
            persistence,
            expiry_at,
            reply_to_q,
            reply_to_qmgr,
            appl,
            put_time,
            backout_count,
            props,
            body,
            ccsid,
            encoding,
            user_identifier,
            accounting_token,
            appl_identity_data,
            put_appl_type,
            appl_origin_data,
            msg_type,
            report,
            feedback,
            offset,
            original_length,
        ) = row
        return MQMessage(
            msg_id=msg_id,
            correl_id=correl_id,
            group_id=group_id,
            msg_seq_number=seq,
            msg_flags=flags,
            format=fmt,
            persistence=persistence,
            priority=priority,
            expiry=-1 if expiry_at is None else max(1, int((expiry_at - now) * 10)),
            reply_to_q=reply_to_q,
            reply_to_qmgr=reply_to_qmgr,
            put_appl_name=appl,
            put_date_time=datetime.fromisoformat(put_time) if put_time else None,
            backout_count=backout_count,
            properties=decode_properties(json.loads(props)),
            body=body,
            coded_char_set_id=ccsid,
            encoding=encoding,
            user_identifier=user_identifier,
            accounting_token=accounting_token,
            appl_identity_data=appl_identity_data,
            put_appl_type=put_appl_type,
            appl_origin_data=appl_origin_data,
            msg_type=msg_type,
            report=report,
            feedback=feedback,
            offset=offset,
            original_length=original_length,
        )

    def commit(self) -> None:
        with self._lock:
            self._uow_groups = None
            if not (self._got_pending or self._puts):
                return

            def op(db: sqlite3.Connection) -> None:
                if self._got_pending:
                    self._end_uow(db, self.conn_id, commit=True)
                else:
                    self._let_go(db, self.conn_id)
                if self._puts:
                    _insert(db, [row for _, row in self._puts])

            self._call(op)
            self._puts.clear()
            self._got_pending = False
            self._uncommitted = 0

    def backout(self) -> None:
        with self._lock:
            held = bool(self._puts)
            self._puts.clear()
            self._uncommitted = 0
            if self._uow_groups is not None:
                # A group got or put in this unit of work starts over, as after MQBACK.
                self._get_groups, self._put_groups = self._uow_groups
                self._uow_groups = None
            if not (self._got_pending or held):
                return
            self._call(lambda db: self._end_uow(db, self.conn_id, commit=False))
            self._got_pending = False

    def inquire(self, queue: str) -> QueueAttributes:
        row = self._call(self._queue_row, queue, read_only=True)
        return QueueAttributes(**dict(zip(_QUEUE_KEYS, row, strict=True)))

    def define(self, attrs: QueueAttributes, *, replace: bool = False) -> None:
        self._call(self._define, attrs, replace)

    def list_queues(self, pattern: str = "*") -> list[QueueAttributes]:
        like = (
            pattern[:-1].replace("%", r"\%").replace("_", r"\_") + "%"
            if pattern.endswith("*")
            else pattern
        )
        rows = self._call(
            lambda db: db.execute(
                f"SELECT {_QUEUE_COLUMNS} FROM queues WHERE name LIKE ? ESCAPE '\\' ORDER BY name",
                (like,),
            ).fetchall(),
            read_only=True,
        )
        return [QueueAttributes(**dict(zip(_QUEUE_KEYS, row, strict=True))) for row in rows]

    def max_uncommitted(self) -> int:
        with self._lock:
            self._maxumsgs = self._call(self._read_maxumsgs, read_only=True)
            return self._maxumsgs

    def set_max_uncommitted(self, count: int) -> None:
        """ALTER QMGR MAXUMSGS(count): the most messages one unit of work may get and put
        under syncpoint, from each connection's next unit of work.

        Raises:
            MQError: ``count`` outside 1 to 999,999,999 (MQRC_UNEXPECTED_ERROR names it).
        """
        if not 1 <= count <= MAX_MAXUMSGS:
            raise MQError(f"MAXUMSGS({count}) is outside 1 to {MAX_MAXUMSGS:,}")
        with self._lock:
            self._call(
                lambda db: db.execute(
                    "INSERT OR REPLACE INTO qmgr VALUES ('maxumsgs', ?)", (str(count),)
                )
            )
            self._maxumsgs = count

    def set_dead_letter_queue(self, name: str) -> None:
        """ALTER QMGR DEADQ(name): where messages refused for good go ("" for none). As on
        MQ, the queue need not exist yet."""
        self._call(
            lambda db: db.execute("INSERT OR REPLACE INTO qmgr VALUES ('deadq', ?)", (name,))
        )

    def dead_letter_queue(self) -> str:
        return str(self._call(self._read_deadq, read_only=True))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._puts.clear()
            self._uncommitted = 0
            # On a broken file the lock release below still frees our connection.
            with contextlib.suppress(MQError):
                self._call(self._recover_dead, self.conn_id)
            self._closed = True
            self._db.close()
            self._release_lock()
            # A thread still waiting holds the doorbell and drops it as its wait ends.
            if self._bell_lock.acquire(blocking=False):
                self._drop_bell()
                self._bell_lock.release()
