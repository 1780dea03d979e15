"""``writeMode=upsert`` on both Cassandra semantics against the real node, without Spark (the
writers and the SDK's commit driven as Spark's adapter drives them): deletes by key, the
sequenceColumn as the write timestamp, read back with the Python driver."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sparklink.cassandra.sink import CassandraSinkConnector
from sparklink.errors import ConfigError
from sparklink.sink import WriterContext
from sparklink.sink.protocol import commit_batch
from tests.cassandra.conftest import KEYSPACE, sink_options

SCHEMA = StructType([StructField("id", LongType()), StructField("op", StringType()), StructField("seq", LongType()),
                     StructField("v", StringType())])
COLUMNS = "id bigint PRIMARY KEY, seq bigint, v text"
SEED = [(1, "c", 10, "a"), (2, "c", 10, "b"), (3, "c", 10, "c"), (4, "c", 10, "d")]
CHANGES = [(1, "u", 12, "a3"), (1, "u", 11, "a2"), (2, "d", 11, None), (3, "u", 5, "old"), (4, "d", 9, None),
           (5, "c", 1, "e"), (6, "c", 3, "f"), (6, "d", 2, None)]
EXPECTED = {1: (12, "a3"), 3: (10, "c"), 4: (10, "d"), 5: (1, "e"), 6: (3, "f")}
# a later micro-batch brings an update older than key 2's delete (seq 11): the tombstone wins
LATE = [(2, "u", 10, "resurrected?")]


def changes_batch(rows: list[tuple]) -> pa.RecordBatch:
    ids, ops, seqs, values = zip(*rows, strict=True)
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "op": pa.array(ops, pa.string()),
                            "seq": pa.array(seqs, pa.int64()), "v": pa.array(values, pa.string())})


def write_job(options: dict, rows: list[tuple], job_id: str, partitions: int = 2) -> None:
    sink = CassandraSinkConnector(options, SCHEMA)
    committables = []
    for partition in range(partitions):
        writer = sink.create_writer(WriterContext(partition_id=partition, attempt_number=0,
                                                  task_attempt_id=partition, job_id=job_id, batch_id=None,
                                                  query_id=None))
        mine = [row for row in rows if row[0] % partitions == partition]
        if mine:
            writer.write_batch(changes_batch(mine))
        writer.flush()
        committables += writer.prepare_commit()
        writer.close()
    commit_batch(sink, None, job_id, committables)


@pytest.mark.parametrize("semantic", ["upsert", "write-ahead"])
def test_changes_are_applied_by_key_and_an_older_change_never_wins(cassandra, cassandra_session, new_table, tmp_path,
                                                                   semantic):
    table = new_table(COLUMNS, prefix="changelog")
    options = sink_options(cassandra, table, semantic=semantic, checkpointLocation=str(tmp_path / "ck"),
                           writeMode="upsert", keyColumns="id", opColumn="op", sequenceColumn="seq")
    for job, rows in (("seed", SEED), ("changes", CHANGES), ("replay", CHANGES), ("late", LATE)):
        write_job(options, rows, job)
    found = {r.id: (r.seq, r.v) for r in cassandra_session.execute(f"SELECT id, seq, v FROM {KEYSPACE}.{table}")}
    assert found == EXPECTED


def test_changelog_options_are_checked_against_the_table(cassandra, new_table):
    table = new_table("id bigint, part bigint, seq text, v text, PRIMARY KEY ((part), id)")
    schema = StructType([StructField("id", LongType()), StructField("part", LongType()),
                         StructField("seq", StringType()), StructField("v", StringType())])
    base = sink_options(cassandra, table, writeMode="upsert")
    with pytest.raises(ConfigError, match=r"keyColumns.*\['id'\] is not the primary key"):
        CassandraSinkConnector(dict(base, keyColumns="id"), schema)
    with pytest.raises(ConfigError, match=r"sequenceColumn.*'seq' is string.*write timestamp"):
        CassandraSinkConnector(dict(base, keyColumns="part,id", sequenceColumn="seq"), schema)
