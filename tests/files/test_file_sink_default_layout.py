"""Spark's own readers see every committed row of the file sink's default layouts.

Through ``_spark_metadata`` Spark reads only files in Hive-style ``key=value`` directories (or the
base path itself) and skips any other directory without a word, so the sink's default layouts are
Hive-style, and a layout Spark would skip is refused at start while the log is written. One small
stream per assigner, read back with ``spark.read.parquet`` (with and without a schema) and with
Spark's streaming file source (which reads through the same log).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pyspark.errors import StreamingQueryException

from sparklink.errors import ConfigError
from sparklink.files import FileSink
from sparklink.files.sink.connector import FileSinkConfig
from tests.files.jobs_sink import await_query, input_stream, start_stream_to_files

ROWS = 60
SCHEMA = "id LONG, split LONG, kind STRING, event_time TIMESTAMP, label STRING"


def _custom_bucket(row):
    return f"kind={row['kind']}/split={row['split']}"


LAYOUTS = {
    "datetime-event-time": ({"bucketColumn": "event_time"}, {"dt", "hour"}),
    "datetime-processing-time": ({}, {"dt", "hour"}),
    "basepath": ({"bucketAssigner": "basepath"}, set()),
    "column": ({"bucketAssigner": "column", "bucketColumn": "kind"}, {"kind"}),
    "custom": (FileSink.for_bulk_format("unused", "parquet").with_bucket_assigner(_custom_bucket).build().options,
               {"kind", "split"}),
}


def _spark_streaming_count(spark, out: Path, tmp_path: Path) -> int:
    """Spark's own streaming file source over the output (it reads through ``_spark_metadata``)."""
    seen: list[int] = []
    query = (spark.readStream.schema(SCHEMA).parquet(str(out)).writeStream
             .foreachBatch(lambda frame, _batch: seen.append(frame.count()))
             .option("checkpointLocation", str(tmp_path / "reader-ck")).trigger(availableNow=True).start())
    query.awaitTermination()
    return sum(seen)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_default_layouts_are_read_whole_by_spark(spark, tmp_path, layout):
    options, partitions = LAYOUTS[layout]
    options = {key: value for key, value in options.items() if key != "path"}
    out = tmp_path / "out"
    await_query(start_stream_to_files(spark, out=str(out), checkpoint=str(tmp_path / "ck"), rows=ROWS,
                                      per_trigger=ROWS // 2, options={"format": "parquet", **options}))
    inferred = spark.read.parquet(str(out))
    assert inferred.count() == ROWS, f"Spark's reader without a schema saw {inferred.count()} of {ROWS} rows"
    assert partitions <= set(inferred.columns)
    assert sorted(r.id for r in inferred.select("id").collect()) == list(range(ROWS))
    assert spark.read.schema(SCHEMA).parquet(str(out)).count() == ROWS
    assert _spark_streaming_count(spark, out, tmp_path) == ROWS


@pytest.mark.parametrize("options, option", [
    ({"bucketFormat": "yyyy-MM-dd--HH"}, "bucketFormat"),
    ({"bucketAssigner": "column", "bucketColumn": "kind", "bucketHiveStyle": "false"}, "bucketHiveStyle"),
], ids=["flink-datetime", "bare-column"])
def test_a_layout_spark_would_skip_is_refused_while_the_log_is_written(spark, tmp_path, options, option):
    query = start_stream_to_files(spark, out=str(tmp_path / "out"), checkpoint=str(tmp_path / "ck"), rows=10,
                                  options={"format": "parquet", **options})
    with pytest.raises(StreamingQueryException, match=f"option '{option}'.*skip.*sparkMetadata=false"):
        query.awaitTermination()
    with pytest.raises(ConfigError, match=f"option '{option}'"):
        FileSinkConfig.from_options({"path": "/o", **options})
    # Flink's layout stays available once Spark's log is off
    FileSinkConfig.from_options({"path": "/o", "sparkMetadata": "false", **options})


def test_a_custom_bucket_spark_would_skip_fails_the_task_naming_the_bucket(spark, tmp_path):
    options = FileSink.for_bulk_format("unused", "parquet").with_bucket_assigner(
        lambda row: f"split-{row['split']}").build().options
    options.pop("path")
    writer = (input_stream(spark, rows=10).writeStream.format("sparklink.files").option("path", str(tmp_path / "out"))
              .option("checkpointLocation", str(tmp_path / "ck")).options(**options))
    query = writer.trigger(availableNow=True).start()
    with pytest.raises(StreamingQueryException, match="bucket id 'split-.*not Hive-style"):
        query.awaitTermination()
    assert not any(p.is_file() and not p.name.startswith((".", "_")) for p in (tmp_path / "out").rglob("*")
                   if "_spark" not in str(p) and "_sparklink" not in str(p))
