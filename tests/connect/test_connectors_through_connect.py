"""Every connector family through a Spark Connect session: per family one write and one read,
each write read back by a reader nobody here wrote (Spark's own readers, pyarrow, delta-rs,
pyiceberg, psycopg, a read_committed Kafka consumer).

The same cases in a classic session are each connector's own tests, so they run here through
Connect only: the file sink and source (tests/files/, the example sink tests/examples/), S3
(tests/files/test_file_*s3*), PostgreSQL's upsert ``df.write`` (tests/postgres/test_sinks.py),
Kafka's ``df.write`` both semantics (tests/kafka/test_kafka_sink.py), ``foreachBatch`` with
``txnAppId`` / ``txnVersion`` (tests/sink/test_txn_writes.py, tests/delta/test_delta_sink.py),
Delta and Iceberg ``df.write`` (tests/delta/test_delta_sink.py, tests/iceberg/test_iceberg_sink.py).

Under Connect the server is the driver: files are written and read by the server's processes
(here on the same machine, so the test reads them back directly), and a ``foreachBatch``
function runs in a Python process of the server."""

from __future__ import annotations

import json
import os
import time
import uuid

import pyarrow.dataset as pa_dataset

from tests.delta.readers import delta_ids
from tests.iceberg.iceberg_readers import catalog_options, scan_ids
from tests.kafka.readers import read_ids


def test_files_write_read_and_stream(connect_spark, tmp_path):
    out, source = str(tmp_path / "out"), tmp_path / "in"
    source.mkdir()
    (source / "a.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(50)))
    frame = connect_spark.read.format("sparklink.files").option("path", str(source)).option("format", "json") \
        .schema("id long").load()
    frame.write.format("sparklink.files").option("path", out).option("format", "parquet").save()
    # Spark's own reader (the default, Hive-style layout) and pyarrow see every row once
    assert sorted(r.id for r in connect_spark.read.parquet(out).select("id").collect()) == list(range(50))
    assert sorted(pa_dataset.dataset(out, format="parquet", partitioning="hive").to_table()
                  .column("id").to_pylist()) == list(range(50))
    # a stream through the example sink (its commits are its own, no end of input needed)
    streamed = str(tmp_path / "streamed")
    (connect_spark.readStream.format("sparklink.sequence").option("numSplits", 2).option("rowsPerSplit", 20).load()
     .writeStream.format("sparklink.directory").option("path", streamed)
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start().awaitTermination())
    assert sorted(r.id for r in connect_spark.read.parquet(streamed).collect()) == list(range(40))


def test_files_on_s3(connect_spark, s3_server, s3_bucket):
    path = f"s3://{s3_bucket}/out"
    connect_spark.range(0, 30, 1, 2).write.format("sparklink.files").option("path", path).option("format", "json") \
        .option("bucketAssigner", "basepath").options(**s3_server.options()).save()
    client = s3_server.client()
    ids = []
    for item in client.list_objects_v2(Bucket=s3_bucket, Prefix="out/").get("Contents", ()):
        name = item["Key"][len("out/"):]
        if not name.startswith(("_", ".")):
            body = client.get_object(Bucket=s3_bucket, Key=item["Key"])["Body"].read().decode()
            ids += [json.loads(line)["id"] for line in body.splitlines() if line]
    assert sorted(ids) == list(range(30))
    back = connect_spark.read.format("sparklink.files").option("path", path).option("format", "json") \
        .options(**s3_server.options()).schema("id long").load()
    assert back.count() == 30


def test_postgres_write_and_read(connect_spark, postgres):
    table = f"connect_{uuid.uuid4().hex[:10]}"
    (connect_spark.range(0, 40, 1, 2).selectExpr("id", "id * 2 AS v").write.format("sparklink.postgres")
     .option("dsn", postgres.dsn).option("table", table).option("semantic", "upsert").option("keyColumns", "id").save())
    with postgres.connect() as conn:
        assert conn.execute(f'SELECT count(*), sum(v) FROM "{table}"').fetchone() == (40, sum(2 * i for i in range(40)))
    back = connect_spark.read.format("sparklink.postgres").option("dsn", postgres.dsn).option("table", table).load()
    assert back.count() == 40


def test_kafka_write_and_read(connect_spark, kafka):
    """Apache Kafka's own broker (the session's ``kafka`` fixture); the transactional write read
    back by a read_committed consumer (librdkafka, which hides aborted records)."""
    from sparklink.testing.kafka import create_topic

    topic = f"connect-{uuid.uuid4().hex[:10]}"
    create_topic(kafka.bootstrap_servers, topic, 2)
    (connect_spark.range(0, 60, 1, 2).selectExpr("cast(id as string) AS value").write.format("sparklink.kafka")
     .option("kafka.bootstrap.servers", kafka.bootstrap_servers).option("topic", topic)
     .option("semantic", "exactly-once").save())
    assert read_ids(kafka.bootstrap_servers, topic) == list(range(60))
    back = (connect_spark.read.format("sparklink.kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("subscribe", topic).load())
    assert back.count() == 60


def write_batch_once(batch, batch_id):
    """A ``foreachBatch`` function (under Spark Connect it runs in a Python process of the server,
    which imports this module by name): an idempotent file sink write per micro-batch."""
    path = batch.sparkSession.conf.get("sparklink.test.foreachBatchPath")
    (batch.write.format("sparklink.files").mode("append").option("path", path).option("format", "parquet")
     .option("bucketAssigner", "basepath").option("txnAppId", "connect-test").option("txnVersion", batch_id).save())


def test_foreach_batch_with_txn_options(connect_spark, tmp_path):
    """Each micro-batch written once with txnAppId / txnVersion = batch id; Spark's commit of the
    last micro-batch is lost (its checkpoint entry removed), so the restart runs it again and the
    sink skips the write it already has."""
    out, checkpoint = str(tmp_path / "out"), tmp_path / "ck"
    connect_spark.conf.set("sparklink.test.foreachBatchPath", out)

    def run():
        (connect_spark.readStream.format("sparklink.sequence").option("numSplits", 2).option("rowsPerSplit", 15)
         .option("maxRowsPerTrigger", 10).load().select("id")
         .writeStream.foreachBatch(write_batch_once).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start().awaitTermination())

    run()
    commits = checkpoint / "commits"
    last = max(int(entry.name) for entry in commits.iterdir() if entry.name.isdigit())
    for lost in (commits / str(last), commits / f".{last}.crc"):  # the last micro-batch ran, Spark's commit of
        lost.unlink(missing_ok=True)                                # it is lost: it runs again
    run()
    assert sorted(r.id for r in connect_spark.read.parquet(out).collect()) == list(range(30))


def test_delta_write_and_read(connect_spark, tmp_path):
    table = str(tmp_path / "table")
    connect_spark.range(0, 20, 1, 2).write.format("sparklink.delta").option("path", table).save()
    assert delta_ids(table) == list(range(20))  # delta-rs
    assert connect_spark.read.format("sparklink.delta").option("path", table).load().count() == 20


def test_iceberg_write_and_read(connect_spark, tmp_path):
    options = catalog_options(tmp_path)
    connect_spark.range(0, 25, 1, 2).write.format("sparklink.iceberg").options(**options).save()
    assert scan_ids(options) == list(range(25))
    assert connect_spark.read.format("sparklink.iceberg").options(**options).load().count() == 25


CHANGES = ([(1, "c", 1, "a"), (2, "c", 1, "b"), (3, "c", 1, "c")],
           [(1, "u", 3, "a3"), (1, "u", 2, "a2"), (2, "d", 2, None), (4, "c", 2, "d")])
FINAL = {1: "a3", 3: "c", 4: "d"}  # the last change per key by seq, a delete removing its key


def test_changelogs_into_delta_iceberg_and_kafka(connect_spark, kafka, tmp_path):
    """``writeMode=upsert`` streams from a Connect session (two micro-batches of changes: keys
    repeated in one, an update, a delete, an insert) into Delta, Iceberg and a Kafka topic, read
    back by delta-rs, pyiceberg and a read_committed consumer (what compaction keeps)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from sparklink.testing.kafka import create_topic
    from tests.iceberg.iceberg_readers import load_table
    from tests.kafka.readers import compacted

    changes = tmp_path / "changes"
    changes.mkdir()
    written = time.time() - 60
    for index, batch in enumerate(CHANGES):
        ids, ops, seqs, values = zip(*batch, strict=True)
        path = changes / f"{index}.parquet"
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "op": ops, "seq": pa.array(seqs, pa.int64()),
                                 "value": pa.array(values, pa.string())}), path)
        # Spark's file source takes files in modification-time order (ties in listing order, which is
        # the directory's): a second apart, so that micro-batch i is file i
        os.utime(path, (written + index, written + index))
    topic = f"connect-changes-{uuid.uuid4().hex[:10]}"
    create_topic(kafka.bootstrap_servers, topic, 1)
    upsert = {"writeMode": "upsert", "keyColumns": "id", "opColumn": "op", "sequenceColumn": "seq"}
    iceberg = catalog_options(tmp_path / "iceberg", "db.state")
    sinks = {"delta": {"path": str(tmp_path / "delta")}, "iceberg": iceberg,
             "kafka": {"kafka.bootstrap.servers": kafka.bootstrap_servers, "topic": topic}}
    for name, options in sinks.items():
        (connect_spark.readStream.schema("id long, op string, seq long, value string").option("maxFilesPerTrigger", 1)
         .parquet(str(changes)).writeStream.format(f"sparklink.{name}").options(**options).options(**upsert)
         .option("checkpointLocation", str(tmp_path / f"ck-{name}")).trigger(availableNow=True).start()
         .awaitTermination())
    delta = DeltaTable(str(tmp_path / "delta")).to_pyarrow_table()
    assert dict(zip(delta.column("id").to_pylist(), delta.column("value").to_pylist(), strict=True)) == FINAL
    state = load_table(iceberg).scan().to_arrow()
    assert dict(zip(state.column("id").to_pylist(), state.column("value").to_pylist(), strict=True)) == FINAL
    assert compacted(kafka.bootstrap_servers, topic) == {str(k).encode(): v.encode() for k, v in FINAL.items()}


def test_iceberg_equality_deletes_applied_in_a_read(connect_spark, tmp_path):
    """The Iceberg source applies an equality delete file (an upsert as Flink's writer commits it)
    in a Connect session's ``spark.read``, as in a classic one (tests/iceberg/test_iceberg_source.py)."""
    from tests.iceberg.source_tables import upserted_by_equality_deletes

    source = catalog_options(tmp_path / "src", "db.eq")
    expected = upserted_by_equality_deletes(source)
    frame = connect_spark.read.format("sparklink.iceberg").options(**source).load()
    assert sorted((r.id, r.label) for r in frame.collect()) == expected
