"""Schema evolution is explicit: the file sink records its output schema in
``_sparklink/sink.json``, refuses a query whose schema differs (naming the columns and the
change) unless it only adds nullable columns with ``mergeSchema=true``, and ``sparklink verify``
reports a file whose schema differs from the recorded one."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sparklink.files.sink.inspection import find_violations
from sparklink.errors import ConfigError
from sparklink.files.sink.connector import FileSinkConnector
from sparklink.files.sink.recovery import SINK_RECORD, record_sink
from sparklink.storage.directory import as_directory
from sparklink.files.sink.manifest import META_DIR
from sparklink.files.sink.output_schema import recorded_schema, schema_change
from tests.files.jobs_sink import file_sink_writer, input_stream, start_stream_to_files

BASE = StructType([StructField("id", LongType(), False), StructField("kind", StringType(), True)])


def _with(*fields) -> StructType:
    return StructType(list(BASE.fields) + list(fields))


def test_recorded_schema_round_trip(tmp_path):
    record_sink(as_directory(tmp_path / META_DIR), {"format": "parquet", "s3.secretAccessKey": "x"}, BASE.json())
    record = json.loads((tmp_path / META_DIR / SINK_RECORD).read_text())
    assert record["v"] == 1 and "s3.secretAccessKey" not in record["options"]
    assert recorded_schema(as_directory(tmp_path / META_DIR)) == BASE


def test_schema_change_describes_each_column():
    retyped = StructType([StructField("id", StringType()), StructField("label", StringType(), False)])
    change = schema_change(BASE, retyped)
    text = change.describe()
    assert "column 'id' changed type from bigint to string" in text
    assert "column 'kind' (string) is missing" in text
    assert "column 'label' (string, not null) is new" in text
    assert not change.mergeable
    assert schema_change(BASE, _with(StructField("extra", LongType(), True))).mergeable
    assert schema_change(BASE, StructType(list(reversed(BASE.fields)))).reordered
    nullability_only = StructType([StructField("id", LongType(), True), StructField("kind", StringType(), False)])
    assert schema_change(BASE, nullability_only).none  # Spark reads every file column as nullable


def _sink(out, schema, **options):
    return FileSinkConnector({"path": str(out), "format": "parquet", "bucketAssigner": "basepath", **options}, schema)


def test_second_schema_refused_unless_nullable_columns_merged(tmp_path):
    out = tmp_path / "out"
    _sink(out, BASE)
    with pytest.raises(ConfigError, match="column 'extra' \\(bigint\\) is new.*mergeSchema=true"):
        _sink(out, _with(StructField("extra", LongType(), True)))
    with pytest.raises(ConfigError, match="'extra' \\(bigint, not null\\) is new.*only new nullable columns"):
        _sink(out, _with(StructField("extra", LongType(), False)), mergeSchema="true")
    _sink(out, _with(StructField("extra", LongType(), True)), mergeSchema="true")
    assert recorded_schema(as_directory(out / META_DIR)) == _with(StructField("extra", LongType(), True))
    _sink(out, _with(StructField("extra", LongType(), True)))  # the merged schema is the output's now


def test_second_schema_refused_on_s3(s3_server, s3_bucket):
    """The same check on S3: the record is read through the output's storage."""
    out = f"s3a://{s3_bucket}/out"
    _sink(out, BASE, **s3_server.options())
    retyped = StructType([StructField("id", StringType()), StructField("kind", StringType(), True)])
    expected = f"recorded in s3a://{s3_bucket}/out/_sparklink/sink.json.*column 'id' changed type from bigint to string"
    with pytest.raises(ConfigError, match=expected):
        _sink(out, retyped, **s3_server.options())
    _sink(out, _with(StructField("extra", LongType(), True)), mergeSchema="true", **s3_server.options())


def test_restart_with_id_as_string_is_refused(spark, tmp_path):
    """The issue's case: the same checkpoint and output, ``id`` long -> string and a new non-null column."""
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    options = {"format": "parquet", "bucketAssigner": "basepath"}
    query = start_stream_to_files(spark, out=out, checkpoint=ck, rows=20, options=options)
    query.awaitTermination()
    assert query.exception() is None
    with pytest.raises((ConfigError, StreamingQueryException), match="column 'id' changed type from bigint to string"):
        frame = input_stream(spark, rows=40).selectExpr("CAST(id AS STRING) AS id", "split", "kind", "event_time",
                                                         "label", "'x' AS added")
        query = file_sink_writer(frame, out=out, checkpoint=ck, options=options).trigger(availableNow=True).start()
        query.awaitTermination()
    assert spark.read.parquet(out).count() == 20  # nothing of the refused query was written


def test_verify_flags_a_planted_file(spark, tmp_path):
    out = tmp_path / "out"
    query = start_stream_to_files(spark, out=str(out), checkpoint=str(tmp_path / "ck"), rows=20,
                                  options={"format": "parquet", "bucketAssigner": "basepath"})
    query.awaitTermination()
    assert find_violations(out)[0] == []
    finished = sorted(p for p in out.glob("part-*"))
    planted = finished[0]
    pq.write_table(pa.table({"id": pa.array([str(i) for i in range(3)])}), planted)
    violations, _ = find_violations(out)
    assert any(f"file {planted.name} has another schema" in v and "column 'id' is string, recorded int64" in v
               for v in violations), violations
    shutil.rmtree(out)
