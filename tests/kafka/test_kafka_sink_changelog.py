"""``writeMode=upsert`` into Kafka: the record key from ``keyColumns``, a delete as a tombstone,
the last change per key of a task by ``sequenceColumn``; read back by a plain read_committed
consumer (librdkafka, defaults), as a compacted topic's reader sees it. Without Spark: the
writers and the SDK's commit driven as Spark's adapter drives them."""

from __future__ import annotations

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sparklink.errors import ConfigError
from sparklink.kafka.records import encode_keys
from sparklink.kafka.sink import KafkaSink
from sparklink.sink import WriterContext
from sparklink.sink.protocol import commit_batch
from tests.kafka.readers import end_offsets

SCHEMA = StructType([StructField("id", LongType()), StructField("op", StringType()), StructField("seq", LongType()),
                     StructField("value", StringType())])
FIRST = [(1, "c", 10, "a"), (2, "c", 10, "b"), (3, "c", 10, "c")]
SECOND = [(1, "u", 12, "a3"), (1, "u", 11, "a2"), (2, "d", 11, None), (4, "c", 1, "e")]


def write_job(options: dict, rows: list[tuple], job_id: str, *more_batches: list[tuple]) -> None:
    """One task of a ``df.write`` handed ``rows`` (and then each of ``more_batches``) as Spark
    hands a task its Arrow batches."""
    sink = KafkaSink(options, SCHEMA)
    writer = sink.create_writer(WriterContext(partition_id=0, attempt_number=0, task_attempt_id=0, job_id=job_id,
                                              batch_id=None, query_id=None))
    for batch in (rows, *more_batches):
        ids, ops, seqs, values = zip(*batch, strict=True)
        writer.write_batch(pa.record_batch({"id": pa.array(ids, pa.int64()), "op": pa.array(ops, pa.string()),
                                            "seq": pa.array(seqs, pa.int64()),
                                            "value": pa.array(values, pa.string())}))
    committables = writer.prepare_commit()
    writer.close()
    commit_batch(sink, None, job_id, committables)


def read_keyed(bootstrap: str, topic: str) -> list[tuple[bytes, bytes | None]]:
    """Every (key, value) a plain read_committed consumer sees, in offset order (one partition)."""
    end = end_offsets(bootstrap, topic, committed=True)[0]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "sparklink-test-keyed",
                         "isolation.level": "read_committed", "enable.auto.commit": "false"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    records, idle = [], 0
    while consumer.position([TopicPartition(topic, 0)])[0].offset < end and idle < 20:
        messages = consumer.consume(1000, timeout=0.5)
        idle = 0 if messages else idle + 1
        for m in messages:
            assert m.error() is None, m.error()
            records.append((m.key(), m.value()))
    consumer.close()
    return records


@pytest.mark.parametrize("semantic", ["exactly-once", "at-least-once"])
def test_keys_from_key_columns_and_deletes_as_tombstones(kafka, new_topic, tmp_path, semantic):
    topic = new_topic(1)
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "topic": topic, "semantic": semantic,
               "checkpointLocation": str(tmp_path / "ck"), "writeMode": "upsert", "keyColumns": "id",
               "opColumn": "op", "sequenceColumn": "seq"}
    write_job(options, FIRST, "first")
    write_job(options, SECOND, "second")
    records = read_keyed(kafka.bootstrap_servers, topic)
    assert records == [(b"1", b"a"), (b"2", b"b"), (b"3", b"c"), (b"1", b"a3"), (b"2", None), (b"4", b"e")]
    compacted = {}
    for key, value in records:  # what log compaction keeps: the last record per key, a tombstone removes it
        compacted[key] = value
    assert {k: v for k, v in compacted.items() if v is not None} == {b"1": b"a3", b"3": b"c", b"4": b"e"}


@pytest.mark.parametrize("semantic", ["exactly-once", "at-least-once"])
def test_without_a_sequence_each_handed_batch_is_reduced_and_sent_in_order(kafka, new_topic, tmp_path, semantic):
    """Without ``sequenceColumn`` a task sends each batch it is handed, reduced to the batch's last
    change per key, as it comes (no task keeps its rows): a key changed in two batches gets two
    records in order, so the compacted view is the task's last change per key; with a
    ``sequenceColumn`` the whole task is reduced, the greatest value winning wherever it came."""
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "semantic": semantic,
               "checkpointLocation": str(tmp_path / "ck"), "writeMode": "upsert", "keyColumns": "id",
               "opColumn": "op"}
    first = [(1, "u", 2, "a1"), (1, "u", 1, "a2"), (2, "u", 1, "b1"), (3, "u", 1, "c1")]
    second = [(1, "u", 0, "a3"), (2, "d", 0, None)]
    topic = new_topic(1)
    write_job({**options, "topic": topic}, first, "plain", second)
    records = read_keyed(kafka.bootstrap_servers, topic)
    assert records == [(b"1", b"a2"), (b"2", b"b1"), (b"3", b"c1"), (b"1", b"a3"), (b"2", None)]
    compacted = dict(records)
    assert {k: v for k, v in compacted.items() if v is not None} == {b"1": b"a3", b"3": b"c1"}
    topic = new_topic(1)
    write_job({**options, "topic": topic, "sequenceColumn": "seq"}, first, "sequenced", second)
    assert read_keyed(kafka.bootstrap_servers, topic) == [(b"1", b"a1"), (b"2", b"b1"), (b"3", b"c1")]


def test_key_encoding_and_a_key_column_beside_key_columns_is_refused(kafka, new_topic):
    rows = pa.table({"tenant": ["a", "b"], "id": pa.array([1, 2], pa.int64()), "blob": [b"\x00k", b"\x01"]})
    assert encode_keys(rows, ["id"]).to_pylist() == [b"1", b"2"]
    assert encode_keys(rows, ["blob"]).to_pylist() == [b"\x00k", b"\x01"]
    assert encode_keys(rows, ["tenant", "id"]).to_pylist() == [b'{"tenant":"a","id":1}', b'{"tenant":"b","id":2}']
    schema = StructType([StructField("id", LongType()), StructField("key", StringType()),
                         StructField("value", StringType())])
    with pytest.raises(ConfigError, match="keyColumns.*also has a 'key' column"):
        KafkaSink({"kafka.bootstrap.servers": kafka.bootstrap_servers, "topic": new_topic(1), "writeMode": "upsert",
                   "keyColumns": "id"}, schema)
