"""The ``sparklink.iceberg`` source in the test run's Spark session, on tables pyiceberg wrote
(``table.append``): ``spark.read`` against pyiceberg's scan, ``spark.readStream`` into the
``sparklink.iceberg`` sink read back by pyiceberg's scan (every id once), a stream that meets an
overwrite snapshot, a table with an equality delete file read, and a table on a SeaweedFS
warehouse read and streamed."""

from __future__ import annotations

from collections import Counter

import pytest

from sparklink.testing.spark_session import error_text
from tests.iceberg.iceberg_readers import catalog_options, scan_ids
from tests.iceberg.source_tables import append_snapshots, catalog_of, rows, upserted_by_equality_deletes


def stream(spark, source: dict, sink: dict, checkpoint, **extra) -> None:
    reader = spark.readStream.format("sparklink.iceberg").options(**source)
    for key, value in extra.items():
        reader = reader.option(key, value)
    (reader.load().writeStream.format("sparklink.iceberg").options(**sink)
     .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start().awaitTermination())


def test_batch_read_of_a_partitioned_table_and_time_travel(spark, tmp_path):
    source = catalog_options(tmp_path / "src", "db.parts")
    append_snapshots(source, 3, 20, partition_by="grp")
    table = catalog_of(source).load_table("db.parts")
    frame = spark.read.format("sparklink.iceberg").options(**source).load()
    assert frame.schema.simpleString() == "struct<id:bigint,label:string,grp:int>"
    got = sorted((r.id, r.label, r.grp) for r in frame.collect())
    assert got == sorted(zip(*(table.scan().to_arrow().column(c).to_pylist() for c in ("id", "label", "grp")),
                                 strict=True))
    assert len(got) == 60
    first = table.snapshots()[0].snapshot_id
    old = spark.read.format("sparklink.iceberg").options(**source).option("snapshotId", str(first)).load()
    assert sorted(r.id for r in old.collect()) == list(range(20))


def test_batch_read_applies_an_equality_delete_file(spark, tmp_path):
    """An upsert as Flink's writer commits it (an equality delete on ``id`` and the new rows in one
    snapshot): ``spark.read`` drops the old versions only."""
    source = catalog_options(tmp_path / "src", "db.eq")
    expected = upserted_by_equality_deletes(source)
    frame = spark.read.format("sparklink.iceberg").options(**source).load()
    assert sorted((r.id, r.label) for r in frame.collect()) == expected


def test_stream_into_the_iceberg_sink_every_id_once_then_an_overwrite_snapshot(spark, tmp_path):
    source = catalog_options(tmp_path / "src", "db.src")
    sink = catalog_options(tmp_path / "out", "db.copy")
    append_snapshots(source, 5, 22)
    catalog_of(source).load_table("db.src").overwrite(rows(range(200, 205)), overwrite_filter="id < 5")
    with pytest.raises(Exception) as failed:
        stream(spark, source, sink, tmp_path / "ck", maxFilesPerTrigger="2")
    overwrite = [s for s in catalog_of(source).load_table("db.src").snapshots()
                 if s.summary.operation.value == "overwrite"][-1]
    assert f"snapshot {overwrite.snapshot_id} is an overwrite snapshot" in error_text(failed.value)
    assert scan_ids(sink) == list(range(110))  # every append before the overwrite is committed
    assert len(catalog_of(sink).load_table("db.copy").snapshots()) == 3  # 2 + 2 + 1 files: one snapshot each
    stream(spark, source, sink, tmp_path / "ck", skipOverwriteSnapshots="true")  # restarts from the checkpoint
    counts = Counter(scan_ids(sink))
    assert {i for i, c in counts.items() if c > 1} == set()
    assert sorted(counts) == list(range(110)) + list(range(200, 205))


def test_read_and_stream_a_table_on_a_seaweedfs_warehouse(spark, tmp_path, s3_server, s3_bucket):
    source = {"table": "db.events", "catalog.type": "sql", "catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
              "catalog.warehouse": f"s3://{s3_bucket}/warehouse", "catalog.s3.endpoint": s3_server.endpoint,
              "catalog.s3.region": s3_server.region, "catalog.s3.access-key-id": s3_server.access_key_id,
              "catalog.s3.secret-access-key": s3_server.secret_access_key}
    append_snapshots(source, 2, 15)
    frame = spark.read.format("sparklink.iceberg").options(**source).load()
    assert sorted(r.id for r in frame.collect()) == list(range(30))
    sink = catalog_options(tmp_path / "out", "db.copy")  # the stream path: manifests listed through S3
    stream(spark, source, sink, tmp_path / "ck")
    assert scan_ids(sink) == list(range(30))


def test_batch_read_of_every_served_column_type(spark, tmp_path):
    """Iceberg types through pyiceberg's Arrow reader and Spark's Arrow conversion: the values
    Spark collects equal pyiceberg's scan's (uuid has no Spark type and is refused elsewhere)."""
    import datetime
    import decimal

    import pyarrow as pa

    options = catalog_options(tmp_path / "types", "db.types")
    data = pa.table({
        "b": pa.array([True, None]), "i": pa.array([1, 2], pa.int32()), "l": pa.array([3, 4], pa.int64()),
        "f": pa.array([1.5, 2.5], pa.float32()), "d": pa.array([3.25, None], pa.float64()),
        "dec": pa.array([decimal.Decimal("12.34"), decimal.Decimal("-0.01")], pa.decimal128(10, 2)),
        "day": pa.array([datetime.date(2026, 11, 25), None], pa.date32()),
        "ts": pa.array([datetime.datetime(2026, 11, 25, 10, 0, 1, 5)] * 2, pa.timestamp("us")),
        "tstz": pa.array([datetime.datetime(2026, 11, 25, 10, 0, tzinfo=datetime.timezone.utc)] * 2,
                         pa.timestamp("us", tz="UTC")),
        "s": pa.array(["x", "ü"]), "bin": pa.array([b"\x00\x01", b""]),
        "nums": pa.array([[1, 2], []], pa.list_(pa.int64())),
        "tags": pa.array([[("a", 1)], [("b", 2), ("c", 3)]], pa.map_(pa.string(), pa.int64())),
        "point": pa.array([{"x": 1.0, "y": 2.0}, None], pa.struct([("x", pa.float64()), ("y", pa.float64())])),
    })
    catalog = catalog_of(options)
    catalog.create_namespace("db")
    catalog.create_table("db.types", schema=data.schema).append(data)
    frame = spark.read.format("sparklink.iceberg").options(**options).load()
    got = [row.asDict(recursive=True) for row in frame.orderBy("l").collect()]
    expected = catalog.load_table("db.types").scan().to_arrow().sort_by("l").to_pylist()
    for row in got:
        row["tags"] = sorted(row["tags"].items())
        row["tstz"] = row["tstz"].astimezone(datetime.timezone.utc)
    for row in expected:
        row["tags"] = sorted(row["tags"])
    assert got == expected


def test_small_data_files_are_read_several_to_a_task(spark, tmp_path):
    """A snapshot per small file is not a Spark task per file (each costs about 0.1 s before it
    reads a byte): the files of a batch are packed into a task per core, every row read once."""
    import os

    source = catalog_options(tmp_path / "src", "db.small")
    sink = catalog_options(tmp_path / "out", "db.copy")
    append_snapshots(source, 8, 10)
    frame = spark.read.format("sparklink.iceberg").options(**source).load()
    assert frame.rdd.getNumPartitions() <= (os.cpu_count() or 2)
    assert sorted(r.id for r in frame.collect()) == list(range(80))
    stream(spark, source, sink, tmp_path / "ck")
    assert scan_ids(sink) == list(range(80))
