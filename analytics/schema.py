"""Spark schemas of the gather's payloads, derived from the workflow's own models.

The job reads the start input (``GatherInput``), the ``replies`` signals
(``ReplyBatch``) and the result (``GatherResult``) out of the histories. Their Spark
schemas are projections of those pydantic models, built here: a field renamed or retyped
in the models changes the job with it, and a field the job needs that the models lose
fails at import, naming the model and the field.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from typing import Any, Union

from pydantic import BaseModel
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

#: Which fields to take: a field name maps to ``None`` (the whole value) or, for a field
#: holding a model or a list of models, to the selection inside it.
Selection = Mapping[str, "Selection | None"]

# How each JSON scalar of the pydantic data converter reads in Spark. Bytes travel as
# base64 text and datetimes as ISO text; the job converts what it needs.
_SCALARS: dict[type, DataType] = {
    str: StringType(),
    bytes: StringType(),
    datetime: StringType(),
    bool: BooleanType(),
    int: LongType(),
    float: DoubleType(),
}


class SchemaError(TypeError):
    """A selection names a field the model lacks, or a type with no Spark form."""


def _unwrap(annotation: Any) -> Any:
    """``X | None`` -> ``X``."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def spark_type(annotation: Any, select: Selection | None, where: str) -> DataType:
    """The Spark type of one annotated value (``where`` names it in errors)."""
    annotation = _unwrap(annotation)
    origin = typing.get_origin(annotation)
    if origin in (list, tuple):
        item = typing.get_args(annotation)[0]
        return ArrayType(spark_type(item, select, f"{where}[]"))
    if origin is typing.Literal:
        kinds = {type(arg) for arg in typing.get_args(annotation)}
        if kinds == {str}:
            return StringType()
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            if select is None:
                raise SchemaError(f"{where}: a model; select the fields the job reads")
            return struct_of(annotation, select)
        if issubclass(annotation, Enum) and issubclass(annotation, str):
            return StringType()
        for scalar, spark in _SCALARS.items():
            if issubclass(annotation, scalar):  # bool is listed before int
                return spark
    raise SchemaError(f"{where}: no Spark type for {annotation!r}")


def struct_of(model: type[BaseModel], select: Selection) -> StructType:
    """The Spark struct of the selected fields of ``model``, in the selection's order.

    Raises:
        SchemaError: a selected field is not in the model, or has no Spark form.
    """
    fields = []
    for name, inner in select.items():
        info = model.model_fields.get(name)
        if info is None:
            raise SchemaError(f"{model.__name__}.{name}: no such field in the model")
        where = f"{model.__name__}.{name}"
        fields.append(StructField(name, spark_type(info.annotation, inner, where)))
    return StructType(fields)
