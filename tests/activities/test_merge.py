"""Merge formats as pure functions."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from activities.merge import LegBodies, MergeError, merge, merge_blob, merge_folders, merge_xml
from mqgather.config import AggregateSpec


def legs(*items: tuple[str, int, bytes]) -> list[LegBodies]:
    return [LegBodies(name, seq, (body,)) for name, seq, body in items]


def test_xml_is_the_ia72_shape_in_sequence_order():
    merged = merge_xml(
        legs(("B", 50, b"<reply>data2</reply>"), ("A", 30, b"<reply>data1</reply>")),
        label="MyReply",
    )
    assert merged.body == (
        b"<MyReply><MyReply30><reply>data1</reply></MyReply30>"
        b"<MyReply50><reply>data2</reply></MyReply50></MyReply>"
    )
    assert merged.format == "MQSTR"


def test_xml_drops_each_replys_declaration_and_dtd():
    body = b'<?xml version="1.0"?>\n<!DOCTYPE reply [<!ELEMENT reply (#PCDATA)>]>\n<reply>x</reply>'
    assert merge_xml(legs(("A", 1, body)), label="R").body == b"<R><R1><reply>x</reply></R1></R>"


@pytest.mark.parametrize(
    "prolog",
    [
        # A ']' inside a literal of the internal subset, which ends no subset.
        '<!DOCTYPE reply [<!ATTLIST reply a CDATA "]x">]>',
        '<!DOCTYPE reply [<!ENTITY e "]>">]>',
        # Comments and processing instructions before (and between) the prolog's parts.
        '<?xml version="1.0"?><!-- made by X --><!DOCTYPE reply>',
        '<?xml version="1.0"?>\n<?xml-stylesheet href="s.xsl"?>\n',
        "\ufeff<?xml version='1.0' encoding='ISO-8859-1'?>",
    ],
)
def test_xml_leaves_out_every_prolog_so_the_response_is_well_formed(prolog):
    # Each was left inside the response's element, which no XML reader then takes.
    body = f"{prolog}<reply>x</reply><!-- after -->".encode()
    merged = merge_xml(legs(("A", 1, body)), label="R")
    assert merged.body == b"<R><R1><reply>x</reply><!-- after --></R1></R>"
    ET.fromstring(merged.body)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        # Its entity is declared in the DOCTYPE the merge leaves out.
        (b'<!DOCTYPE r [<!ENTITY e "x">]><r>&e;</r>', "undefined entity"),
        (b'<?xml version="1.0"?>', "no element found"),
        (b'<!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><r>&x;</r>', "undefined entity"),
    ],
)
def test_xml_refuses_a_body_whose_element_cannot_stand_without_its_prolog(body, reason):
    with pytest.raises(MergeError, match=reason):
        merge_xml(legs(("A", 1, body)), label="R")


def test_xml_rejects_a_body_that_is_not_xml():
    with pytest.raises(MergeError, match="leg A: body is not valid XML"):
        merge_xml(legs(("A", 1, b"<open>")), label="R")


def test_blob_in_sequence_order_with_hex_separator():
    spec = AggregateSpec(name="b", merge="blob", hex_separator="0d0a", separator="ignored")
    merged = merge(
        spec, legs(("C", 30, b"ccc"), ("A", 10, b"aaa"), ("B", 20, b"bbb")),
        correl_id="", state="COMPLETE", missing=[],
    )  # fmt: skip
    assert merged.body == b"aaa\r\nbbb\r\nccc"


def test_blob_of_binary_legs_is_format_none():
    assert merge_blob(legs(("A", 1, b"\x00")), separator=b"|", text=False).format == ""


def test_json_has_legs_as_keys_schema_state_and_missing():
    spec = AggregateSpec(name="j")
    merged = merge(
        spec, legs(("CREDIT", 10, b'{"ok":true}')),
        correl_id="ab", state="TIMEOUT", missing=["STOCK", "TAX"],
    )  # fmt: skip
    assert json.loads(merged.body) == {
        "schema": 1, "correlId": "ab", "state": "TIMEOUT",
        "legs": {"credit": {"ok": True}}, "missing": ["stock", "tax"],
    }  # fmt: skip


def test_json_with_duplicates_all_gives_arrays():
    spec = AggregateSpec(name="j", duplicates="all")
    merged = merge(
        spec, [LegBodies("A", 1, (b"1", b"2"))], correl_id="", state="COMPLETE", missing=[]
    )
    assert json.loads(merged.body)["legs"] == {"a": [1, 2]}


def test_json_rejects_invalid_json():
    with pytest.raises(MergeError, match="leg CREDIT: body is not valid JSON"):
        merge(
            AggregateSpec(name="j"), legs(("CREDIT", 1, b"{nope")),
            correl_id="", state="COMPLETE", missing=[],
        )  # fmt: skip


@pytest.mark.parametrize(
    ("body", "why"),
    [
        # Python's json reads these, and would write them back as no JSON reader takes.
        (b"NaN", "NaN is not JSON"),
        (b'{"rate": Infinity}', "Infinity is not JSON"),
        (b'{"rate": -Infinity}', "-Infinity is not JSON"),
        (b"[1e999]", "1e999 is out of JSON's range"),
        # More digits than Python turns into a number: refused as a merge, not a crash.
        (b"1" * 5000, "integer string conversion"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deep to read"),
        # Valid escapes of a surrogate alone: read, a str that no UTF-8 response holds.
        (b'{"name": "\\udcff"}', "escapes a lone surrogate"),
        (b'["\\uD83D"]', "escapes a lone surrogate"),
    ],
)
def test_json_refuses_what_it_could_not_write_back_as_json(body, why):
    with pytest.raises(MergeError, match=f"leg CREDIT: body is not valid JSON.*{why}"):
        merge(
            AggregateSpec(name="j"), legs(("CREDIT", 1, body)),
            correl_id="", state="COMPLETE", missing=[],
        )  # fmt: skip


def test_json_nested_just_short_of_what_json_reads_fails_the_merge_not_the_worker():
    # Read at a depth the response's own levels then take past what json writes.
    depth = next(n for n in range(2000, 0, -1) if _reads("[" * n + "]" * n))
    with pytest.raises(MergeError, match="a reply nested too deep to write"):
        merge(
            AggregateSpec(name="j"), legs(("CREDIT", 1, b"[" * depth + b"]" * depth)),
            correl_id="", state="COMPLETE", missing=[],
        )  # fmt: skip


def test_folders_embed_as_text_a_body_too_deep_to_write_inside_them():
    from activities.merge import json_or_text

    depth = next(n for n in range(2000, 0, -1)
                 if not isinstance(json_or_text("[" * n + "]" * n), str))  # fmt: skip
    deep = "[" * depth + "]" * depth
    merged = merge_folders([LegBodies("TAXI", 1, (deep.encode(),)),
                            LegBodies("HOTEL", 2, (b'{"id": 2}',))])  # fmt: skip
    assert json.loads(merged.body) == {
        "ComIbmAggregateReplyBody": {"TAXI": deep, "HOTEL": {"id": 2}}
    }


def _reads(text: str) -> bool:
    from activities.merge import _json_value

    try:
        _json_value("CREDIT", text)
    except MergeError:
        return False
    return True


def test_folders_are_the_ace_shape_with_arrays_for_repeats():
    merged = merge_folders(
        [LegBodies("TAXI", 1, (b'{"id":1}', b'{"id":2}')), LegBodies("HOTEL", 2, (b"text",))]
    )
    assert json.loads(merged.body) == {
        "ComIbmAggregateReplyBody": {"TAXI": [{"id": 1}, {"id": 2}], "HOTEL": "text"}
    }


# ------------------------------------------------------------------ character sets


def _leg(name: str, seq: int, text: str, ccsid: int) -> LegBodies:
    from mqgather.ccsid import encode

    return LegBodies(name=name, sequence=seq, bodies=(encode(text, ccsid),), ccsids=(ccsid,))


def test_each_leg_is_read_in_its_own_ccsid():
    legs = [
        _leg("EBC", 10, '{"name": "Müller [1]"}', 37),
        _leg("ZOS", 20, '{"path": "/u/a^b|c"}', 1047),
        _leg("LAT", 30, '{"city": "Zürich"}', 819),
        _leg("PC", 40, '{"note": "façade"}', 850),
    ]
    spec = AggregateSpec(name="x", merge="json")
    merged = merge(spec, legs, correl_id="c", state="COMPLETE", missing=[])
    assert merged.ccsid == 1208
    doc = json.loads(merged.body.decode("utf-8"))
    assert doc["legs"] == {"ebc": {"name": "Müller [1]"}, "zos": {"path": "/u/a^b|c"},
                           "lat": {"city": "Zürich"}, "pc": {"note": "façade"}}  # fmt: skip


def test_the_response_is_written_in_the_declared_ccsid():
    spec = AggregateSpec(name="x", merge="xml", label="R", response_ccsid=500)
    legs = [_leg("A", 10, '<?xml version="1.0" encoding="IBM037"?><a>ü</a>', 37)]
    merged = merge(spec, legs, correl_id="c", state="COMPLETE", missing=[])
    assert merged.ccsid == 500 and merged.body == "<R><R10><a>ü</a></R10></R>".encode("cp500")


def test_an_unknown_or_invalid_ccsid_fails_the_merge_naming_it():
    spec = AggregateSpec(name="x", merge="json")
    unknown = LegBodies(name="A", sequence=1, bodies=(b"{}",), ccsids=(9999,))
    with pytest.raises(MergeError, match=r"leg A: .*CCSID 9999"):
        merge(spec, [unknown], correl_id="c", state="COMPLETE", missing=[])
    invalid = LegBodies(name="B", sequence=1, bodies=(b"\xff{}",), ccsids=(1208,))
    with pytest.raises(MergeError, match=r"leg B: .*not valid CCSID 1208"):
        merge(spec, [invalid], correl_id="c", state="COMPLETE", missing=[])


def test_a_character_the_response_ccsid_cannot_hold_fails_the_merge():
    spec = AggregateSpec(name="x", merge="json", response_ccsid=819)
    with pytest.raises(MergeError, match="cannot be written in CCSID 819"):
        merge(spec, [_leg("A", 1, '{"x": "€"}', 1208)], correl_id="c", state="C", missing=[])


@pytest.mark.parametrize(
    ("fmt", "names", "reason"),
    [
        ("json", ("CREDIT", "credit"), "CREDIT and credit are one key"),
        ("xml", ("A", "A"), "leg A is named twice"),
        ("folders", ("A", "A"), "leg A is named twice"),
    ],
)
def test_legs_that_one_key_would_name_fail_the_merge_not_one_over_the_other(fmt, names, reason):
    spec = AggregateSpec(name="m", merge=fmt)
    both = [LegBodies(name, n, (f"<r>{n}</r>".encode(),)) for n, name in enumerate(names, 1)]
    with pytest.raises(MergeError, match=reason):
        merge(spec, both, correl_id="c", state="COMPLETE", missing=[])


def test_legs_equal_but_for_case_merge_apart_where_no_key_is_lower_cased():
    spec = AggregateSpec(name="m", merge="folders")
    both = [LegBodies("CREDIT", 1, (b"1",)), LegBodies("credit", 2, (b"2",))]
    merged = merge(spec, both, correl_id="c", state="COMPLETE", missing=[])
    assert json.loads(merged.body)["ComIbmAggregateReplyBody"] == {"CREDIT": 1, "credit": 2}


def test_a_surrogate_pair_is_json_and_a_lone_one_is_embedded_as_its_text():
    pair, lone = b'{"s": "\\ud83d\\ude00"}', b'{"s": "\\udcff", "t": "\\\\udcff"}'
    json_merged = merge(AggregateSpec(name="j"), legs(("A", 1, pair)),
                        correl_id="", state="COMPLETE", missing=[])  # fmt: skip
    assert json.loads(json_merged.body)["legs"]["a"] == {"s": "\U0001f600"}
    folders = merge_folders(legs(("A", 1, lone), ("B", 2, pair)))
    assert json.loads(folders.body)["ComIbmAggregateReplyBody"] == {
        "A": lone.decode(),
        "B": {"s": "\U0001f600"},
    }
