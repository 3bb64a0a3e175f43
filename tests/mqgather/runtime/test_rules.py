"""The collector's rules table, on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import pytest

from mqgather.collector_config import CollectorRule, CollectorSpec
from mqgather.errors import ConfigError
from mqgather.runtime.rules import BadRule, RuleCache, RuleError, RuleStore, check_rule


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path) -> RuleStore:
    if request.param == "sqlite":
        return RuleStore(str(tmp_path / "rules.db"))
    url = request.getfixturevalue("postgres_url")
    store = RuleStore(url)
    with store._connect() as db:
        db.execute("DELETE FROM collector_rules")
    return store


def test_set_list_replace_and_delete(store):
    store.set("c", CollectorRule(destination="UK", target_queue="OUT.UK", max_messages=5))
    store.set("c", CollectorRule(destination="France", target_queue="OUT.FR"))
    store.set("other", CollectorRule(destination="UK", target_queue="ELSEWHERE"))
    store.set("c", CollectorRule(destination="UK", target_queue="OUT.UK", max_messages=7,
                                 max_delay_seconds=15, format="json"))  # fmt: skip
    rows = store.rows("c")
    assert [(r.destination, r.max_messages) for r in rows] == [("France", 10), ("UK", 7)]
    assert rows[1].format == "json" and rows[1].max_delay_seconds == 15
    assert store.delete("c", "UK") and not store.delete("c", "UK")
    assert [r.destination for r in store.rows("c")] == ["France"]
    assert [r.target_queue for r in store.rows("other")] == ["ELSEWHERE"]


def test_a_row_written_by_hand_that_breaks_a_rule_is_reported_with_its_column(store):
    store.set("c", CollectorRule(destination="Odd", target_queue="OUT"))
    with store._connect() as db:
        db.execute("UPDATE collector_rules SET max_messages = 0 WHERE destination = 'Odd'")
    (row,) = store.rows("c")
    assert isinstance(row, BadRule) and "column max_messages" in row.problem
    # A target queue MQ would not take: every batch's PUT would fail, so the row is bad.
    with store._connect() as db:
        db.execute("UPDATE collector_rules SET max_messages = 5, target_queue = 'OUT-UK'")
    (row,) = store.rows("c")
    assert isinstance(row, BadRule) and row.problem.startswith("column target_queue: '-'")


def test_an_invalid_rule_is_refused_naming_the_column():
    with pytest.raises(RuleError) as info:
        check_rule({"destination": "X", "target_queue": "Q", "format": "yaml"})
    assert "column format" in str(info.value)
    with pytest.raises(RuleError) as info:
        check_rule({"destination": "X", "target_queue": "Q", "max_delay_seconds": 0})
    assert "column max_delay_seconds" in str(info.value)
    with pytest.raises(RuleError) as info:
        check_rule({"destination": "X", "target_queue": "OUT UK"})
    assert "column target_queue: ' ' cannot stand in an MQ queue name" in str(info.value)


def test_the_cache_reads_changes_after_its_refresh_and_falls_back_to_the_default(tmp_path):
    spec = CollectorSpec(name="c", rules_db=str(tmp_path / "r.db"), rule_refresh_seconds=0.2)
    cache = RuleCache(spec)
    assert cache.rule_for("UK").target_queue == spec.default_queue
    cache.store.set("c", CollectorRule(destination="UK", target_queue="OUT.UK"))
    cache.refresh(force=True)
    assert cache.rule_for("UK").target_queue == "OUT.UK"
    assert cache.rule_for("Else").max_messages == 10  # seed 002's default


def test_a_missing_directory_or_unreachable_server_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="rules_db"):
        RuleStore(str(tmp_path / "nowhere" / "rules.db"))
    with pytest.raises(ConfigError, match="rules_db"):
        RuleStore("postgresql://nobody@127.0.0.1:1/none")


def test_an_unreadable_database_keeps_the_last_rules_in_force(tmp_path, caplog):
    path = tmp_path / "r.db"
    spec = CollectorSpec(name="c", rules_db=str(path), rule_refresh_seconds=0.2)
    cache = RuleCache(spec)
    cache.store.set("c", CollectorRule(destination="UK", target_queue="OUT.UK"))
    cache.refresh()
    path.write_bytes(b"not a database at all" * 100)  # an operator's mistake, a bad disk
    cache.refresh(force=True)  # no error: the bridge goes on batching
    assert cache.rule_for("UK").target_queue == "OUT.UK"
    assert "rules of collector c not read, the last ones stay" in caplog.text
    assert str(path) in caplog.text
    with pytest.raises(ConfigError, match="rules_db"):  # never read: nothing to go by
        RuleCache(spec, store=cache.store).refresh()
