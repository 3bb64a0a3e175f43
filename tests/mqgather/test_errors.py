"""The reasons a failed model check is reported with."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError, field_validator

from mqgather.errors import first_problem


class _Checked(BaseModel):
    count: int = 0
    name: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if value.startswith("-"):
            raise ValueError("a name starts with a letter")
        return value


def _problem(**values: object) -> str:
    with pytest.raises(ValidationError) as info:
        _Checked.model_validate(values)
    return first_problem(info.value)


def test_an_own_check_is_reported_by_its_reason_alone():
    assert _problem(name="-x") == "name: a name starts with a letter"


def test_a_type_check_keeps_pydantic_s_reason():
    assert _problem(count="many").startswith("count: Input should be a valid integer")
