"""Bad input to the file connectors: each case ends in an exact result or a clear refusal that
names the option, path or value at fault, and leaves nothing staged behind (docs/failures.md)."""

from __future__ import annotations

import os
import signal

import pytest

from sparklink.errors import ConfigError
from sparklink.files import FileSink
from sparklink.files.sink.compaction import run_compaction
from sparklink.files.sink.connector import FileSinkConfig
from sparklink.formats.config import FormatConfig
from sparklink.files.sink.part_files import PENDING, PartFile
from sparklink.files.source.config import FileSourceConfig
from sparklink.storage import LocalLocation, S3Location, parse_location
from sparklink.sink.commit_log import json_bytes
from sparklink.storage.local import LocalStorage
from sparklink.storage.local_recoverable import LocalRecoverableWriter
from tests.files.jobs_sink import input_stream
from tests.files.sink_readers import hidden_files, visible_files

S3_PATHS = ["s3://acc/out", "s3a://acc/out", "S3://acc/out"]  # the sink writes them, the source reads them
OTHER_SCHEMES = S3_PATHS + ["hdfs://nn:8020/out", "gs://bucket/out", "abfss://c@a.dfs/out", "file://otherhost/out"]


@pytest.mark.parametrize("path", OTHER_SCHEMES)
def test_a_path_of_a_scheme_not_served_is_refused_by_sink_and_source_options(path):
    if path in S3_PATHS:  # served (tests/files/test_file_source_on_s3.py), but not mixed with local paths
        with pytest.raises(ConfigError, match=r"mixes local paths \(/tmp\) and S3 prefixes"):
            FileSourceConfig.from_options({"paths": f'["/tmp", "{path}"]', "format": "json"})
        return
    for parse in (lambda: FileSinkConfig.from_options({"path": path}),
                  lambda: FileSourceConfig.from_options({"path": path, "format": "json"}),
                  lambda: FileSourceConfig.from_options({"paths": f'["/tmp", "{path}"]', "format": "json"})):
        with pytest.raises(ConfigError, match="file://"):
            parse()


def test_local_paths_and_file_uris_are_served():
    """One parser of locations (sparklink.storage.parse_location) for every file connector and
    sparklink.files.finish: local paths and file: URIs, s3:// and s3a://; any other scheme refused."""
    for path, local in (("out/x", "out/x"), ("/tmp/out", "/tmp/out"), ("file:///tmp/out", "/tmp/out"),
                        ("file:/tmp/out", "/tmp/out"), ("file://localhost/tmp/out", "/tmp/out"),
                        ("data:2024/x", "data:2024/x")):  # a colon without ':/' is a local name
        assert parse_location("path", path) == LocalLocation(path=local)
    assert parse_location("path", "s3a://acc/out") == S3Location(scheme="s3a", bucket="acc", prefix="out")
    with pytest.raises(ConfigError, match="scheme 'gs://'"):
        parse_location("path", "gs://acc/out")


def test_finish_refuses_a_scheme_not_served(tmp_path):
    from sparklink.files.sink.finish import finish_output
    from sparklink.sink.lease import process_identity

    with pytest.raises(ConfigError, match="scheme 'hdfs://'"):
        finish_output("hdfs://nn:8020/out", driver=process_identity())


def test_schemes_not_served_are_refused_at_start_by_sink_and_source(spark, tmp_path):
    """s3:// and s3a:// are served by both (tests/files/test_file_sink_on_s3.py,
    tests/files/test_file_source_on_s3.py); a source mixing them with local paths is refused."""
    with pytest.raises(Exception, match="mixes local paths"):
        spark.readStream.format("sparklink.files").option("paths", f'["{tmp_path}", "s3a://acc/in"]') \
            .option("format", "json").schema("id LONG").load().writeStream.format("noop").start().awaitTermination()
    frame = spark.range(3)
    with pytest.raises(Exception, match="scheme 'gs://'"):
        frame.write.format("sparklink.files").option("path", "gs://acc/out").option("format", "json").save()
    stream = input_stream(spark, rows=2)
    with pytest.raises(Exception, match="scheme 'abfss://'"):
        query = (stream.writeStream.format("sparklink.files").option("path", "abfss://c@a.dfs/out")
                 .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        query.awaitTermination()
    with pytest.raises(Exception, match="scheme 'hdfs://'"):
        spark.read.format("sparklink.files").option("path", "hdfs://nn/in").option("format", "json") \
            .schema("id LONG").load().collect()
    with pytest.raises(Exception, match="scheme 'gs://'"):
        spark.readStream.format("sparklink.files").option("path", "gs://b/in").option("format", "json") \
            .schema("id LONG").load().writeStream.format("noop").start().awaitTermination()


@pytest.mark.parametrize("hidden_only", [False, True], ids=["empty", "hidden-files-only"])
def test_reading_an_empty_directory_with_a_schema_gives_an_empty_frame(spark, tmp_path, hidden_only):
    if hidden_only:
        (tmp_path / ".staging.json").write_text('{"id": 1}\n')
        (tmp_path / "_SUCCESS").write_text("")
    frame = spark.read.format("sparklink.files").option("path", str(tmp_path)).option("format", "json") \
        .schema("id LONG, name STRING").load()
    assert frame.collect() == []
    assert frame.columns == ["id", "name"]


def test_reading_an_empty_directory_without_a_schema_names_the_way_out(spark, tmp_path):
    with pytest.raises(Exception, match=r"cannot infer a schema: no non-empty parquet file under .*pass \.schema"):
        spark.read.format("sparklink.files").option("path", str(tmp_path)).option("format", "parquet").load()


def test_a_bucket_value_too_long_for_a_directory_name_is_refused_and_nothing_stays_staged(spark, tmp_path):
    """One bucket value of 300 characters in the fourth record batch of a task: the job fails
    naming the column and the limit, and the files staged for the first batches are removed.
    (One task: with several, a task Spark is still cancelling could stage a file after the
    abort, which would make the test depend on timing.)"""
    out = tmp_path / "out"
    frame = spark.range(0, 40_000, numPartitions=1).selectExpr(
        "id", "CASE WHEN id = 35001 THEN repeat('x', 300) ELSE CAST(id % 3 AS STRING) END AS k")
    with pytest.raises(Exception, match=r"bucketColumn 'k'.*300 characters.*limit is 255 bytes"):
        (frame.write.format("sparklink.files").option("path", str(out)).option("format", "parquet")
         .option("bucketAssigner", "column").option("bucketColumn", "k").save())
    assert hidden_files(out) == []
    assert visible_files(out) == []


def _die_on_last_row(row: dict) -> str:
    """A bucket assigner whose Python worker dies (SIGKILL) on the last row, after the first
    record batches are staged: a task that fails mid-write, running no clean-up of its own."""
    if row["id"] == 19_999:
        os.kill(os.getpid(), signal.SIGKILL)
    return f"k{row['id'] % 2}"


def test_a_failed_write_job_removes_the_staged_files_of_a_task_that_died_mid_write(spark, tmp_path):
    """The task that died mid-write left its staged files (today's code kept them); the driver's
    abort of the job removes every file tagged with the job."""
    out = tmp_path / "out"
    options = FileSink.for_row_format(str(out), "json").with_bucket_assigner(_die_on_last_row).build().options
    frame = spark.range(0, 20_000, numPartitions=1)
    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        with pytest.raises(Exception, match="(?i)worker|crashed|exited"):
            frame.write.format("sparklink.files").options(**options).save()
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    assert hidden_files(out) == []
    assert visible_files(out) == []


def test_a_string_hive_default_partition_value_reads_back_as_spark_reads_it(spark, tmp_path):
    """Spark's reader takes only the raw directory name ``k=__HIVE_DEFAULT_PARTITION__`` as null;
    the string value, which the sink writes escaped (``k=%5F_HIVE...``), reads back as the string."""
    out = tmp_path / "out"
    spark.createDataFrame([(1, "__HIVE_DEFAULT_PARTITION__"), (2, None), (3, "a")], "id LONG, k STRING").write \
        .format("sparklink.files").option("path", str(out)).option("format", "parquet") \
        .option("bucketAssigner", "column").option("bucketColumn", "k").option("bucketHiveStyle", "true").save()
    ours = spark.read.format("sparklink.files").option("path", str(out)).option("format", "parquet").load()
    theirs = spark.read.parquet(str(out))
    expected = [(1, "__HIVE_DEFAULT_PARTITION__"), (2, None), (3, "a")]
    assert sorted((r.id, r.k) for r in theirs.collect()) == expected
    assert sorted((r.id, r.k) for r in ours.collect()) == expected


def test_an_unknown_option_names_the_key_and_the_closest_known_one(spark, tmp_path):
    with pytest.raises(ConfigError, match=r"option 'maxFilesPerTriger': unknown option \(did you mean "
                                          r"'maxFilesPerTrigger'\?\)"):
        FileSourceConfig.from_options({"path": str(tmp_path), "format": "json", "maxFilesPerTriger": "1"})
    # Spark lower-cases the keys of .option(...) before a Python data source sees them
    with pytest.raises(Exception, match=r"did you mean 'maxFilesPerTrigger'"):
        spark.readStream.format("sparklink.files").option("path", str(tmp_path)).option("format", "json") \
            .option("maxFilesPerTriger", 1).schema("id LONG").load().writeStream.format("noop").start() \
            .awaitTermination()


@pytest.fixture
def full_disk(tmpfs):
    """A 64 KB tmpfs, as the conformance resource-fault tests mount (needs root)."""
    return tmpfs("64k")


def test_a_full_disk_names_the_part_file_and_the_metadata_file(spark, full_disk):
    out = full_disk / "out"
    frame = spark.range(0, 20_000, numPartitions=1).selectExpr("id", "uuid() AS noise")
    with pytest.raises(Exception, match=rf"No space left on device: '{out}/\.part-[^']+\.parquet\.inprogress\.j"):
        frame.write.format("sparklink.files").option("path", str(out)).option("format", "parquet") \
            .option("bucketAssigner", "basepath").save()
    assert hidden_files(out) == [] and visible_files(out) == []
    (full_disk / "filler").write_bytes(b"\0" * (64 * 1024 - 4096))
    with pytest.raises(OSError, match=rf"No space left on device: '{full_disk}/commits/0.json'"):
        LocalStorage(full_disk / "commits").put("0.json", json_bytes({"payload": "x" * 8192}))


def test_a_full_disk_during_compaction_names_the_compacted_file(full_disk):
    """Compaction's write runs inside the commit: a full disk names the file being written."""
    inputs = []
    for index in range(2):
        name = f"part-{index}.json"
        (full_disk / name).write_bytes(b'{"id": 1}\n' * 2500)  # 25 KB each: two fit, their copy does not
        inputs.append(PartFile(bucket="", partition=index, path=name, final=name, state=PENDING, length=25_000,
                               rows=2500, created_at=0.0, last_write_at=0.0))
    with pytest.raises(OSError, match=rf"No space left on device: '{full_disk}/\.compacted\.json\.tmp'"):
        run_compaction(FormatConfig(name="json"), LocalRecoverableWriter(LocalStorage(full_disk)),
                       inputs, ".compacted.json.tmp", "compacted.json", header=b"", batch_id=None)
    assert not (full_disk / "compacted.json").exists()
    assert [(full_disk / p.path).stat().st_size for p in inputs] == [25_000, 25_000]  # the inputs are intact
