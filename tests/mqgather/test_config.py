"""The configuration file: valid files load; invalid ones fail naming the key."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from mqgather import config as config_module
from mqgather.config import AggregateSpec, LegSpec, load_config, shared_spec
from mqgather.constants import MAX_EXPIRY_TENTHS
from mqgather.errors import ConfigError

GOOD = """
[queues."APP.REPLIES"]
maxdepth = 20000
bothresh = 2
boqname = "APP.BACKOUT"

[aggregates.travel]
reply_queue = "APP.REPLIES"
merge = "xml"
label = "Trip"
timeout_seconds = 15
timer = "restart"
legs = [{name = "FLIGHT", sequence = 10}, {name = "HOTEL", sequence = 20}]
"""


def test_a_valid_file_loads(tmp_path):
    path = tmp_path / "mqgather.toml"
    path.write_text(GOOD)
    config = load_config(path)
    travel = config.aggregate("travel")
    assert travel.name == "travel" and travel.timer == "restart"
    assert [leg.name for leg in travel.legs] == ["FLIGHT", "HOTEL"]
    assert config.queues["APP.REPLIES"].bothresh == 2


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[aggregates.a]\nmerge = "csv"', "aggregates.a.merge"),
        ("[aggregates.a]\ntimeout_seconds = -1", "aggregates.a.timeout_seconds"),
        ('[aggregates.a]\nhex_separator = "zz"', "aggregates.a.hex_separator"),
        ('[aggregates.a]\nmode = "static"', "static mode needs the legs"),
        ('[aggregates.a]\nlegs = [{name="X"}, {name="X"}]', "leg names must be unique"),
        # The json merge keys legs in lower case: one reply would be written over the other.
        (
            '[aggregates.a]\nmerge = "json"\nlegs = [{name="CREDIT"}, {name="credit"}]',
            "aggregates.a.legs: legs CREDIT and credit are one key in the json merge",
        ),
        ('[aggregates.a]\ncolour = "red"', "aggregates.a.colour"),
        ("[queues.Q]\nmaxdepth = -5", "queues.Q.maxdepth"),
        # Waits and retentions no timer or MQ Expiry keeps (TOML writes infinity as inf):
        ("[aggregates.a]\ntimeout_seconds = inf", "aggregates.a.timeout_seconds"),
        ("[aggregates.a]\nunknown_timeout_seconds = 1e12", "unknown_timeout_seconds"),
        ("[aggregates.a]\nlate_window_seconds = inf", "aggregates.a.late_window_seconds"),
        ("[aggregates.a]\nledger_hours = 30000", "aggregates.a.ledger_hours"),
        ("[aggregates.a]\nlegs = [{name='X', timeout_seconds=inf}]", "legs.0.timeout_seconds"),
        (
            "[aggregates.a]\nlegs = [{name='X', retries=10, retry_backoff=10}]",
            "the last re-request would wait 5e+09 s",
        ),
        ("[collectors.c]\nledger_hours = inf", "collectors.c.ledger_hours"),
        # collect:c:x:y is collector c's destination x:y and collector c:x's destination y.
        (
            "[collectors.c]\n[collectors.'c:x']\ninput_queue = 'CMAIN2'",
            "collectors.c:x: its name begins with collector c's and ':'",
        ),
        # More legs than a gather holds:
        (
            "[aggregates.a]\nlegs = [" + ",".join(f"{{name='L{i}'}}" for i in range(5001)) + "]",
            "aggregates.a.legs: 5,001 of them, more than 5,000",
        ),
        (
            "[aggregates.a]\nmode = 'static'\nleg_identification = 'group'\nmax_group_size = 5001",
            "aggregates.a.max_group_size",
        ),
        # Queue attributes MQ takes (its PCF carries them as MQLONGs):
        ("[queues.Q]\nmaxdepth = 1_000_000_000", "queues.Q.maxdepth"),
        ("[queues.Q]\nbothresh = 3_000_000_000", "queues.Q.bothresh"),
        ("[queues.Q]\nmaxmsgl = 104_857_601", "queues.Q.maxmsgl"),
        ("[collectors.c]\ndefault_max_delay_seconds = 1e9", "default_max_delay_seconds"),
        ("[collectors.c]\ndefault_max_bytes = 1_000_000_000", "collectors.c.default_max_bytes"),
        ("not toml at all [", "not valid TOML"),
        # A leg property MQ would refuse on every request (MQSETMP, 2442):
        ("[aggregates.a]\nleg_property = 'leg-name'",
         "aggregates.a.leg_property: '-' cannot stand in a property name"),
        ("[aggregates.a]\nleg_property = 'Null'", "'Null' is a selector keyword"),
        ("[aggregates.a]\nleg_property = ''", "a property name is 1 to 4,095 characters"),
        # A queue sent to that is also the one read: what goes there comes straight back.
        ('[aggregates.a]\nfailure_queue = "GATHER.IN"', "failure_queue: GATHER.IN is also"),
        ('[aggregates.a]\nreply_queue = "R"\nreport_queue = "R"', "report_queue: R is also"),
        ("[aggregates.a]\nreply_queue = 'R'\nlegs = [{name='X', request_queue='R'}]",
         "legs.0.request_queue: R is also reply_queue"),
        ("[aggregates.a]\ndestination = 'destinationList'\ndestination_list = ['GATHER.IN']",
         "destination_list: GATHER.IN is also reply_queue"),
        ('[collectors.c]\ninput_queue = "IN"\nfailure_queue = "IN"', "failure_queue: IN is also"),
        # Set aside onto another bridge's input: set aside again, back and forth.
        ("[aggregates.a]\nfailure_queue = 'B.IN'\n[aggregates.b]\nreply_queue = 'B.IN'",
         "aggregates.a.failure_queue: B.IN is also aggregates.b.reply_queue"),
        ("[aggregates.a]\n[collectors.c]\nfailure_queue = 'GATHER.IN'",
         "collectors.c.failure_queue: GATHER.IN is also aggregates.a.reply_queue"),
        # Queue names MQ does not allow (DEFINE and MQOPEN refuse them):
        ("[aggregates.a]\nresponse_queue = 'ORDER RESPONSE'",
         "queue 'ORDER RESPONSE' (responses of aggregate a): ' ' cannot stand in an MQ queue name"),
        ("[aggregates.a]\nlegs = [{name='CREDIT-CHECK'}]",
         "(CREDIT-CHECK requests of aggregate a): '-' cannot stand in an MQ queue name: only "
         "A-Z, a-z, 0-9 and . / _ %; give the leg a request_queue"),
        (f"[aggregates.a]\nlegs = [{{name='{'L' * 41}'}}]",
         f"'BACKEND.{'L' * 41}' ({'L' * 41} requests of aggregate a): 49 characters; MQ names "
         "are at most 48; give the leg a request_queue"),
        ("[queues.'IN.Q']\nboqname = 'IN#BACKOUT'", "'IN#BACKOUT' (BOQNAME of IN.Q)"),
        ("[collectors.c]\ninput_queue = 'größe'", "(messages to batch of collector c)"),
    ],
)  # fmt: skip
def test_invalid_files_name_the_key_and_reason(tmp_path, text, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert fragment in str(info.value) and str(path) in str(info.value)


def test_a_file_an_editor_saved_with_a_byte_order_mark_loads(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes("\ufeff# café\n[aggregates.a]\ntimeout_seconds = 30\n".encode())
    assert load_config(path).aggregate("a").timeout_seconds == 30


@pytest.mark.parametrize("codec", ["utf-16", "latin-1"])
def test_a_file_not_in_utf8_says_so_and_how_to_mend_it(tmp_path, codec):
    path = tmp_path / "other.toml"
    path.write_bytes("# café\n[aggregates.a]\n".encode(codec))
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert str(path) in str(refused.value) and "TOML is UTF-8; save it so" in str(refused.value)


def test_the_longest_values_each_limit_allows_load_as_written(tmp_path):
    path = tmp_path / "long.toml"
    path.write_text(
        "[aggregates.a]\ntimeout_seconds = 31622400\nledger_hours = 27777\n"
        "legs = [{name='X', retries=1, retry_after_seconds=31622400}]\n"
        "[collectors.c]\ndefault_max_delay_seconds = 604800\n"
    )
    config = load_config(path)
    spec, collector = config.aggregate("a"), config.collectors["c"]
    # 366 days, to the second: the limit is a wait a timer keeps, not an approximation.
    assert spec.timeout_seconds == spec.legs[0].retry_after_seconds == 366 * 24 * 3600
    # The ledger's marker Expiry, in tenths, is one MQ takes.
    assert int(spec.ledger_hours * 36_000) <= MAX_EXPIRY_TENTHS
    # A destination without a rule gets the collector's defaults as a valid rule.
    assert collector.default_rule("ANY").max_delay_seconds == 604800


def test_missing_named_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "absent.toml")


def test_unknown_aggregate_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"aggregates\.nope: no such aggregate \(known: orders\)"):
        load_config().aggregate("nope")


def test_cli_fails_at_start_on_an_invalid_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[aggregates.a]\nduplicates = "some"')
    out = subprocess.run(
        [sys.executable, "-m", "mqgather.cli", "bridge", "--config", str(path)],
        capture_output=True, timeout=60,
    )  # fmt: skip
    err = out.stderr.decode()
    assert out.returncode != 0 and "Traceback" not in err
    assert "aggregates.a.duplicates" in err


def _guide_example() -> dict:
    import re
    import tomllib
    from pathlib import Path

    guide = (Path(__file__).parents[2] / "docs" / "guides" / "configuration.md").read_text()
    block = re.search(r"```toml\n(\[queues\..*?)```", guide, re.S)
    assert block, "the configuration guide's example configuration is gone"
    return tomllib.loads(block.group(1))


def test_queues_setup_defines_every_queue_the_guide_example_names(tmp_path):
    from bridge.mq.admin import setup_queues
    from bridge.mq.local_qm import LocalQueueManager
    from mqgather.config import parse_config, referenced_queues

    config = parse_config(_guide_example(), "docs/guides/configuration.md")
    wanted = referenced_queues(config)
    for queue in ("APP.REPLIES", "APP.BACKOUT", "FLIGHT.REQ", "BACKEND.HOTEL", "TRIP.RESPONSE"):
        assert queue in wanted
    assert wanted["APP.BACKOUT"] == "BOQNAME of APP.REPLIES"
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        defined = setup_queues(qm, config)
        assert set(defined) == set(wanted)
        assert {q.name for q in qm.list_queues("*")} >= set(wanted)
        # A second run only updates what [queues] defines.
        assert setup_queues(qm, config) == ["APP.REPLIES"]


def test_a_gathers_response_may_feed_another_gather(tmp_path):
    # Nested scatter-gather: one aggregate's response is a reply of another's.
    path = tmp_path / "chained.toml"
    path.write_text("[aggregates.inner]\nresponse_queue = 'OUTER.IN'\n"
                    "[aggregates.outer]\nreply_queue = 'OUTER.IN'\n")  # fmt: skip
    config = load_config(path)
    assert config.aggregate("inner").response_queue == config.aggregate("outer").reply_queue


def test_equal_specs_share_one_instance_and_the_table_is_bounded(monkeypatch):
    monkeypatch.setattr(config_module, "_shared_specs", {})
    legs = (LegSpec(name="A", sequence=1), LegSpec(name="B", sequence=2))
    first = shared_spec(AggregateSpec(name="orders", legs=legs))
    again = shared_spec(AggregateSpec(name="orders", legs=legs))
    other = shared_spec(AggregateSpec(name="orders", legs=legs, timeout_seconds=7))
    assert again is first
    assert other is not first and other.timeout_seconds == 7
    monkeypatch.setattr(config_module, "SHARED_SPECS_MAX", 2)
    third = shared_spec(AggregateSpec(name="stock"))
    # Past its bound the table starts again: a spec kept before is a new one's now.
    assert shared_spec(AggregateSpec(name="stock")) is third
    assert shared_spec(AggregateSpec(name="orders", legs=legs)) is not first


def test_gathers_decoded_apart_share_their_aggregates_spec():
    from workflows.models import GatherInput, start_input

    spec = AggregateSpec(name="shared", legs=(LegSpec(name="A", sequence=1),))
    data = start_input(spec, b"c" * 24).model_dump_json()
    one, two = (GatherInput.model_validate_json(data) for _ in range(2))
    assert one.aggregate is two.aggregate
    assert one.aggregate == spec


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("leg", None), ("x.y", None), ("$amount", None), ("café_2", None), ("mq_usr.a.b", None),
        ("mqgather_state", None), ("JMSType", None), ("Root.MQMD.Priority", None),
        ("a\x00b", None),  # Java lets a NUL stand inside an identifier
        ("2leg", "cannot begin with '2'"), (".leg", "cannot begin with '.'"),
        ("leg name", "' ' cannot stand"), ("a=b", "'=' cannot stand"), ("a..b", "a dot"),
        ("leg.", "a dot"), ("JMSLeg", "JMS"), ("usr.JMSx", "JMS"), ("usr.or", "keyword"),
        ("Body.x", "Body or Root"), ("RootLeg", "Body or Root"), ("MQ.a.b", "one dot"),
        ("le\U0001f600g", "beyond"), ("x" * 4096, "4,096"),
    ],
)  # fmt: skip
def test_a_property_name_is_refused_where_ibm_mq_refuses_it(name, why):
    from mqgather.limits import property_name_problem

    problem = property_name_problem(name)
    if why is None:
        assert problem is None
    else:
        assert problem is not None and why in problem


def test_scatter_refuses_a_leg_property_mq_would_refuse_before_it_puts_anything():
    from bridge.fanout import ScatterError, scatter

    spec = AggregateSpec(name="a", leg_property="leg name", legs=(LegSpec(name="X"),))
    with pytest.raises(ScatterError, match="aggregate a: leg_property: ' ' cannot stand"):
        asyncio.run(scatter(None, None, spec))  # type: ignore[arg-type]


def test_a_leg_whose_name_is_not_a_queue_name_loads_with_a_request_queue(tmp_path):
    path = tmp_path / "ok.toml"
    path.write_text(
        "[aggregates.a]\nlegs = [{name='CREDIT-CHECK', request_queue='BACKEND.CREDIT'}]"
    )
    assert load_config(path).aggregates["a"].legs[0].queue() == "BACKEND.CREDIT"
