"""What is particular to ``sparklink.delta`` on S3 (SeaweedFS): concurrent delta-rs commits with
the settings the sink derives never overwrite one another (conditional put), an environment
that makes delta-rs commit unsafely is refused, a failed task leaves no object nor upload, and a
``df.write`` to ``s3a://`` through Spark. Tables are read back with delta-rs, the bucket listed
with boto3. (The conformance suite on S3: test_delta_sink_conformance.py::TestDeltaSinkOnS3.)"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError

from sparklink.delta.sink import DeltaSink
from sparklink.delta.table_location import UNSAFE_ENVIRONMENT, location_from_options
from sparklink.errors import ConfigError
from sparklink.sink.writer import WriterContext
from sparklink.testing.conformance.outputs import SEQUENCE_SCHEMA
from tests.delta.readers import delta_ids, delta_storage_options, unreferenced_objects

WRITERS = 4


def test_concurrent_commits_never_overwrite_one_another(s3_server, s3_bucket):
    """WRITERS threads load the table at version 0, then commit at once with the storage
    options the sink derives: each commit takes a version of its own (the commit file is
    created with If-None-Match; a writer that loses retries on the next version), so every
    writer's txn is in the table. A commit by copy and delete could let two of them write
    one version and lose a txn."""
    location = location_from_options({"path": f"s3a://{s3_bucket}/t", **s3_server.options()})
    schema = pa.schema([("id", pa.int64())])
    DeltaTable.create(location.uri(), schema, storage_options=location.delta_storage_options())
    tables = [DeltaTable(location.uri(), storage_options=location.delta_storage_options()) for _ in range(WRITERS)]
    start, failures = threading.Barrier(WRITERS), []

    def commit(index):
        start.wait()
        try:
            tables[index].create_write_transaction(
                [], mode="append", schema=schema,
                commit_properties=CommitProperties(app_transactions=[Transaction(app_id=f"w{index}", version=7)]))
        except CommitFailedError as exc:  # pragma: no cover - what the assertion below reports
            failures.append(exc)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    table = DeltaTable(location.uri(), storage_options=delta_storage_options(s3_server))
    assert table.version() == WRITERS
    assert {f"w{i}": table.transaction_version(f"w{i}") for i in range(WRITERS)} == {f"w{i}": 7 for i in range(WRITERS)}


@pytest.mark.parametrize("variable", UNSAFE_ENVIRONMENT)
def test_an_environment_making_delta_rs_commit_unsafely_is_refused(variable, monkeypatch):
    monkeypatch.setenv(variable, "true" if variable.endswith("RENAME") else "dynamodb")
    location = location_from_options({"path": "s3://bucket/t", "s3.endpoint": "http://127.0.0.1:1",
                                      "s3.accessKeyId": "id", "s3.secretAccessKey": "very-secret"})
    with pytest.raises(ConfigError, match=f"unset {variable}") as refused:
        location.delta_storage_options()
    assert "very-secret" not in str(refused.value)


def test_storage_options_follow_the_settings_and_no_secret_shows():
    secure = location_from_options({"path": "s3://bucket/t", "s3.endpoint": "https://store.example:9000",
                                    "s3.region": "eu-west-3", "s3.accessKeyId": "id", "s3.secretAccessKey": "s3cr3t"})
    options = secure.delta_storage_options()
    assert options["AWS_ALLOW_HTTP"] == "false" and options["AWS_REGION"] == "eu-west-3"
    assert options["AWS_S3_ALLOW_UNSAFE_RENAME"] == "false"
    assert "s3cr3t" not in repr(secure) and "s3cr3t" not in secure.describe()
    plain = location_from_options({"path": "s3://bucket/t", "s3.endpoint": "http://127.0.0.1:8333",
                                   "s3.accessKeyId": "id", "s3.secretAccessKey": "s3cr3t"})
    assert plain.delta_storage_options()["AWS_ALLOW_HTTP"] == "true"


def test_a_failed_task_leaves_no_object_nor_upload(s3_server, s3_bucket, tmp_path):
    """A task with one closed file (its upload completed) and one open (parts pending) fails:
    its abort deletes the object and aborts the upload."""
    options = {"path": f"s3://{s3_bucket}/t", "partitionColumns": "split", "checkpointLocation": str(tmp_path / "ck"),
               **s3_server.options()}
    sink = DeltaSink(options, SEQUENCE_SCHEMA)
    writer = sink.create_writer(WriterContext(partition_id=0, attempt_number=0, task_attempt_id=0, job_id="j",
                                              batch_id=0, query_id="q"))
    writer.write_batch(pa.RecordBatch.from_pydict({"id": pa.array([1, 2], pa.int64()), "split": pa.array([0, 0], pa.int32())}))
    writer.flush()
    assert len(writer.prepare_commit()) == 1
    writer.write_batch(pa.RecordBatch.from_pydict({"id": pa.array([3], pa.int64()), "split": pa.array([1], pa.int32())}))
    assert len(unreferenced_objects(s3_server, options["path"])) == 2  # the object and the open upload
    writer.abort()
    assert unreferenced_objects(s3_server, options["path"]) == []


def test_the_source_reads_a_table_on_s3(spark, s3_server, s3_bucket, tmp_path):
    """A partitioned table written to S3 by delta-rs, read by ``spark.read`` (its snapshot, listed
    by delta-rs) and by a stream from ``startingVersion=0`` (the commit files read from S3);
    what the stream wrote read with pyarrow. ``startingTimestamp`` on S3 takes commit times from
    the objects' LastModified."""
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    from sparklink.delta.source import DeltaSource

    path = f"s3a://{s3_bucket}/events"
    for ids in (range(10), range(10, 20)):
        write_deltalake(path, pa.table({"id": pa.array(ids, pa.int64()), "grp": pa.array([i % 2 for i in ids], pa.int32())}),
                        mode="append", partition_by=["grp"], storage_options=delta_storage_options(s3_server))
    frame = spark.read.format("sparklink.delta").option("path", path).options(**s3_server.options()).load()
    assert sorted((r.id, r.grp) for r in frame.collect()) == [(i, i % 2) for i in range(20)]
    out = tmp_path / "out"
    (spark.readStream.format("sparklink.delta").option("path", path).options(**s3_server.options())
     .option("startingVersion", "0").option("maxFilesPerTrigger", "3").load()
     .writeStream.format("sparklink.directory").option("path", str(out))
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start().awaitTermination())
    ids = sorted(i for part in out.glob("part-*.parquet") for i in pq.read_table(part).column("id").to_pylist())
    assert ids == list(range(20))
    enumerator = DeltaSource({"path": path, "startingTimestamp": "2000-01-01", **s3_server.options()}) \
        .create_enumerator(streaming=True)
    assert enumerator.initial_offset() == {"version": 0, "index": 0}


def test_df_write_to_s3a_through_spark(spark, s3_server, s3_bucket):
    path = f"s3a://{s3_bucket}/events"
    (spark.range(0, 30, 1, 2).selectExpr("id", "cast(id % 3 as int) as grp").write.format("sparklink.delta")
     .option("path", path).option("partitionColumns", "grp").options(**s3_server.options()).save())
    assert delta_ids(path, storage_options=delta_storage_options(s3_server)) == list(range(30))
    assert unreferenced_objects(s3_server, path) == []
