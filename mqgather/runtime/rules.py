"""The collector's rules table, in SQLite (embedded) or PostgreSQL (production).

One table, ``collector_rules``, one row per collector and destination. Rows are checked
when read, so a row written by hand that breaks a rule is reported with its column and
reason and its messages go to the failure queue, never into a batch under a wrong rule.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from mqgather.collector_config import CollectorRule, CollectorSpec
from mqgather.config import is_state_dir, state_file
from mqgather.errors import ConfigError, first_problem
from mqgather.limits import queue_name_problem

log = logging.getLogger("mqgather.collector")

COLUMNS = (
    "destination",
    "target_queue",
    "max_messages",
    "max_delay_seconds",
    "max_bytes",
    "format",
    "separator",
)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS collector_rules (
    collector TEXT NOT NULL,
    destination TEXT NOT NULL,
    target_queue TEXT NOT NULL,
    max_messages INTEGER NOT NULL,
    max_delay_seconds DOUBLE PRECISION NOT NULL,
    max_bytes INTEGER NOT NULL,
    format TEXT NOT NULL,
    separator TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (collector, destination)
)
"""


class RuleError(ConfigError):
    """A rule breaks a constraint; the message names the column and the reason."""


def rule_problem(exc: ValidationError) -> str:
    """The first failed constraint of a rule as ``column: reason``."""
    return f"column {first_problem(exc, 'rule')}"


def check_rule(values: dict[str, Any]) -> CollectorRule:
    """Build a rule from column values.

    Raises:
        RuleError: naming the column at fault and why.
    """
    destination = values.get("destination", "?")
    try:
        rule = CollectorRule.model_validate(values)
    except ValidationError as exc:
        raise RuleError(f"rule {destination!r}", rule_problem(exc)) from exc
    # Checked here, where a rule enters (set, or read from the table), not by the model,
    # which a collector's recorded history decodes as it ran.
    if problem := queue_name_problem(rule.target_queue):
        raise RuleError(f"rule {destination!r}", f"column target_queue: {problem}")
    return rule


@dataclass(frozen=True)
class BadRule:
    """A row that is not a valid rule, and why."""

    destination: str
    problem: str


class RuleStore:
    """Reads and writes the rules of one database.

    Args:
        url: a SQLite file path (``sqlite:`` prefix optional), or a ``postgresql://`` URL.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.postgres = url.startswith(("postgresql://", "postgres://"))
        if not self.postgres:
            path = state_file(url.removeprefix("sqlite:"), "rules_db", "a rules database")
            if is_state_dir(path.parent):
                path.parent.mkdir(exist_ok=True)
            self._path = path
        with self._connect() as db:
            db.execute(_SCHEMA)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[Any]:
        """One transaction, committed at the end, rolled back on an error."""
        if self.postgres:
            try:
                import psycopg
            except ImportError as exc:
                raise ConfigError(
                    "rules_db", "PostgreSQL needs psycopg: pip install 'mqgather[postgres]'"
                ) from exc
            try:
                conn = psycopg.connect(self.url, connect_timeout=10)
            except psycopg.Error as exc:
                raise ConfigError("rules_db", f"cannot connect to PostgreSQL: {exc}") from exc
            with conn:  # commits, or rolls back on an exception, and closes
                yield conn
            return
        try:
            lite = sqlite3.connect(self._path, timeout=30)
        except sqlite3.Error as exc:
            raise ConfigError("rules_db", f"cannot open {self._path}: {exc}") from exc
        try:
            with lite:
                yield lite
        except sqlite3.Error as exc:
            raise ConfigError("rules_db", f"{self._path}: {exc}") from exc
        finally:
            lite.close()

    def _sql(self, text: str) -> str:
        return text.replace("?", "%s") if self.postgres else text

    def rows(self, collector: str) -> list[CollectorRule | BadRule]:
        """Every rule of a collector, by destination; invalid rows as :class:`BadRule`."""
        with self._connect() as db:
            found = db.execute(
                self._sql(
                    f"SELECT {', '.join(COLUMNS)} FROM collector_rules "
                    "WHERE collector = ? ORDER BY destination"
                ),
                (collector,),
            ).fetchall()
        out: list[CollectorRule | BadRule] = []
        for row in found:
            values = dict(zip(COLUMNS, row, strict=True))
            try:
                out.append(check_rule(values))
            except RuleError as exc:
                out.append(BadRule(str(values["destination"]), exc.reason))
        return out

    def set(self, collector: str, rule: CollectorRule) -> None:
        """Insert or replace a destination's rule."""
        values = [rule.model_dump()[c] for c in COLUMNS]
        updates = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS[1:])
        with self._connect() as db:
            db.execute(
                self._sql(
                    f"INSERT INTO collector_rules (collector, {', '.join(COLUMNS)}) "
                    f"VALUES (?, {', '.join('?' for _ in COLUMNS)}) "
                    f"ON CONFLICT (collector, destination) DO UPDATE SET {updates}"
                ),
                (collector, *values),
            )

    def delete(self, collector: str, destination: str) -> bool:
        """Remove a destination's rule; whether there was one."""
        with self._connect() as db:
            cursor = db.execute(
                self._sql("DELETE FROM collector_rules WHERE collector = ? AND destination = ?"),
                (collector, destination),
            )
            return bool(cursor.rowcount)


class RuleCache:
    """The rules a bridge applies, read again from the database every
    ``rule_refresh_seconds``: a change reaches new batches within that time. While the
    database cannot be read, the rules last read stay in force."""

    def __init__(self, spec: CollectorSpec, store: RuleStore | None = None) -> None:
        self.spec = spec
        self.store = store or RuleStore(spec.rules_db)
        self._rules: dict[str, CollectorRule | BadRule] = {}
        self._loaded: float | None = None
        self._failing = False

    def refresh(self, force: bool = False) -> None:
        """Read the table again if the copy is older than the refresh interval.

        Raises:
            ConfigError: the table has never been read and cannot be now.
        """
        now = time.monotonic()
        fresh = self._loaded is not None and now - self._loaded < self.spec.rule_refresh_seconds
        if fresh and not force:
            return
        try:
            rows = self.store.rows(self.spec.name)
        except ConfigError as exc:
            if self._loaded is None:
                raise
            # Batching goes on by the last rules; the next look is an interval away.
            if not self._failing:
                log.warning("rules of collector %s not read, the last ones stay: %s",
                            self.spec.name, exc)  # fmt: skip
            self._failing, self._loaded = True, now
            return
        if self._failing:
            log.warning("rules of collector %s read again", self.spec.name)
        self._rules = {r.destination: r for r in rows}
        self._loaded, self._failing = now, False

    def rule_for(self, destination: str) -> CollectorRule | BadRule:
        """The destination's rule as of the last :meth:`refresh` (no database read here:
        the bridge refreshes once per MQ batch), the default rule when it has none, or
        why its row is invalid."""
        rule = self._rules.get(destination)
        if rule is None:
            # Kept until the next refresh, so a busy destination without a row does not
            # build its default rule for every message.
            rule = self._rules[destination] = self.spec.default_rule(destination)
        return rule
