"""The file sink end to end on local Spark: every format with each assigner, both rolling
policies, naming options, batch mode, builders, and refusal of a second query."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparklink.errors import ConfigError
from sparklink.files import (BasePathBucketAssigner, ColumnBucketAssigner, DateTimeBucketAssigner,
                             DefaultRollingPolicy, FileCompactStrategy, FileSink, OnCheckpointRollingPolicy,
                             OutputFileConfig)
from tests.files.jobs_sink import input_stream
from tests.files.sink_readers import assert_exactly_once, hidden_files, read_ids, visible_files

ROWS = 120
ASSIGNERS = {
    "datetime": {"bucketAssigner": "datetime", "bucketColumn": "event_time"},
    "basepath": {"bucketAssigner": "basepath"},
    "column": {"bucketAssigner": "column", "bucketColumn": "kind"},
}


def _stream(spark, out: Path, ck: Path, options: dict, *, rows: int = ROWS, per_trigger: int = 50,
            select: str | None = None):
    frame = input_stream(spark, rows=rows, per_trigger=per_trigger)
    if select:
        frame = frame.selectExpr(*select.split(";"))
    writer = frame.writeStream.format("sparklink.files").option("path", str(out)).option("checkpointLocation", str(ck))
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    assert query.exception() is None
    return query


FORMATS = ["text", "json", "csv", "parquet", "avro", "orc"]
# Every format with the column assigner (the one whose bucket column meets each format's writer
# and Spark's partition discovery), and the two assigners that only name directories with a row
# format (text: one string column) and a bulk format (Parquet): the formats and the directory
# naming are independent otherwise, and each case is a Spark query of its own (~2.5 s).
FORMAT_ASSIGNER_CASES = [(fmt, "column") for fmt in FORMATS] + [
    (fmt, assigner) for fmt in ("text", "parquet") for assigner in ("basepath", "datetime")]


@pytest.mark.parametrize(("fmt", "assigner"), FORMAT_ASSIGNER_CASES)
def test_every_format_and_every_assigner(spark, tmp_path, fmt, assigner):
    options = {"format": fmt, **ASSIGNERS[assigner]}
    select = None
    if fmt == "text":  # one string column: bucket by processing time, by nothing, or by the line itself
        options = {"format": fmt, "rollingPolicy": "checkpoint", "bucketAssigner": assigner}
        if assigner == "column":
            options.update(bucketColumn="label")
        select = "label"
    if fmt == "csv":
        options.update(header="true", rollingPolicy="checkpoint")
    if fmt == "json":
        options.update(rollingPolicy="checkpoint")
    _stream(spark, tmp_path / "out", tmp_path / "ck", options, select=select)
    assert_exactly_once(tmp_path / "out", fmt, ROWS, header=fmt == "csv")
    files = visible_files(tmp_path / "out")
    assert all(f.name.startswith("part-") for f in files)
    if assigner == "column" and fmt == "text":
        assert len({f.parent.name for f in files}) == ROWS
    elif assigner == "column":
        assert {f.parent.name for f in files} == {"kind=0", "kind=1", "kind=2"}
    if assigner == "datetime" and fmt != "text":
        assert "dt=2023-11-14/hour=22" in {f"{f.parent.parent.name}/{f.parent.name}" for f in files}
    assert hidden_files(tmp_path / "out") == []
    if fmt in ("parquet", "json", "csv", "orc") and assigner == "column":  # Spark reads the buckets back
        reader = spark.read.format(fmt)
        if fmt == "csv":
            reader = reader.option("header", "true").schema("id LONG, split INT, event_time TIMESTAMP, label STRING, kind INT")
        frame = reader.load(str(tmp_path / "out"))
        assert frame.count() == ROWS
        assert sorted(r.kind for r in frame.groupBy("kind").count().collect()) == [0, 1, 2]


def test_default_rolling_policy_carries_an_in_progress_file_across_batches(spark, tmp_path):
    out = tmp_path / "out"
    options = {"format": "json", "bucketAssigner": "basepath", "rollingPolicy": "default", "maxPartSize": "1MB",
               "rolloverInterval": "1h", "inactivityInterval": "1h"}
    _stream(spark, out, tmp_path / "ck", options, rows=120, per_trigger=40)
    assert visible_files(out) == []  # nothing rolled yet: data stays in hidden in-progress files
    hidden = sorted(hidden_files(out))
    assert len(hidden) == 2  # one per partition id, appended to by every batch
    state = json.loads(sorted((out / "_sparklink" / "state").iterdir(), key=lambda p: int(p.stem))[-1].read_text())
    assert sorted(f["rows"] for f in state["inProgress"]) == [60, 60]
    assert {f["length"] for f in state["inProgress"]} == {p.stat().st_size for p in hidden}
    # the next query run rolls them on time at its first commit
    options.update(rolloverInterval="0s")
    _stream(spark, out, tmp_path / "ck", options, rows=180, per_trigger=60)
    assert_exactly_once(out, "json", 180)
    assert len(visible_files(out)) == 2 and hidden_files(out) == []


def test_default_rolling_policy_rolls_on_size_inside_a_task(spark, tmp_path):
    out = tmp_path / "out"
    _stream(spark, out, tmp_path / "ck", {"format": "csv", "header": "true", "bucketAssigner": "basepath",
                                          "maxPartSize": "1KB", "rolloverInterval": "1h"}, rows=200, per_trigger=200)
    files = visible_files(out)
    assert len(files) >= 4 and all(f.read_bytes().startswith(b"id,split") for f in files)
    assert all(f.stat().st_size <= 1024 + 200 for f in files)  # split inside an Arrow batch, not after it
    state = json.loads((out / "_sparklink" / "state" / "0.json").read_text())
    carried = sum(f["rows"] for f in state["inProgress"])
    assert len(read_ids(out, "csv", header=True)) + carried == 200


def test_checkpoint_policy_with_max_part_size_and_naming_options(spark, tmp_path):
    out = tmp_path / "out"
    _stream(spark, out, tmp_path / "ck", {"format": "json", "bucketAssigner": "basepath", "rollingPolicy": "checkpoint",
                                          "maxPartSize": "400B", "partPrefix": "events", "partSuffix": ".jsonl"},
            rows=40, per_trigger=40)
    files = visible_files(out)
    assert len(files) > 2 and all(f.name.startswith("events-") and f.name.endswith(".jsonl") for f in files)
    assert_exactly_once(out, "json", 40)
    assert hidden_files(out) == []  # checkpoint policy: nothing is carried to the next batch


def test_builders_compile_to_options_and_attach_to_write_stream(spark, tmp_path):
    out = tmp_path / "out"
    sink = (FileSink.for_row_format(str(out), "json")
            .with_bucket_assigner(lambda row: f"split={row['split']}")
            .with_rolling_policy(OnCheckpointRollingPolicy.build())
            .with_output_file_config(OutputFileConfig(part_prefix="ev", part_suffix=".jsonl"))
            .build())
    query = (sink.configure(input_stream(spark, rows=40).writeStream)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination()
    assert {f.parent.name for f in visible_files(out)} == {"split=0", "split=1"}
    assert all(f.name.startswith("ev-") and f.name.endswith(".jsonl") for f in visible_files(out))
    assert_exactly_once(out, "json", 40)
    bulk = (FileSink.for_bulk_format("/o", "parquet", compression="gzip", row_group_size=100)
            .with_bucket_assigner(DateTimeBucketAssigner(format="'day='yyyy-MM-dd", timezone="Europe/Paris"))
            .enable_compaction(FileCompactStrategy.builder().set_size_threshold(1024).enable_compaction_on_checkpoint(5).build())
            .build())
    assert bulk.options == {"path": "/o", "format": "parquet", "compression": "gzip", "rowGroupSize": "100",
                            "partPrefix": "part", "bucketAssigner": "datetime", "bucketFormat": "'day='yyyy-MM-dd",
                            "bucketTimezone": "Europe/Paris", "rollingPolicy": "checkpoint",
                            "compaction.sizeThreshold": "1024", "compaction.everyNCheckpoints": "5"}
    row = (FileSink.for_row_format("/o", "csv", header=True).with_bucket_assigner(ColumnBucketAssigner(column="k"))
           .with_rolling_policy(DefaultRollingPolicy.builder().with_max_part_size(1000).build())
           .enable_compaction(FileCompactStrategy(every_n_checkpoints=2)).disable_compaction().build())
    assert row.options["maxPartSize"] == "1000" and "compaction.everyNCheckpoints" not in row.options
    assert BasePathBucketAssigner().to_options() == {"bucketAssigner": "basepath"}
    with pytest.raises(ConfigError, match="'orc' is not a row format"):
        FileSink.for_row_format("/o", "orc")


def test_batch_write_append_and_modes(spark, tmp_path):
    out = tmp_path / "out"
    frame = spark.range(0, 50).selectExpr("id", "CAST(id % 2 AS STRING) AS kind")
    for _ in range(2):
        (frame.write.format("sparklink.files").option("path", str(out)).option("format", "parquet")
         .option("bucketAssigner", "column").option("bucketColumn", "kind").mode("append").save())
    ids = read_ids(out, "parquet")
    assert ids == sorted(list(range(50)) * 2)
    assert hidden_files(out) == []
    with pytest.raises(Exception, match="does not support mode 'overwrite'"):
        frame.write.format("sparklink.files").option("path", str(out)).mode("overwrite").save()
    assert read_ids(out, "parquet") == ids


def test_write_without_a_mode_appends_and_refused_modes_say_so(spark, tmp_path):
    """df.write's default mode (errorifexists) is refused by Spark for Python data sources;
    sparklink.register makes a save() without .mode() append, as the public API's example is written."""
    frame = spark.range(0, 10)
    out = str(tmp_path / "o")
    frame.write.format("sparklink.files").option("path", out).option("format", "json") \
        .option("bucketAssigner", "basepath").save()
    frame.write.format("sparklink.files").options(path=out, format="json", bucketAssigner="basepath").save()
    assert len(read_ids(tmp_path / "o", "json")) == 20
    for mode in ("errorifexists", "ignore"):
        with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
            frame.write.format("sparklink.files").option("path", out).option("format", "json").mode(mode).save()
    with pytest.raises(Exception, match="does not support mode 'overwrite'"):
        frame.write.format("sparklink.files").option("path", out).option("format", "json").mode("overwrite").save()


def test_a_second_query_on_the_same_path_is_refused(spark, tmp_path):
    out = tmp_path / "out"
    _stream(spark, out, tmp_path / "ck1", {"format": "parquet", "bucketAssigner": "basepath"}, rows=20, per_trigger=20)
    frame = input_stream(spark, rows=20)
    query = (frame.writeStream.format("sparklink.files").option("path", str(out)).option("format", "parquet")
             .option("bucketAssigner", "basepath").option("checkpointLocation", str(tmp_path / "ck2"))
             .trigger(availableNow=True).start())
    with pytest.raises(Exception, match="belongs to streaming query"):
        query.awaitTermination()
    assert_exactly_once(out, "parquet", 20)


def test_bad_option_fails_the_query_with_the_option_named(spark, tmp_path):
    frame = input_stream(spark, rows=10)
    query = (frame.writeStream.format("sparklink.files").option("path", str(tmp_path / "o")).option("format", "parquet")
             .option("rollingPolicy", "default").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    with pytest.raises(Exception, match="option 'rollingPolicy'"):
        query.awaitTermination()
