"""The Delta sink's options and behaviour through Spark (``df.write``, ``df.writeStream``) in the
shared session; every table is read back with delta-rs."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from sparklink.delta.app_id import app_id_path, decode, encode, stream_app_id
from sparklink.delta.sink import DeltaSink
from sparklink.errors import CommitError, ConfigError
from sparklink.storage.memory import drop_memory_store, register_memory_store
from sparklink.testing.conformance.outputs import SEQUENCE_SCHEMA
from sparklink.testing.spark_session import error_text
from tests.delta.readers import delta_ids, unreferenced_files


def _frame(spark, ids, extra: bool = False):
    columns = ["id", "cast(id % 2 as int) as part"] + (["concat('x', id) as extra"] if extra else [])
    return spark.range(ids.start, ids.stop, 1, 2).selectExpr(*columns)


def test_df_write_creates_a_partitioned_table_with_user_metadata(spark, tmp_path):
    table = tmp_path / "t"
    (_frame(spark, range(40)).write.format("sparklink.delta").option("path", str(table))
     .option("partitionColumns", "part").option("userMetadata", "load 1").option("targetFileSize", "1").save())
    delta = DeltaTable(str(table))
    assert delta.metadata().partition_columns == ["part"]
    assert delta_ids(table) == list(range(40))
    rows = delta.to_pyarrow_table().to_pylist()
    assert all(row["part"] == row["id"] % 2 for row in rows)
    assert delta.history(1)[0].get("userMetadata") == "load 1"
    paths = delta.get_add_actions(flatten=True).column("path").to_pylist()
    assert all(p.startswith(("part=0/", "part=1/")) for p in paths)
    assert len(paths) >= 4  # targetFileSize=1: every Arrow batch closes its file
    assert unreferenced_files(table) == []


def test_df_write_txn_app_id_and_version_skip_a_repeated_write(spark, tmp_path):
    table = str(tmp_path / "t")

    def write(ids, version):
        (_frame(spark, ids).write.format("sparklink.delta").option("path", table)
         .option("txnAppId", "nightly").option("txnVersion", str(version)).save())

    write(range(10), 0)
    write(range(10), 0)    # the same foreachBatch call again: skipped
    write(range(10, 20), 1)
    write(range(10, 20), 1)
    assert delta_ids(table) == list(range(20))
    assert DeltaTable(table).transaction_version("nightly") == 1


def test_merge_schema(spark, tmp_path):
    table = str(tmp_path / "t")
    _frame(spark, range(4)).write.format("sparklink.delta").option("path", table).save()
    wider = _frame(spark, range(4, 8), extra=True)
    with pytest.raises(Exception) as refused:
        wider.write.format("sparklink.delta").option("path", table).save()
    assert "extra" in error_text(refused.value) and "mergeSchema" in error_text(refused.value)
    wider.write.format("sparklink.delta").option("path", table).option("mergeSchema", "true").save()
    rows = sorted(DeltaTable(table).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert [r["extra"] for r in rows] == [None] * 4 + [f"x{i}" for i in range(4, 8)]


def test_two_queries_and_a_fresh_checkpoint_neither_drop_nor_repeat(spark, tmp_path):
    """Two checkpoints stream into one table: each has its own application id, so the second
    (batch ids from 0 again) commits everything once; a restart of the first adds nothing."""
    table = str(tmp_path / "t")

    def run(checkpoint):
        (spark.readStream.format("sparklink.sequence").option("numSplits", 2).option("rowsPerSplit", 50).load()
         .writeStream.format("sparklink.delta").option("path", table)
         .option("checkpointLocation", str(tmp_path / checkpoint)).trigger(availableNow=True).start()
         .awaitTermination())

    run("ck1")
    run("ck2")
    run("ck1")
    assert delta_ids(table) == sorted(list(range(100)) * 2)
    first, second = (stream_app_id(tmp_path / ck) for ck in ("ck1", "ck2"))
    assert first != second
    delta = DeltaTable(table)
    assert delta.transaction_version(first) == delta.transaction_version(second) == 0


def test_stream_refuses_txn_app_id(spark, tmp_path):
    query = (spark.readStream.format("sparklink.sequence").option("numSplits", 1).option("rowsPerSplit", 5).load()
             .writeStream.format("sparklink.delta").option("path", str(tmp_path / "t"))
             .option("txnAppId", "mine").option("txnVersion", "0")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    with pytest.raises(Exception, match="txnAppId"):
        query.awaitTermination()
    assert not (tmp_path / "t" / "_delta_log").exists()


@pytest.mark.parametrize(("options", "problem"), [
    ({}, "option 'path': is required"),
    ({"path": "gs://bucket/t"}, "scheme 'gs://' is not served"),
    ({"path": "s3://bucket"}, "names a bucket's root"),
    ({"path": "/t", "s3.endpoint": "http://127.0.0.1:1"}, "applies to s3:// and s3a:// paths"),
    ({"path": "s3://bucket/t", "s3.accessKeyId": "a"}, "set together"),
    ({"path": "/t", "partitionColumns": "nope"}, "column 'nope' is not in the input"),
    ({"path": "/t", "txnAppId": "a"}, "required together with txnVersion"),
    ({"path": "/t", "txnVersion": "-1", "txnAppId": "a"}, "must be at least 0"),
    ({"path": "/t", "targetFileSize": "big"}, "targetFileSize"),
    ({"path": "/t", "mergeSchema": "maybe"}, "not a boolean"),
    ({"path": "/t", "optimizeWrite": "true"}, "unknown option"),
])
def test_bad_options_are_refused_naming_the_option(options, problem):
    with pytest.raises(ConfigError, match=problem.replace("(", r"\(")):
        DeltaSink(options, SEQUENCE_SCHEMA)


def test_a_memory_store_is_refused_as_the_table_path():
    root = register_memory_store("delta-path")
    try:
        with pytest.raises(ConfigError, match="option 'path': 'memory://delta-path/t': a Delta table lives in a local "
                                              "directory or under an S3 prefix"):
            DeltaSink({"path": f"{root}/t"}, SEQUENCE_SCHEMA)
    finally:
        drop_memory_store("delta-path")


def test_partition_columns_must_match_the_table(spark, tmp_path):
    table = str(tmp_path / "t")
    _frame(spark, range(4)).write.format("sparklink.delta").option("path", table).save()
    with pytest.raises(Exception) as refused:
        (_frame(spark, range(4, 8)).write.format("sparklink.delta").option("path", table)
         .option("partitionColumns", "part").save())
    assert "partitioned by nothing" in error_text(refused.value)
    assert delta_ids(table) == [0, 1, 2, 3]


def test_app_id_record_round_trip(tmp_path):
    assert decode(encode("sparklink-abc"), tmp_path) == "sparklink-abc"
    assert json.loads(encode("x")) == {"v": 1, "appId": "x"}
    first = stream_app_id(tmp_path / "ck")
    assert stream_app_id(tmp_path / "ck") == first and first.startswith("sparklink-")
    app_id_path(tmp_path / "ck").write_text('{"v": 2, "appId": "x"}')
    with pytest.raises(CommitError, match="version 1 expected"):
        stream_app_id(tmp_path / "ck")


def test_timestamp_and_date_columns_round_trip(spark, tmp_path):
    """Spark's TIMESTAMP (zoned: written as UTC) and DATE, one of them a partition column,
    read back by delta-rs and by the sparklink source."""
    from datetime import UTC, date, datetime, timedelta

    table = str(tmp_path / "t")
    (spark.range(0, 3, 1, 1).selectExpr("id", "timestamp_seconds(id * 3600 + 1767225600) as at",
                                        "date_add(date'2026-01-01', cast(id as int)) as day")
     .write.format("sparklink.delta").option("path", table).option("partitionColumns", "day").save())
    rows = sorted(DeltaTable(table).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert [(r["at"], r["day"]) for r in rows] == [(start + timedelta(hours=i), date(2026, 1, 1 + i)) for i in range(3)]
    read = sorted(spark.read.format("sparklink.delta").option("path", table).load().collect(), key=lambda r: r.id)
    assert [r.day for r in read] == [date(2026, 1, 1 + i) for i in range(3)]
    assert [r.at.timestamp() for r in read] == [(start + timedelta(hours=i)).timestamp() for i in range(3)]


def test_df_write_inside_foreach_batch(spark, tmp_path):
    """``df.write`` into sparklink.delta inside ``foreachBatch``: its tasks inherit the stream's
    ``streaming.sql.batchId`` property, yet each write is a batch job (no checkpoint needed;
    with ``txnAppId`` / ``txnVersion`` the pair is Delta's txn). A repeated call of a committed
    pair (a restart's replay) is skipped."""
    plain, idempotent = str(tmp_path / "plain"), str(tmp_path / "txn")

    def write(frame, batch_id):
        frame.write.format("sparklink.delta").option("path", plain).option("partitionColumns", "split").save()
        for _ in range(2):
            (frame.write.format("sparklink.delta").option("path", idempotent).option("txnAppId", "fb")
             .option("txnVersion", batch_id).save())

    (spark.readStream.format("sparklink.sequence").option("numSplits", 2).option("rowsPerSplit", 10)
     .load().writeStream.foreachBatch(write)
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start().awaitTermination())
    assert delta_ids(plain) == list(range(20)) and delta_ids(idempotent) == list(range(20))
    assert DeltaTable(idempotent).transaction_version("fb") == 0 and DeltaTable(idempotent).version() == 1
