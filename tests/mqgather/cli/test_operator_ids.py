"""The CorrelId forms an operator may type into `status`, `release`, `extend`, `cancel`."""

from __future__ import annotations

import pytest

from mqgather.cli.operators import operator_id
from mqgather.errors import ConfigError

ORDER = b"ORDER-42".ljust(24, b"\x00")


@pytest.mark.parametrize(
    "typed",
    [
        "ORDER-42",
        "hex:" + ORDER.hex(),
        "hex:4f524445522d3432",  # short hex is NUL-padded as MQ pads it
        ORDER.hex(),
        ORDER.hex().upper(),
        f"X'{ORDER.hex().upper()}'",
        f"  {ORDER.hex()}  ",
    ],
)
def test_every_form_names_the_same_correl_id(typed):
    assert operator_id(typed) == (ORDER, None)


def test_a_workflow_id_names_the_aggregate_too():
    assert operator_id(f"gather:orders:{ORDER.hex()}") == (ORDER, "orders")
    assert operator_id(f"gather:a:b:{ORDER.hex()}") == (ORDER, "a:b")


def test_text_that_only_looks_short_hex_stays_text():
    assert operator_id("CAFE") == (b"CAFE".ljust(24, b"\x00"), None)


@pytest.mark.parametrize("typed", ["X'ZZ'", "hex:12345", "A" * 25, "hex:" + "00" * 25])
def test_a_bad_id_is_refused_naming_it(typed):
    with pytest.raises(ConfigError, match="id"):
        operator_id(typed)
