"""Base exception types shared by every mqgather package."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError
    from pydantic_core import ErrorDetails


class MQGatherError(Exception):
    """Base of every error mqgather raises on purpose; its message is shown to the user as is."""


class ConfigError(MQGatherError):
    """A setting is missing or invalid; the message names the setting (key) at fault."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"{key}: {reason}")


def first_problem(exc: ValidationError, whole: str = "input") -> str:
    """A model's first failed check as ``field.path: reason`` (``whole`` when it is the
    model's own check). The reason only, never the input, which may hold secrets."""
    err = exc.errors()[0]
    return f"{'.'.join(str(p) for p in err['loc']) or whole}: {problem_reason(err)}"


def problem_reason(err: ErrorDetails) -> str:
    """One failed check's reason; a check of mqgather's own raises ValueError with the
    whole reason, shown without the "Value error, " pydantic puts before it."""
    error = err.get("ctx", {}).get("error")
    if err["type"] == "value_error" and isinstance(error, ValueError):
        return str(error)
    return err["msg"]
