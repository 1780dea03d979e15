"""Partition transforms in the ``sparklink.iceberg`` sink without Spark (seconds): a table
partitioned by ``day(ts)``, ``bucket[4](id)`` and ``truncate[2](name)`` (pyiceberg's transforms,
``pyiceberg-core``), written by the sink's tasks in ``writeMode=append`` and merged into in
``writeMode=upsert``; read back with pyiceberg's scan, with filters that prune by partition
(a wrong partition value would hide rows), and every file's partition checked against pyiceberg's
own transform of its rows."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from sparklink.errors import ConfigError
from sparklink.iceberg.sink import IcebergSink
from sparklink.sink import WriterContext
from sparklink.spark.sink_adapter import SinkCommitMessage, SinkStreamWriter
from tests.iceberg.iceberg_readers import catalog_options, load_table

SCHEMA = StructType([StructField("id", LongType()), StructField("ts", TimestampType()),
                     StructField("name", StringType())])
START = datetime(2026, 11, 25, 20, tzinfo=timezone.utc)


def rows(ids: range) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "id": pa.array(list(ids), pa.int64()),
        "ts": pa.array([START + timedelta(hours=3 * i) for i in ids], pa.timestamp("us", tz="UTC")),
        "name": pa.array([None if i % 7 == 0 else f"n{i % 5}x{i}" for i in ids], pa.string())})


def make_table(options: dict) -> None:
    from pyiceberg.catalog import load_catalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform, DayTransform, TruncateTransform
    from pyiceberg.types import LongType as ILong
    from pyiceberg.types import NestedField, TimestamptzType
    from pyiceberg.types import StringType as IString

    properties = {k[len("catalog."):]: v for k, v in options.items() if k.startswith("catalog.")}
    catalog = load_catalog("default", **properties)
    catalog.create_namespace("db")
    schema = Schema(NestedField(1, "id", ILong()), NestedField(2, "ts", TimestamptzType()),
                    NestedField(3, "name", IString()))
    spec = PartitionSpec(PartitionField(2, 1000, DayTransform(), "ts_day"),
                         PartitionField(1, 1001, BucketTransform(4), "id_bucket"),
                         PartitionField(3, 1002, TruncateTransform(2), "name_trunc"))
    catalog.create_table(options["table"], schema=schema, partition_spec=spec)


def micro_batch(options: dict, checkpoint, batch_id: int, batches: list[pa.RecordBatch], schema=SCHEMA) -> None:
    sink = IcebergSink(dict(options, checkpointLocation=str(checkpoint)), schema)
    messages = []
    for partition, batch in enumerate(batches):
        context = WriterContext(partition_id=partition, attempt_number=0, task_attempt_id=partition,
                                job_id=f"job-{batch_id}", batch_id=batch_id, query_id="transforms-test")
        writer = sink.create_writer(context)
        writer.write_batch(batch)
        writer.flush()
        messages.append(SinkCommitMessage(partition_id=partition, attempt_number=0, query_id="transforms-test",
                                          committables=writer.prepare_commit()))
        writer.close()
    SinkStreamWriter(sink, query_id="transforms-test").commit(messages, batch_id)


def check_partitions(table) -> None:
    """Every data file's partition tuple is pyiceberg's transform of each of its rows."""
    import pyarrow.parquet as pq

    spec = table.spec()
    schema = table.schema()
    for task in table.scan().plan_files():
        with table.io.new_input(task.file.file_path).open() as stream:
            data = pq.read_table(stream)
        for position, field in enumerate(spec.fields):
            column = data.column(schema.find_column_name(field.source_id))
            transformed = field.transform.pyarrow_transform(schema.find_field(field.source_id).field_type)(column)
            assert set(pa.chunked_array([transformed]).to_pylist()) == {task.file.partition[position]}, task.file


def test_append_writes_day_bucket_and_truncate_partitions(tmp_path):
    from pyiceberg.expressions import EqualTo, GreaterThanOrEqual

    options = catalog_options(tmp_path / "iceberg")
    make_table(options)
    micro_batch(options, tmp_path / "ck", 0, [rows(range(0, 20)), rows(range(20, 40))])
    table = load_table(options)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(40))
    assert len(list(table.scan().plan_files())) > 8  # one file per (day, bucket, prefix) in each task
    check_partitions(table)
    since = START + timedelta(days=3)
    expected = [i for i in range(40) if START + timedelta(hours=3 * i) >= since]
    assert sorted(table.scan(row_filter=GreaterThanOrEqual("ts", since.isoformat())).to_arrow()
                  .column("id").to_pylist()) == expected
    assert table.scan(row_filter=EqualTo("id", 17)).to_arrow().column("id").to_pylist() == [17]
    assert table.scan(row_filter=EqualTo("name", "n1x36")).to_arrow().column("id").to_pylist() == [36]


def test_upsert_merges_into_a_table_with_transforms(tmp_path):
    from pyiceberg.expressions import EqualTo

    options = dict(catalog_options(tmp_path / "iceberg"), writeMode="upsert", keyColumns="id")
    make_table(options)
    micro_batch(options, tmp_path / "ck", 0, [rows(range(0, 30))])
    moved = rows(range(10, 15))  # new ts and name: their rows move to other partitions
    moved = moved.set_column(1, "ts", pa.array([START + timedelta(days=9)] * 5, pa.timestamp("us", tz="UTC")))
    micro_batch(options, tmp_path / "ck", 1, [moved, rows(range(30, 35))])
    table = load_table(options)
    ids = sorted(table.scan().to_arrow().column("id").to_pylist())
    assert ids == list(range(35))
    check_partitions(table)
    assert table.scan(row_filter=EqualTo("id", 12)).to_arrow().column("ts").to_pylist() == [START + timedelta(days=9)]


def df_write(options: dict, batches: list[pa.RecordBatch], *, overwrite: bool) -> None:
    """A ``df.write`` job as Spark's adapter runs it (SinkBatchWriter: tasks, then the job's commit)."""
    from sparklink.spark.sink_adapter import SinkBatchWriter

    sink = IcebergSink(options, SCHEMA)
    if overwrite:
        sink.prepare_overwrite()
    writer = SinkBatchWriter(sink)
    messages = []
    for partition, batch in enumerate(batches):
        context = WriterContext(partition_id=partition, attempt_number=0, task_attempt_id=partition,
                                job_id=writer.job_id, batch_id=None, query_id=None)
        task = sink.create_writer(context)
        task.write_batch(batch)
        task.flush()
        messages.append(SinkCommitMessage(partition_id=partition, attempt_number=0, query_id=None,
                                          committables=task.prepare_commit()))
        task.close()
    writer.commit(messages)


def test_df_write_overwrite_replaces_the_rows_of_the_filter_in_one_commit(tmp_path):
    """mode("overwrite") with overwriteFilter replaces only the matching rows (one catalog commit:
    pyiceberg's delete, whole files and rewritten ones, plus the append); without the filter the
    whole table; overwriteFilter on an append and a bad expression are refused."""
    options = catalog_options(tmp_path / "iceberg")
    make_table(options)
    df_write(options, [rows(range(0, 40))], overwrite=False)
    cut = START + timedelta(days=2)  # rows 0..15 are before it
    df_write(dict(options, overwriteFilter=f"ts >= '{cut.isoformat()}'"), [rows(range(100, 103))], overwrite=True)
    table = load_table(options)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(16)) + [100, 101, 102]
    check_partitions(table)
    history = [s.summary.operation.value for s in table.snapshots()]
    assert history[-2:] in (["delete", "append"], ["overwrite", "append"]), history
    assert len({s.summary.get("sparklink.batch-id") for s in table.snapshots()[-2:]}) == 1
    df_write(options, [rows(range(200, 202))], overwrite=True)
    assert sorted(load_table(options).scan().to_arrow().column("id").to_pylist()) == [200, 201]
    with pytest.raises(ConfigError, match="overwriteFilter"):
        df_write(dict(options, overwriteFilter="id = 1"), [rows(range(3))], overwrite=False)
    with pytest.raises(ConfigError, match="overwriteFilter.*not an Iceberg filter"):
        IcebergSink(dict(options, overwriteFilter="id === ="), SCHEMA)
    assert sorted(load_table(options).scan().to_arrow().column("id").to_pylist()) == [200, 201]
