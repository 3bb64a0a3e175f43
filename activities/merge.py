"""Merge formats: pure functions from the received legs to one response body."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mqgather.config import AggregateSpec
from mqgather.errors import MQGatherError

JSON_SCHEMA_VERSION = 1

_XML_PROLOG = re.compile(rb"^\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>\[]*(\[[^\]]*\])?\s*>\s*)?", re.S)


class MergeError(MQGatherError):
    """A leg's body is not valid for the aggregate's merge format."""

    def __init__(self, leg: str, fmt: str, reason: str) -> None:
        self.leg = leg
        super().__init__(f"leg {leg}: body is not valid {fmt} ({reason})")


@dataclass(frozen=True)
class LegBodies:
    """The bodies that filled one leg (several only with duplicates=all)."""

    name: str
    sequence: int
    bodies: tuple[bytes, ...]


@dataclass(frozen=True)
class Merged:
    """A merged response: body and MQMD Format."""

    body: bytes
    format: str


def _ordered(legs: Sequence[LegBodies]) -> list[LegBodies]:
    # Sequence order (IA72 SequenceNumber); equal numbers keep leg order.
    return sorted(legs, key=lambda leg: leg.sequence)


def _json_value(leg: str, body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MergeError(leg, "JSON", str(exc)) from exc


def merge_json(
    legs: Sequence[LegBodies], *, correl_id: str, state: str, missing: Sequence[str], many: bool
) -> Merged:
    """``{"schema": 1, "correlId", "state", "legs": {"credit": {...}}, "missing": [...]}``.

    Leg keys are the leg names in lower case; with ``many`` (duplicates=all) each
    value is an array of the replies.
    """
    out: dict[str, Any] = {}
    for leg in legs:
        values = [_json_value(leg.name, body) for body in leg.bodies]
        out[leg.name.lower()] = values if many else values[0]
    doc = {
        "schema": JSON_SCHEMA_VERSION,
        "correlId": correl_id,
        "state": state,
        "legs": out,
        "missing": [name.lower() for name in missing],
    }
    return Merged(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode(), "MQSTR")


def _xml_fragment(leg: str, body: bytes) -> bytes:
    fragment = _XML_PROLOG.sub(b"", body, count=1).strip()
    try:
        ET.fromstring(fragment)
    except ET.ParseError as exc:
        raise MergeError(leg, "XML", str(exc)) from exc
    return fragment


def merge_xml(legs: Sequence[LegBodies], *, label: str) -> Merged:
    """IA72 shape: ``<Label><Label10>reply</Label10><Label20>…</Label20></Label>``,
    in sequence order, each reply's XML declaration and DTD removed."""
    parts = [f"<{label}>".encode()]
    for leg in _ordered(legs):
        tag = f"{label}{leg.sequence}".encode()
        for body in leg.bodies:
            parts += [b"<", tag, b">", _xml_fragment(leg.name, body), b"</", tag, b">"]
    parts.append(f"</{label}>".encode())
    return Merged(b"".join(parts), "MQSTR")


def merge_blob(legs: Sequence[LegBodies], *, separator: bytes, text: bool) -> Merged:
    """Bodies concatenated in sequence order with the separator between them."""
    bodies = [body for leg in _ordered(legs) for body in leg.bodies]
    return Merged(separator.join(bodies), "MQSTR" if text else "")


def merge_folders(legs: Sequence[LegBodies]) -> Merged:
    """ACE shape: ``{"ComIbmAggregateReplyBody": {"<folder>": reply | [replies]}}``.

    A JSON body is embedded as JSON, any other body as its text.
    """
    folders: dict[str, Any] = {}
    for leg in legs:
        values = []
        for body in leg.bodies:
            try:
                values.append(json.loads(body.decode("utf-8")))
            except (UnicodeDecodeError, json.JSONDecodeError):
                values.append(body.decode("utf-8", errors="replace"))
        folders[leg.name] = values if len(values) > 1 else values[0]
    doc = {"ComIbmAggregateReplyBody": folders}
    return Merged(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode(), "MQSTR")


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
        MergeError: a body is not valid for the format (json, xml).
    """
    if spec.merge == "json":
        return merge_json(
            legs, correl_id=correl_id, state=state, missing=missing, many=spec.duplicates == "all"
        )
    if spec.merge == "xml":
        return merge_xml(legs, label=spec.label)
    if spec.merge == "blob":
        return merge_blob(legs, separator=spec.separator_bytes(), text=all_text)
    return merge_folders(legs)
