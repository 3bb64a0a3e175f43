"""Completion rules: parsing (errors name the column) and what each kind holds for."""

from __future__ import annotations

import itertools

import pytest

from mqgather.completion import RuleError, parse_rule
from mqgather.config import AggregateSpec, LegSpec, parse_config
from mqgather.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "have", "holds"),
    [
        ("all", {"A", "B"}, True),
        ("all", {"A"}, False),
        ("any", {"B"}, True),
        ("any", set(), False),
        ("quorum:2", {"A", "C"}, True),
        ("quorum:2", {"C"}, False),
        ("CREDIT and (STOCK or STOCK_ALT)", {"CREDIT", "STOCK_ALT"}, True),
        ("CREDIT and (STOCK or STOCK_ALT)", {"STOCK", "STOCK_ALT"}, False),
        ("CREDIT and STOCK or TAX", {"TAX"}, True),  # and binds tighter than or
        ("CREDIT AND (STOCK Or TAX)", {"CREDIT", "TAX"}, True),
        ("leg-1.v2 and x_y", {"leg-1.v2", "x_y"}, True),
    ],
)
def test_each_kind_holds_as_it_says(text, have, holds):
    assert parse_rule(text).holds(have, required={"A", "B"}) is holds


def test_an_expression_names_its_legs():
    rule = parse_rule("CREDIT and (STOCK or (STOCK_ALT and TAX))")
    assert rule.names() == {"CREDIT", "STOCK", "STOCK_ALT", "TAX"}
    assert rule.kind == "expression"


@pytest.mark.parametrize(
    ("text", "column", "reason"),
    [
        ("CREDIT and (STOCK", 18, "'(' at column 12 is not closed"),
        ("CREDIT and", 11, "found the end"),
        ("CREDIT STOCK", 8, "expected and/or, found 'STOCK'"),
        ("CREDIT & STOCK", 8, "unexpected '&'"),
        ("__import__('os')", 12, "unexpected"),
        ("quorum:0", 8, "at least 1"),
        ("quorum:two", 8, "whole number"),
        ("", 1, "empty rule"),
        ("(CREDIT))", 9, "found ')'"),
        ("not CREDIT", 5, "found 'CREDIT'"),
        # str.isdigit takes these; int() refuses the first and reads the second as 1.
        ("quorum:²", 8, "whole number"),
        ("quorum:\u0661", 8, "whole number"),
        ("quorum:" + "0" * 5000, 8, "at least 1"),
        ("quorum:5001", 8, "more than the 5000 legs"),
        # More digits than int() converts.
        ("quorum:" + "9" * 5000, 8, "more than the 5000 legs"),
        ("(" * 33 + "A" + ")" * 33, 33, "nested over 32 deep"),
        ("(" * 100_000 + "A" + ")" * 100_000, 33, "nested over 32 deep"),
    ],
)
def test_a_bad_rule_names_the_column(text, column, reason):
    with pytest.raises(RuleError) as info:
        parse_rule(text)
    assert info.value.column == column and reason in str(info.value)


def test_a_rule_at_the_limits_parses():
    assert parse_rule("quorum:5000").quorum == 5000
    assert parse_rule("quorum:0002").quorum == 2
    assert parse_rule("(" * 32 + "A" + ")" * 32).names() == {"A"}


def test_rules_are_monotone_one_more_reply_never_breaks_one():
    rule = parse_rule("A and (B or C) or D")
    legs = ["A", "B", "C", "D"]
    for size in range(len(legs) + 1):
        for have in itertools.combinations(legs, size):
            if rule.holds(have, ()):
                assert all(rule.holds({*have, more}, ()) for more in legs)


LEGS = [{"name": "CREDIT"}, {"name": "STOCK"}, {"name": "STOCK_ALT"}]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"complete_when": "CREDIT and TAX"}, "complete_when: TAX is not a leg"),
        ({"complete_when": "quorum:4"}, "complete_when: quorum 4 is more than the 3 legs"),
        ({"complete_when": "CREDIT or (STOCK"}, "complete_when"),
        ({"complete_when": "quorum:²"}, "complete_when: 'quorum:²', column 8"),
        ({"complete_when": "(" * 5000 + "CREDIT" + ")" * 5000}, "nested over 32 deep"),
        (
            {"mode": "static", "legs": [{"name": "CREDIT", "retries": 2}]},
            "legs.0.retries: a static aggregate sends no requests",
        ),
        ({"legs": [], "complete_when": "CREDIT"}, "the aggregate must list them"),
        ({"legs": [{"name": "CREDIT", "timeout_seconds": 0}]}, "timeout_seconds"),
        ({"legs": [{"name": "CREDIT", "retries": 11}]}, "retries"),
    ],
)
def test_a_rule_that_does_not_fit_is_refused_at_load_naming_the_key(changes, message):
    table = {"legs": LEGS, **changes}
    with pytest.raises(ConfigError) as info:
        parse_config({"aggregates": {"quotes": table}}, "mqgather.toml")
    text = str(info.value)
    assert text.startswith("mqgather.toml:") and "aggregates.quotes" in text
    assert message in text


def test_a_valid_rule_and_leg_clocks_load():
    config = parse_config(
        {
            "aggregates": {
                "quotes": {
                    "complete_when": " CREDIT and (STOCK or STOCK_ALT) ",
                    "legs": [
                        {"name": "CREDIT", "retries": 2, "retry_after_seconds": 1.5},
                        {"name": "STOCK", "timeout_seconds": 3},
                        {"name": "STOCK_ALT", "required": False},
                    ],
                }
            }
        },
        "mqgather.toml",
    )
    spec = config.aggregate("quotes")
    assert spec.complete_when == "CREDIT and (STOCK or STOCK_ALT)"
    assert spec.legs[0].retries == 2 and spec.legs[1].timeout_seconds == 3
    assert [leg.needed(spec.rule().kind) for leg in spec.legs] == [False, False, False]
    assert spec.legs[2].optional()
    default = AggregateSpec(name="x", legs=(LegSpec(name="A"),))
    assert default.complete_when == "all" and default.legs[0].needed("all")
