"""Merge formats: pure functions from the received legs to one response body.

Text formats (json, xml, folders) read each reply in its own CCSID and write the
response in the aggregate's ``response_ccsid``; blob joins the bytes as they are."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from xml.parsers import expat

from mqgather.ccsid import CCSID_UTF8, CCSIDError, decode, encode
from mqgather.config import AggregateSpec, leg_name_clash
from mqgather.errors import MQGatherError

JSON_SCHEMA_VERSION = 1


class MergeError(MQGatherError):
    """A leg's body is not valid for the aggregate's merge format."""

    def __init__(self, leg: str, fmt: str, reason: str) -> None:
        self.leg = leg
        super().__init__(f"leg {leg}: body is not valid {fmt} ({reason})")


class LegsClash(MergeError):
    """The gather's legs cannot be merged apart: a leg named twice, or two that one key
    of the json merge would name."""

    def __init__(self, reason: str) -> None:
        self.leg = ""
        MQGatherError.__init__(self, f"the legs cannot be merged: {reason}")


@dataclass(frozen=True)
class LegBodies:
    """The bodies that filled one leg (several only with duplicates=all), with the CCSID
    of each (UTF-8 where not given)."""

    name: str
    sequence: int
    bodies: tuple[bytes, ...]
    ccsids: tuple[int, ...] = ()

    def texts(self, fmt: str, *, lenient: bool = False) -> list[str]:
        """Each body as text, read in its CCSID (``lenient``: invalid bytes replaced).

        Raises:
            MergeError: a CCSID mqgather cannot read, or (not lenient) bytes not valid in it.
        """
        ccsids = self.ccsids or (CCSID_UTF8,) * len(self.bodies)
        pairs = zip(self.bodies, ccsids, strict=True)
        try:
            return [decode(body, ccsid, lenient=lenient) for body, ccsid in pairs]
        except CCSIDError as exc:
            raise MergeError(self.name, fmt, str(exc)) from exc


@dataclass(frozen=True)
class Merged:
    """A merged response: body, MQMD Format and CodedCharSetId."""

    body: bytes
    format: str
    ccsid: int = CCSID_UTF8


def _written(text: str, ccsid: int) -> Merged:
    try:
        return Merged(encode(text, ccsid), "MQSTR", ccsid)
    except CCSIDError as exc:
        raise MergeError("(response)", f"CCSID {ccsid} text", str(exc)) from exc


def _ordered(legs: Sequence[LegBodies]) -> list[LegBodies]:
    # Sequence order (IA72 SequenceNumber); equal numbers keep leg order.
    return sorted(legs, key=lambda leg: leg.sequence)


def _not_json(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")


def _finite(token: str) -> float:
    value = float(token)
    if math.isinf(value):
        raise ValueError(f"{token} is out of JSON's range")
    return value


#: A JSON escape of a UTF-16 surrogate: json reads a lone one into a str no UTF-8 holds.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _strict_json(text: str) -> Any:
    """``text``'s value as strict JSON (RFC 8259), one that can be written back as JSON
    in UTF-8.

    Raises:
        ValueError: NaN, Infinity, a number out of range or json cannot hold, a string
            escaping a lone surrogate, or not JSON at all.
        RecursionError: nested too deep to read.
    """
    value = json.loads(text, parse_constant=_not_json, parse_float=_finite)
    # Looked for only where an escape of one is (a pair becomes one character).
    if _SURROGATE_ESCAPE.search(text):
        try:
            _dumps(value).encode()
        except UnicodeEncodeError:
            raise ValueError("a string escapes a lone surrogate, which no text holds") from None
    return value


def json_or_text(text: str) -> Any:
    """A body's JSON value, or its text when it is not strict JSON (:func:`_strict_json`):
    NaN, Infinity, a number out of range, a lone surrogate or nesting too deep to read
    are text, so the document written from it is always valid JSON."""
    try:
        return _strict_json(text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        return text


def _json_value(leg: str, text: str) -> Any:
    """A leg's body as strict JSON (RFC 8259): NaN, Infinity, a number out of range or
    a lone surrogate would be written back as no JSON reader takes them, so they are
    refused here."""
    try:
        return _strict_json(text)
    except RecursionError:
        raise MergeError(leg, "JSON", "nested too deep to read") from None
    except ValueError as exc:  # JSONDecodeError, and a number json cannot hold
        raise MergeError(leg, "JSON", str(exc)) from exc


def _dumps(doc: Any, separators: tuple[str, str] = (",", ":")) -> str:
    return json.dumps(doc, separators=separators, ensure_ascii=False, allow_nan=False)


def _json_text(doc: dict[str, Any], ccsid: int) -> Merged:
    try:
        text = _dumps(doc)
    except RecursionError:
        # A body nested just short of what json reads, inside the response's own levels.
        raise MergeError("(response)", "JSON", "a reply nested too deep to write") from None
    return _written(text, ccsid)


def merge_json(
    legs: Sequence[LegBodies],
    *,
    correl_id: str,
    state: str,
    missing: Sequence[str],
    many: bool,
    ccsid: int = CCSID_UTF8,
) -> Merged:
    """``{"schema": 1, "correlId", "state", "legs": {"credit": {...}}, "missing": [...]}``.

    Leg keys are the leg names in lower case; with ``many`` (duplicates=all) each
    value is an array of the replies.
    """
    out: dict[str, Any] = {}
    for leg in legs:
        values = [_json_value(leg.name, text) for text in leg.texts("JSON")]
        out[leg.name.lower()] = values if many else values[0]
    doc = {
        "schema": JSON_SCHEMA_VERSION,
        "correlId": correl_id,
        "state": state,
        "legs": out,
        "missing": [name.lower() for name in missing],
    }
    return _json_text(doc, ccsid)


class _RootFound(Exception):
    """Stops the parse at the root element's start tag."""

    def __init__(self, at: int) -> None:
        self.at = at


def _root_element(text: str) -> str:
    """``text`` from its root element on: the prolog before it (the XML declaration,
    comments, processing instructions, a DOCTYPE whatever its internal subset holds)
    left out, as the parser reads it, since no part of a prolog may stand inside an
    element of the response.

    Raises:
        ET.ParseError: the prolog is not well-formed, or no element follows it.
    """
    parser = expat.ParserCreate()

    def found(name: str, attributes: object) -> None:
        raise _RootFound(parser.CurrentByteIndex)

    parser.StartElementHandler = found
    try:
        parser.Parse(text, True)  # a str is parsed as UTF-8, and so indexed
    except _RootFound as root:
        return text.encode()[root.at :].decode()
    except expat.ExpatError as exc:
        raise ET.ParseError(str(exc)) from None
    raise ET.ParseError("no element found")


def xml_element(text: str) -> str:
    """An XML document's text as one element to stand inside another's: its prolog left
    out (:func:`_root_element`).

    Raises:
        ET.ParseError: it is not one well-formed element once its prolog is left out (an
            entity its DOCTYPE declared is undefined without it).
    """
    fragment = text.strip()
    if fragment.startswith(("<?", "<!")) or not fragment.startswith("<"):
        fragment = _root_element(fragment).strip()
    ET.fromstring(fragment)
    return fragment


def _xml_fragment(leg: str, text: str) -> str:
    try:
        return xml_element(text)
    except ET.ParseError as exc:
        raise MergeError(leg, "XML", str(exc)) from exc


def merge_xml(legs: Sequence[LegBodies], *, label: str, ccsid: int = CCSID_UTF8) -> Merged:
    """IA72 shape: ``<Label><Label10>reply</Label10><Label20>…</Label20></Label>``,
    in sequence order, each reply's XML declaration and DTD removed."""
    parts = [f"<{label}>"]
    for leg in _ordered(legs):
        tag = f"{label}{leg.sequence}"
        for text in leg.texts("XML"):
            parts += [f"<{tag}>", _xml_fragment(leg.name, text), f"</{tag}>"]
    parts.append(f"</{label}>")
    return _written("".join(parts), ccsid)


def merge_blob(legs: Sequence[LegBodies], *, separator: bytes, text: bool) -> Merged:
    """Bodies concatenated in sequence order with the separator between them, as bytes;
    labelled with the legs' CCSID when they share one."""
    bodies = [body for leg in _ordered(legs) for body in leg.bodies]
    ccsids = {c for leg in legs for c in leg.ccsids} or {CCSID_UTF8}
    ccsid = ccsids.pop() if len(ccsids) == 1 else CCSID_UTF8
    return Merged(separator.join(bodies), "MQSTR" if text else "", ccsid)


#: Levels of a document of ours above an embedded body (folders: 3), with some to spare.
_DOCUMENT_LEVELS = 5


def _too_deep(value: Any) -> bool:
    for _ in range(_DOCUMENT_LEVELS):
        value = [value]
    try:
        json.dumps(value)
    except RecursionError:
        return True
    return False


def embedded_json(
    groups: Sequence[Sequence[str]],
    document: Callable[[list[list[Any]]], Any],
    separators: tuple[str, str] = (",", ":"),
) -> str:
    """The JSON text of ``document(values)``, ``values`` being ``groups`` with each text
    as its JSON value, or as its text where that is not strict JSON (:func:`json_or_text`)
    or is nested so deep that json reads it and cannot write it inside the document."""
    values = [[json_or_text(text) for text in group] for group in groups]
    try:
        return _dumps(document(values), separators)
    except RecursionError:
        # Found only when writing fails, so that no body is written twice on the way.
        kept = [[t if _too_deep(v) else v for v, t in zip(vs, ts, strict=True)]
                for vs, ts in zip(values, groups, strict=True)]  # fmt: skip
        return _dumps(document(kept), separators)


def merge_folders(legs: Sequence[LegBodies], *, ccsid: int = CCSID_UTF8) -> Merged:
    """ACE shape: ``{"ComIbmAggregateReplyBody": {"<folder>": reply | [replies]}}``.

    A JSON body is embedded as JSON, any other body as its text.
    """

    def document(values: list[list[Any]]) -> dict[str, Any]:
        folders = {leg.name: v if len(v) > 1 else v[0] for leg, v in zip(legs, values, strict=True)}
        return {"ComIbmAggregateReplyBody": folders}

    texts = [leg.texts("text", lenient=True) for leg in legs]
    return _written(embedded_json(texts, document), ccsid)


def merge(
    spec: AggregateSpec,
    legs: Sequence[LegBodies],
    *,
    correl_id: str,
    state: str,
    missing: Sequence[str],
    all_text: bool = True,
) -> Merged:
    """Merge per the aggregate's format.

    Raises:
        MergeError: a body is not valid for the format (json, xml), or the legs clash
            (:class:`LegsClash`).
    """
    if clash := leg_name_clash((leg.name for leg in legs), spec.merge):
        # Refused where legs enter (the configuration, scatter, a registration); a gather
        # started before those checks could still hold them.
        raise LegsClash(clash)
    ccsid = spec.response_ccsid
    if spec.merge == "json":
        many = spec.duplicates == "all"
        return merge_json(
            legs, correl_id=correl_id, state=state, missing=missing, many=many, ccsid=ccsid
        )
    if spec.merge == "xml":
        return merge_xml(legs, label=spec.label, ccsid=ccsid)
    if spec.merge == "blob":
        return merge_blob(legs, separator=spec.separator_bytes(), text=all_text)
    return merge_folders(legs, ccsid=ccsid)
