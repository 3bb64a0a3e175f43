"""Completion rules: when a gather has what it needs.

``complete_when`` is ``all`` (every required leg), ``any`` (the first reply), ``quorum:N``
(any N legs) or a boolean expression over leg names with ``and``, ``or`` and
parentheses, such as ``CREDIT and (STOCK or STOCK_ALT)``. The expression is parsed
here, by a small recursive-descent parser: nothing is ever evaluated as Python.

There is no ``not``: every rule is monotone (one more reply never makes it false), so a
rule that does not hold even if every leg still awaited came can be given up at once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache

from mqgather.constants import MAX_LEGS
from mqgather.errors import MQGatherError

ALL = "all"
ANY = "any"
QUORUM_PREFIX = "quorum:"
_AND, _OR = "and", "or"
#: Parentheses nested deeper than this are refused: no rule over real legs needs more,
#: and the parser recurses once per level.
MAX_NESTING = 32
_TOKEN = re.compile(r"\s*(?:(?P<paren>[()])|(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)|(?P<bad>\S))")


class RuleError(MQGatherError):
    """A completion rule that cannot be parsed; names the column (1-based) at fault."""

    def __init__(self, rule: str, column: int, reason: str) -> None:
        self.column = column
        super().__init__(f"{rule!r}, column {column}: {reason}")


@dataclass(frozen=True)
class Leg:
    """A leg name in an expression."""

    name: str


@dataclass(frozen=True)
class Both:
    """Every part holds."""

    parts: tuple[Expr, ...]


@dataclass(frozen=True)
class Either:
    """At least one part holds."""

    parts: tuple[Expr, ...]


Expr = Leg | Both | Either


@dataclass(frozen=True)
class Rule:
    """A parsed ``complete_when``: its kind, the quorum (quorum rules) and the expression
    (expression rules)."""

    text: str
    kind: str
    quorum: int = 0
    expr: Expr | None = None

    def names(self) -> frozenset[str]:
        """The leg names an expression mentions (empty for the other kinds)."""
        return frozenset(_names(self.expr)) if self.expr is not None else frozenset()

    def holds(self, have: Iterable[str], required: Iterable[str]) -> bool:
        """Whether the rule holds over the legs in ``have``; ``all`` needs every leg in
        ``required``, the other kinds ignore it."""
        got = set(have)
        if self.kind == ALL:
            return set(required) <= got
        if self.kind == ANY:
            return bool(got)
        if self.kind == QUORUM_PREFIX:
            return len(got) >= self.quorum
        assert self.expr is not None
        return _evaluate(self.expr, got.__contains__)


def _names(expr: Expr) -> Iterable[str]:
    if isinstance(expr, Leg):
        yield expr.name
    else:
        for part in expr.parts:
            yield from _names(part)


def _evaluate(expr: Expr, has: Callable[[str], bool]) -> bool:
    if isinstance(expr, Leg):
        return has(expr.name)
    if isinstance(expr, Both):
        return all(_evaluate(part, has) for part in expr.parts)
    return any(_evaluate(part, has) for part in expr.parts)


@lru_cache(maxsize=256)
def parse_rule(text: str) -> Rule:
    """Parse a ``complete_when`` value.

    Raises:
        RuleError: naming the column: an unknown word, an unbalanced parenthesis, a
            missing leg name, a quorum that is not a whole number of at least 1.
    """
    stripped = text.strip()
    if stripped in (ALL, ANY):
        return Rule(text=stripped, kind=stripped)
    if stripped.startswith(QUORUM_PREFIX):
        count = stripped[len(QUORUM_PREFIX) :].strip()
        column = text.index(QUORUM_PREFIX) + len(QUORUM_PREFIX) + 1
        number = count.lstrip("0")
        # ASCII digits only: str.isdigit also takes '²', which int() refuses, and other
        # scripts' digits, which the history would record as written.
        if not (count.isascii() and count.isdigit()) or not number:
            raise RuleError(text, column, "quorum:N needs a whole number N of at least 1")
        # Compared as text first: int() refuses a string of over 4,300 digits.
        if len(number) > len(str(MAX_LEGS)) or int(number) > MAX_LEGS:
            reason = f"quorum:N is more than the {MAX_LEGS} legs a gather can have"
            raise RuleError(text, column, reason)
        return Rule(text=stripped, kind=QUORUM_PREFIX, quorum=int(number))
    return Rule(text=stripped, kind="expression", expr=_Parser(text).parse())


class _Parser:
    """``expr := term ("or" term)*``; ``term := atom ("and" atom)*``;
    ``atom := NAME | "(" expr ")"``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        for match in _TOKEN.finditer(text):
            kind = match.lastgroup or "bad"
            value = match.group(kind)
            column = match.start(kind) + 1
            if kind == "bad":
                raise RuleError(text, column, f"unexpected {value!r} (use leg names, and, or, ())")
            if kind == "name" and value.lower() in (_AND, _OR):
                kind, value = "op", value.lower()
            self.tokens.append((kind, value, column))
        self.at = 0
        self.depth = 0

    def _peek(self) -> tuple[str, str, int]:
        if self.at < len(self.tokens):
            return self.tokens[self.at]
        return ("end", "", len(self.text) + 1)

    def parse(self) -> Expr:
        if not self.tokens:
            raise RuleError(self.text, 1, 'empty rule (use "all", "any", "quorum:N" or legs)')
        expr = self._expr()
        kind, value, column = self._peek()
        if kind != "end":
            raise RuleError(self.text, column, f"expected and/or, found {value!r}")
        return expr

    def _joined(self, op: str, part: Callable[[], Expr], make: type[Both] | type[Either]) -> Expr:
        parts = [part()]
        while self._peek()[:2] == ("op", op):
            self.at += 1
            parts.append(part())
        return parts[0] if len(parts) == 1 else make(tuple(parts))

    def _expr(self) -> Expr:
        return self._joined(_OR, self._term, Either)

    def _term(self) -> Expr:
        return self._joined(_AND, self._atom, Both)

    def _atom(self) -> Expr:
        kind, value, column = self._peek()
        if kind == "name":
            self.at += 1
            return Leg(value)
        if (kind, value) == ("paren", "("):
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise RuleError(self.text, column, f"parentheses nested over {MAX_NESTING} deep")
            self.at += 1
            inner = self._expr()
            self.depth -= 1
            kind, value, close = self._peek()
            if (kind, value) != ("paren", ")"):
                raise RuleError(self.text, close, f"the '(' at column {column} is not closed")
            self.at += 1
            return inner
        found = "the end" if kind == "end" else repr(value)
        raise RuleError(self.text, column, f"expected a leg name or '(', found {found}")
