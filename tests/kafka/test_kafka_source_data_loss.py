"""``failOnDataLoss`` on Apache Kafka's broker: offsets that disappear under a running query (a
topic deleted, a topic deleted and re-created with fewer records, the first records of a
partition deleted by DeleteRecords), driven on the enumerator and reader as Spark drives them
and, for the deleted records, through ``spark.read``. An open transaction that holds back the
last stable offset (Tansu: down to 0) is no loss.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from sparklink.errors import DataError
from sparklink.kafka.config import KafkaSourceConfig
from sparklink.kafka.enumerator import KafkaSplitEnumerator
from sparklink.kafka.reader import KafkaSourceReader, readable_range, split_for
from sparklink.kafka.records import source_schema
from sparklink.source import READ_ALL
from tests.kafka.topics import produce, recreate_topic


def _config(kafka, topic: str, fail_on_data_loss: bool, **options) -> KafkaSourceConfig:
    return KafkaSourceConfig.from_options(dict({"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topic,
                                                "failOnDataLoss": str(fail_on_data_loss).lower()}, **options))


def _micro_batch(kafka, topic: str, fail_on_data_loss: bool, start) -> tuple[dict, list[int]]:
    """One micro-batch as Spark drives it (driver: latest_offset, plan_splits; executor: read), on
    a new enumerator each time, as after a restart from the checkpointed offset ``start`` (``None``:
    the query's first batch). The batch's end offset and the ids it read."""
    config = _config(kafka, topic, fail_on_data_loss, startingOffsets="earliest")
    enumerator = KafkaSplitEnumerator(config, streaming=True)
    start = enumerator.initial_offset() if start is None else start
    end = enumerator.latest_offset(start, READ_ALL)
    reader = KafkaSourceReader(config, source_schema(False))
    try:
        batches = [batch for split in enumerator.plan_splits(start, end) for batch in reader.read(split)]
    finally:
        reader.close()
    column = source_schema(False).names.index("value")
    return end, sorted(int(value) for batch in batches for value in batch.column(column).to_pylist())


def test_recreated_topic_fails_the_query_or_is_read_again(kafka, new_topic):
    """Two queries read a topic; it is deleted and re-created with fewer records. On restart,
    failOnDataLoss=true fails naming the partition and both offsets; false reads the new records
    from the earliest offset and goes on from there. Driven on the enumerator and reader as Spark
    drives them, without a Spark query (six streaming runs cost ~50 s of suite time); the restart
    is a new enumerator given the offset the checkpoint would hold."""
    topic = new_topic(1)
    produce(kafka.bootstrap_servers, topic, range(10), partitions=1)
    failing, first = _micro_batch(kafka, topic, True, None)
    skipping, _ = _micro_batch(kafka, topic, False, None)
    assert first == list(range(10)) and failing == skipping == {topic: {"0": 10}}
    recreate_topic(kafka.bootstrap_servers, topic, 1)
    produce(kafka.bootstrap_servers, topic, range(100, 103), partitions=1)
    with pytest.raises(DataError, match=f"{topic}-0 went back from 10 to 3 .*failOnDataLoss=false"):
        _micro_batch(kafka, topic, True, failing)
    skipping, again = _micro_batch(kafka, topic, False, skipping)
    assert (skipping, again) == ({topic: {"0": 3}}, [100, 101, 102])
    produce(kafka.bootstrap_servers, topic, range(103, 105), partitions=1)
    assert _micro_batch(kafka, topic, False, skipping) == ({topic: {"0": 5}}, [103, 104])


def test_deleted_topic_fails_or_is_left_behind(kafka, new_topic):
    """Driven on the enumerator: a partition the query read is gone."""
    topic = new_topic(1)
    produce(kafka.bootstrap_servers, topic, range(2), partitions=1)
    enumerators = {fail: KafkaSplitEnumerator(_config(kafka, topic, fail), streaming=True) for fail in (True, False)}
    start = enumerators[True].latest_offset({}, READ_ALL)
    assert start == {topic: {"0": 2}}
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    for future in admin.delete_topics([topic]).values():
        future.result()
    with pytest.raises(DataError, match=f"partitions {topic}-0 \\(at offset 2\\) were deleted .*failOnDataLoss=false"):
        enumerators[True].latest_offset(start, READ_ALL)
    assert enumerators[False].latest_offset(start, READ_ALL) == start  # kept, so the offset never goes back


def test_open_transaction_is_not_data_loss_on_tansu(tansu, new_tansu_topic):
    """On Tansu, a second implementation: it answers the last stable offset of a partition with
    an open transaction as 0 (Apache Kafka: the transaction's first offset), below the query's
    position and below a planned split's end: the high watermark tells it apart from a
    re-created topic, on the enumerator and on the reader."""
    kafka, topic = tansu, new_tansu_topic(1)
    produce(kafka.bootstrap_servers, topic, range(3), partitions=1, one_per_batch=True)
    enumerator = KafkaSplitEnumerator(_config(kafka, topic, True), streaming=True)
    start = enumerator.latest_offset({}, READ_ALL)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": f"open-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"100", partition=0)
    producer.flush(30)
    assert enumerator.latest_offset(start, READ_ALL) == start == {topic: {"0": 3}}
    reader = KafkaSourceReader(_config(kafka, topic, True), source_schema(False))
    try:
        assert reader.readable(topic, 0, 0, 3) == (0, 3)  # a split planned before the transaction began
    finally:
        reader.close()
    producer.commit_transaction(30)
    assert enumerator.latest_offset(start, READ_ALL) == {topic: {"0": 5}}  # the record and the commit marker


def test_reader_checks_the_range_against_the_partition(kafka, new_topic):
    """A split planned before the topic was re-created (a replay after a restart, or a race with
    planning), read on a partition that now ends at 3."""
    topic = new_topic(1)
    produce(kafka.bootstrap_servers, topic, range(3), partitions=1)
    names = source_schema(False).names

    def read(fail_on_data_loss: bool, start: int, until: int) -> list[int]:
        reader = KafkaSourceReader(_config(kafka, topic, fail_on_data_loss), source_schema(False))
        try:
            batches = list(reader.read(split_for(topic, 0, start, until)))
        finally:
            reader.close()
        return [offset for batch in batches for offset in batch.column(names.index("offset")).to_pylist()]

    with pytest.raises(DataError, match=f"{topic}-0: offsets 5 to 9 were planned but the partition now ends at 3"):
        read(True, 5, 10)
    assert read(False, 5, 10) == []
    assert read(False, 1, 10) == [1, 2]
    assert read(True, 1, 3) == [1, 2]


def test_readable_range_for_records_deleted_before_they_were_read():
    """The reader's decision for offsets below the earliest (retention, DeleteRecords), on the
    watermarks [5, 20): both ends, and a start at the earliest."""
    with pytest.raises(DataError, match="t-0: offsets 2 to 4 were deleted before they were read .*failOnDataLoss"):
        readable_range("t-0", 2, 10, 5, 20, fail_on_data_loss=True)
    assert readable_range("t-0", 2, 10, 5, 20, fail_on_data_loss=False) == (5, 10)
    assert readable_range("t-0", -2, 10, 5, 20, fail_on_data_loss=True) == (5, 10)  # earliest
    assert readable_range("t-0", 6, 10, 5, 20, fail_on_data_loss=True) == (6, 10)
    assert readable_range("t-0", 2, 30, 5, 20, fail_on_data_loss=False) == (5, 20)  # both ends lost


def test_records_deleted_below_the_start_fail_the_read(spark, kafka, new_topic):
    """DeleteRecords: the first 5 records deleted, a read from offset 2."""
    from confluent_kafka import TopicPartition

    topic = new_topic(1)
    produce(kafka.bootstrap_servers, topic, range(10), partitions=1)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    for future in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
        future.result()
    frame = (spark.read.format("sparklink.kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
             .option("subscribe", topic).option("startingOffsets", f'{{"{topic}": {{"0": 2}}}}'))
    with pytest.raises(Exception, match=f"{topic}-0: offsets 2 to 4 were deleted before they were read"):
        frame.option("failOnDataLoss", "true").load().collect()
    assert [r.offset for r in frame.option("failOnDataLoss", "false").load().collect()] == [5, 6, 7, 8, 9]
