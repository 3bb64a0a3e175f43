"""The job's schemas come from the workflow's models, not a copy of them."""

from __future__ import annotations

import pytest
from pyspark.sql.types import ArrayType, LongType, StringType, StructType

from analytics import transforms
from analytics.schema import SchemaError, struct_of
from workflows.models import GatherInput, GatherResult, ReplyBatch


def test_a_field_the_models_lack_fails_naming_model_and_field():
    with pytest.raises(SchemaError, match=r"GatherResult\.legs_lost: no such field"):
        struct_of(GatherResult, {"legs_lost": None})
    with pytest.raises(SchemaError, match=r"Reply\.lag: no such field"):
        struct_of(ReplyBatch, {"replies": {"lag": None}})


def test_a_model_field_needs_a_selection():
    with pytest.raises(SchemaError, match=r"GatherInput\.aggregate: a model"):
        struct_of(GatherInput, {"aggregate": None})


def test_types_follow_the_models():
    batch = struct_of(ReplyBatch, {"replies": {"leg": None, "leg_index": None,
                                               "message": {"msg_id": None}}})  # fmt: skip
    replies = batch["replies"].dataType
    assert isinstance(replies, ArrayType)
    reply = replies.elementType
    assert isinstance(reply, StructType)
    assert reply["leg"].dataType == StringType()
    assert reply["leg_index"].dataType == LongType()  # int | None
    assert reply["message"].dataType == StructType().add("msg_id", StringType())  # bytes: base64


def test_the_job_reads_the_result_fields_the_workflow_writes():
    read = set(transforms._RESULT.fieldNames())
    assert read <= set(GatherResult.model_fields)
    assert transforms._RESULT["legs_missing"].dataType == ArrayType(StringType())
    assert transforms._RESULT["duplicates"].dataType == LongType()
