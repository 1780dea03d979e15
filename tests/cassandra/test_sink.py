"""The ``sparklink.cassandra`` sink against the real node: what is refused before any write,
``df.write`` of both semantics with the CQL types a DataFrame maps to, idempotent
``txnAppId`` / ``txnVersion`` writes, and rows read back with the Python driver."""

from __future__ import annotations

import datetime
import decimal
import uuid

import pyarrow as pa
import pytest
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from sparklink.cassandra.connection import CassandraError, ConnectionSettings
from sparklink.cassandra.sink import CassandraSinkConnector
from sparklink.errors import ConfigError, DataError
from sparklink.sink import WriterContext
from tests.cassandra.conftest import KEYSPACE, sink_options

SCHEMA = StructType([StructField("id", LongType()), StructField("split", IntegerType())])


@pytest.mark.parametrize(("extra", "schema", "message"), [
    ({"consistencylevl": "ONE"}, SCHEMA, r"option 'consistencylevl': unknown option \(did you mean 'consistencyLevel'\?\)"),
    ({"semantic": "exactly-once"}, SCHEMA, r"option 'semantic': unknown value 'exactly-once'"),
    ({"semantic": "write-ahead"}, SCHEMA, r"option 'checkpointLocation': is required for semantic=write-ahead"),
    ({"username": "u", "password": None}, SCHEMA, r"option 'password': is required with option 'username'"),
    ({"sslCaCertificate": "/ca.pem"}, SCHEMA, r"option 'sslCaCertificate': applies with ssl=true only"),
    ({"table": "no_such_table"}, SCHEMA, r"table sparklink_tests\.no_such_table does not exist"),
    ({"keyspace": "no_such_keyspace"}, SCHEMA, r"keyspace 'no_such_keyspace' does not exist"),
    ({}, StructType(SCHEMA.fields + [StructField("extra", StringType())]), r"has no column 'extra' \(DataFrame column\)"),
    ({}, StructType([StructField("split", IntegerType())]), r"lacks primary-key column\(s\) \['id'\]"),
    ({}, StructType([StructField("id", StringType()), StructField("split", IntegerType())]),
     r"column 'id' of sparklink_tests\.\S+ is bigint; the DataFrame's 'id' is string, which it does not take"),
], ids=["unknown-option", "semantic", "write-ahead-without-checkpoint", "credentials", "tls-option-without-tls",
        "missing-table", "missing-keyspace", "extra-column", "missing-key-column", "type"])
def test_refused_before_any_write_with_one_line(cassandra, new_table, extra, schema, message):
    table = new_table("id bigint PRIMARY KEY, split int")
    options = {key: value for key, value in dict(sink_options(cassandra, table), **extra).items() if value is not None}
    with pytest.raises(ConfigError, match=message) as caught:
        CassandraSinkConnector(options, schema)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("semantic", ["upsert", "write-ahead"])
def test_a_null_primary_key_is_refused_before_its_batch_is_written(cassandra, cassandra_session, new_table, tmp_path,
                                                                    semantic):
    table = new_table("id bigint PRIMARY KEY, split int")
    sink = CassandraSinkConnector(sink_options(cassandra, table, semantic=semantic,
                                               checkpointLocation=str(tmp_path / "ck")), SCHEMA)
    writer = sink.create_writer(WriterContext(partition_id=0, attempt_number=0, task_attempt_id=0, job_id="j",
                                              batch_id=0, query_id="q"))
    batch = pa.RecordBatch.from_pydict({"id": pa.array([1, None, 3], pa.int64()), "split": pa.array([0, 0, 0], pa.int32())})
    with pytest.raises(DataError, match=r"primary-key column 'id' of sparklink_tests\.\S+ is null in row 1"):
        writer.write_batch(batch)
    writer.abort()
    writer.close()
    assert list(cassandra_session.execute(f"SELECT id FROM {KEYSPACE}.{table}")) == []


def test_a_wrong_password_fails_at_start_in_one_line_without_the_password(cassandra, new_table):
    options = dict(sink_options(cassandra, new_table("id bigint PRIMARY KEY, split int")), password="not-the-Pa55word")
    with pytest.raises(CassandraError, match=r"^Cassandra \(cassandra@127\.0\.0\.1:\d+\): connecting failed: .*Bad credentials") \
            as caught:
        CassandraSinkConnector(options, SCHEMA)
    assert "not-the-Pa55word" not in str(caught.value) and "\n" not in str(caught.value)


def test_the_password_never_appears_in_reprs_or_errors():
    settings = ConnectionSettings(hosts=("127.0.0.1",), username="app", password="s3cr3t-Pa55")
    assert "s3cr3t" not in repr(settings)
    error = settings.error("connecting", RuntimeError("auth failed for app with s3cr3t-Pa55"))
    assert "s3cr3t" not in str(error) and "***" in str(error)


@pytest.mark.parametrize("semantic", ["upsert", "write-ahead"])
def test_df_write_with_cql_types_and_clustering_rows_batched_per_partition(spark, cassandra, cassandra_session,
                                                                           new_table, tmp_path, semantic):
    """Strings into uuid, a map, a list into a set, timestamps, dates, decimals, blobs; rows of
    one partition key (several clustering rows) go in unlogged batches; the last row of a key
    in a task wins."""
    table = new_table("tenant int, seq bigint, ref uuid, tags set<text>, attrs map<text, int>, at timestamp, "
                      "day date, amount decimal, payload blob, PRIMARY KEY ((tenant), seq)")
    refs = [str(uuid.UUID(int=i)) for i in range(60)]
    rows = [(i % 3, i % 20, refs[i], ["a", f"t{i}"], {"n": i}, datetime.datetime(2024, 1, 1, 0, 0, i % 60),
             datetime.date(2024, 1, 1 + i % 28), decimal.Decimal(f"{i}.25"), bytes([i % 256])) for i in range(60)]
    frame = spark.createDataFrame(rows, "tenant int, seq long, ref string, tags array<string>, attrs map<string,int>, "
                                        "at timestamp, day date, amount decimal(10,2), payload binary").coalesce(1)
    (frame.write.format("sparklink.cassandra").options(**sink_options(cassandra, table, semantic=semantic,
                                                                      checkpointLocation=str(tmp_path / "ck")))
     .mode("append").save())
    found = {(r.tenant, r.seq): r for r in cassandra_session.execute(f"SELECT * FROM {KEYSPACE}.{table}")}
    assert len(found) == 60  # (i % 3, i % 20) takes all 60 pairs
    for i in range(60):  # every (tenant, seq) pair occurs once among the 60 rows
        row = found[(i % 3, i % 20)]
        assert row.ref == uuid.UUID(int=i) and sorted(row.tags) == ["a", f"t{i}"] and dict(row.attrs) == {"n": i}
        assert str(row.amount) == f"{i}.25" and row.payload == bytes([i])
        assert row.day.date() == datetime.date(2024, 1, 1 + i % 28)


@pytest.mark.parametrize("semantic", ["upsert", "write-ahead"])
def test_txn_write_twice_is_applied_once(spark, cassandra, cassandra_session, new_table, tmp_path, semantic, caplog):
    """A non-deterministic column: the second write of the same (txnAppId, txnVersion) would
    change every row; it is skipped. upsert without a checkpoint records the pair in the
    commit table; write-ahead (with one) in its commit log."""
    table = new_table("id bigint PRIMARY KEY, nonce text")
    options = sink_options(cassandra, table, semantic=semantic, txnAppId="app", txnVersion="7")
    if semantic == "write-ahead":
        options["checkpointLocation"] = str(tmp_path / "ck")

    def write():
        (spark.range(0, 20, numPartitions=2).selectExpr("id", "uuid() AS nonce").write
         .format("sparklink.cassandra").options(**options).mode("append").save())
        return {r.id: r.nonce for r in cassandra_session.execute(f"SELECT id, nonce FROM {KEYSPACE}.{table}")}

    first = write()
    assert sorted(first) == list(range(20))
    assert write() == first


def test_tls_with_the_node_ca_writes_and_an_untrusted_node_is_refused_in_one_line(spark, cassandra, cassandra_session,
                                                                                  new_table):
    """The node serves TLS beside plain connections: with ``ssl`` and ``sslCaCertificate`` the
    rows go over TLS; trusting only the system's CAs, the start fails naming the cause."""
    table = new_table("id bigint PRIMARY KEY, split int")
    options = sink_options(cassandra, table, ssl="true", sslCaCertificate=str(cassandra.tls_ca))
    (spark.range(0, 10, numPartitions=1).selectExpr("id", "CAST(id AS INT) AS split").write
     .format("sparklink.cassandra").options(**options).mode("append").save())
    assert sorted(r.id for r in cassandra_session.execute(f"SELECT id FROM {KEYSPACE}.{table}")) == list(range(10))
    untrusted = sink_options(cassandra, table, ssl="true")
    with pytest.raises(CassandraError, match=r"\(TLS\)\): connecting failed: .*CERTIFICATE_VERIFY_FAILED") as caught:
        CassandraSinkConnector(untrusted, SCHEMA)
    assert "\n" not in str(caught.value)
