"""Character sets by MQ CodedCharSetId: which codec reads and writes a CCSID's text.

Every MQ message carries its CCSID; a text merge decodes each leg by its own and writes
the response in one declared CCSID. EBCDIC code pages Python lacks (1047 and the other
mainframe pages) come from the ``ebcdic`` package.
"""

from __future__ import annotations

import codecs

import ebcdic  # noqa: F401  (registers cp1047 and the other EBCDIC codecs)

#: UTF-8: what mqgather writes unless told otherwise, and what a message without a
#: CCSID is taken to be.
CCSID_UTF8 = 1208

#: CCSID -> Python codec. The usual ones for MQ shops: Unicode, ISO 8859, Windows and PC
#: code pages, and mainframe EBCDIC.
CODECS: dict[int, str] = {
    1208: "utf-8",
    1200: "utf-16-be",
    1202: "utf-16-le",
    13488: "utf-16-be",
    17584: "utf-16-be",
    1232: "utf-32-be",
    1234: "utf-32-le",
    819: "latin-1",
    912: "iso8859-2",
    913: "iso8859-3",
    914: "iso8859-4",
    915: "iso8859-5",
    1089: "iso8859-6",
    813: "iso8859-7",
    916: "iso8859-8",
    920: "iso8859-9",
    923: "iso8859-15",
    367: "ascii",
    437: "cp437",
    850: "cp850",
    852: "cp852",
    858: "cp858",
    866: "cp866",
    1250: "cp1250",
    1251: "cp1251",
    1252: "cp1252",
    5348: "cp1252",
    37: "cp037",
    273: "cp273",
    277: "cp277",
    278: "cp278",
    280: "cp280",
    284: "cp284",
    285: "cp285",
    297: "cp297",
    500: "cp500",
    871: "cp871",
    875: "cp875",
    1047: "cp1047",
    1140: "cp1140",
    1141: "cp1141",
    1142: "cp1142",
    1143: "cp1143",
    1144: "cp1144",
    1145: "cp1145",
    1146: "cp1146",
    1147: "cp1147",
    1148: "cp1148",
    1149: "cp1149",
}


class CCSIDError(ValueError):
    """A CCSID mqgather has no codec for, or text that does not fit its CCSID."""


def codec(ccsid: int) -> str:
    """The Python codec of a CCSID.

    Raises:
        CCSIDError: no codec is known for it.
    """
    name = CODECS.get(ccsid)
    if name is None:
        raise CCSIDError(f"CCSID {ccsid} is not one mqgather can read or write")
    codecs.lookup(name)
    return name


def decode(body: bytes, ccsid: int, *, lenient: bool = False) -> str:
    """``body`` as text in its CCSID (``lenient``: invalid bytes become U+FFFD).

    Raises:
        CCSIDError: unknown CCSID, or (not lenient) bytes that are not valid in it.
    """
    try:
        return body.decode(codec(ccsid), errors="replace" if lenient else "strict")
    except UnicodeDecodeError as exc:
        raise CCSIDError(f"the body is not valid CCSID {ccsid} text ({exc.reason})") from exc


def encode(text: str, ccsid: int) -> bytes:
    """``text`` in a CCSID.

    Raises:
        CCSIDError: unknown CCSID, or a character the CCSID cannot hold.
    """
    try:
        return text.encode(codec(ccsid))
    except UnicodeEncodeError as exc:
        raise CCSIDError(
            f"{exc.object[exc.start : exc.end]!r} cannot be written in CCSID {ccsid}"
        ) from exc
