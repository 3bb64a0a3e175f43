"""bench.jfr sorts a sample by the code on its stack: a caller's area wherever it is, the
nearest of the others to the top."""

from __future__ import annotations

from bench.jfr import OTHER, area_of, classify

TASK = [
    "org.apache.spark.sql.execution.BufferedRowIterator.hasNext",
    "org.apache.spark.shuffle.ShuffleWriteProcessor.write",
    "org.apache.spark.scheduler.ShuffleMapTask.runTask",
]
PARSE = [
    "com.fasterxml.jackson.core.json.UTF8StreamJsonParser.nextToken",
    "org.apache.spark.sql.catalyst.json.JacksonParser.parse",
]
GENERATED = [
    "org.apache.spark.sql.catalyst.expressions.GeneratedClass$GeneratedIterator.processNext"
]
FROM_JSON = ["org.apache.spark.sql.catalyst.expressions.JsonToStructs.nullSafeEval"]


def test_a_parse_inside_from_json_counts_as_from_json() -> None:
    assert area_of([*PARSE, *FROM_JSON, *GENERATED, *TASK]).startswith("from_json")


def test_the_file_parse_counts_as_parsing_though_a_shuffle_writer_is_below_it() -> None:
    assert area_of([*PARSE, *GENERATED, *TASK]).startswith("JSON parsing of the files")


def test_the_nearest_area_to_the_top_wins() -> None:
    sorting = ["org.apache.spark.util.collection.ExternalSorter.insertAll"]
    assert area_of([*sorting, *GENERATED, *TASK]) == "shuffle and sort"
    assert area_of([*GENERATED, *TASK]).startswith("generated code")


def test_a_sample_in_no_area_is_other_and_the_shares_add_up() -> None:
    assert area_of(["java.lang.Thread.run"]) == OTHER
    found = classify([[*PARSE, *TASK], [*PARSE], [*FROM_JSON], ["java.lang.Thread.run"]])
    assert found.samples == 4
    assert sum(found.by_area.values()) == 4
    assert found.by_area.most_common(1)[0][1] == 2
    assert found.lines()[0].strip().startswith("50.0 %  JSON parsing")
