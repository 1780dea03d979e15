"""The Kafka source on Apache Kafka's broker: columns, positions, admission control, partition
discovery while a query runs, read_committed (open and aborted transactions), the
consumer-group mirror, exact AvailableNow ends, start by timestamp, option errors.

Records are produced in multi-record batches (tests/kafka/topics.py).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from confluent_kafka import (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE, Consumer,
                             Message, Producer, TopicPartition)

from sparklink.errors import ConfigError
from sparklink.kafka.config import KafkaSourceConfig
from sparklink.kafka.enumerator import KafkaSplitEnumerator, offsets_for_timestamp, share_out
from sparklink.kafka.metadata import KafkaMetadata
from sparklink.kafka.reader import consumer_settings
from sparklink.kafka.records import source_schema, to_record_batch
from sparklink.source import ReadLimit
from sparklink.testing.kafka import create_topic
from tests.kafka.topics import produce


def reader(spark, kafka, **options):
    frame = spark.read.format("sparklink.kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
    for key, value in options.items():
        frame = frame.option(key, value)
    return frame.load()


def test_batch_read_columns_positions_and_headers(spark, kafka, new_topic):
    topic = new_topic(3)
    produce(kafka.bootstrap_servers, topic, range(30), partitions=3, headers=True)
    frame = reader(spark, kafka, subscribe=topic, includeHeaders="true")
    assert frame.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    rows = frame.collect()
    assert sorted(int(r.value) for r in rows) == list(range(30))
    for row in rows:
        i = int(row.value)
        assert (row.key, row.topic, row.partition, row.offset) == (f"k{i}".encode(), topic, i % 3, i // 3)
        assert row.timestampType == 0 and row.timestamp is not None
        assert row.headers == ([("n", str(i).encode())] if i % 2 else [])
    sliced = reader(spark, kafka, assign=f'{{"{topic}": [0]}}', startingOffsets=f'{{"{topic}": {{"0": 2}}}}',
                    endingOffsets=f'{{"{topic}": {{"0": 5}}}}').select("offset").collect()
    assert sorted(r.offset for r in sliced) == [2, 3, 4]


def test_read_committed_hides_open_and_aborted_transactions(spark, kafka, new_topic):
    topic = new_topic(1)
    produce(kafka.bootstrap_servers, topic, range(3), partitions=1)
    aborted = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": f"aborted-{topic}"})
    aborted.init_transactions(30)
    aborted.begin_transaction()
    aborted.produce(topic, value=b"200", partition=0)
    aborted.flush(30)  # in the log before the abort (librdkafka drops what it has not sent)
    aborted.abort_transaction(30)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": f"open-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"100", partition=0)
    producer.flush(30)
    # the open transaction holds the last stable offset at its first offset; the aborted record is skipped
    assert sorted(int(r.value) for r in reader(spark, kafka, subscribe=topic).collect()) == [0, 1, 2]
    uncommitted = reader(spark, kafka, subscribe=topic, **{"kafka.isolation.level": "read_uncommitted"})
    assert sorted(int(r.value) for r in uncommitted.collect()) == [0, 1, 2, 100, 200]
    producer.commit_transaction(30)
    producer.poll(0)
    assert sorted(int(r.value) for r in reader(spark, kafka, subscribe=topic).collect()) == [0, 1, 2, 100]


def test_stream_admission_control_discovery_and_group_offsets(spark, kafka, tmp_path):
    """maxOffsetsPerTrigger caps every micro-batch; a topic created while the query runs is
    found; the consumer group mirrors the checkpoint's offsets, and 'committed' starts there."""
    bootstrap = kafka.bootstrap_servers
    prefix = f"disc{tmp_path.name[-12:].replace('_', '')}"
    first, second = f"{prefix}-a", f"{prefix}-b"
    create_topic(bootstrap, first, 2)
    produce(bootstrap, first, range(100), partitions=2)
    group = f"{prefix}-group"
    query = (spark.readStream.format("sparklink.kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribePattern", f"{prefix}-.*").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", 30).option("kafka.group.id", group).load()
             .selectExpr("topic", "cast(cast(value as string) as int) as id")
             .writeStream.format("memory").queryName(f"q_{prefix}").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        query.processAllAvailable()
        create_topic(bootstrap, second, 1)
        produce(bootstrap, second, range(1000, 1010), partitions=1)
        produce(bootstrap, first, range(100, 120), partitions=2)
        query.processAllAvailable()
        # Spark commits a batch's end on the source when it plans the next batch: one more
        # record makes one more batch, so every earlier batch is mirrored to the group
        produce(bootstrap, first, [120], partitions=1)
        query.processAllAvailable()
        sizes = [p["numInputRows"] for p in query.recentProgress]
    finally:
        query.stop()
    rows = spark.sql(f"select topic, id from q_{prefix}").collect()
    assert sorted(r.id for r in rows) == list(range(121)) + list(range(1000, 1010))
    assert max(sizes) <= 30
    # the mirror follows Spark's source commits, which may trail the last batch by one
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    mirrored = consumer.committed([TopicPartition(first, 0), TopicPartition(first, 1), TopicPartition(second, 0)])
    consumer.close()
    positions = {(tp.topic, tp.partition): tp.offset for tp in mirrored}
    assert 0 < positions[(first, 0)] <= 60 and 0 < positions[(first, 1)] <= 60 and positions[(second, 0)] == 10
    produce(bootstrap, second, range(2000, 2003), partitions=1)
    everything = reader(spark, kafka, subscribePattern=f"{prefix}-.*").collect()
    expected = sorted(int(r.value) for r in everything if r.offset >= positions[(r.topic, r.partition)])
    resumed = reader(spark, kafka, subscribePattern=f"{prefix}-.*", startingOffsets="committed",
                     **{"kafka.group.id": group})
    assert sorted(int(r.value) for r in resumed.collect()) == expected
    assert expected[-3:] == [2000, 2001, 2002]


def test_available_now_reads_what_was_there_at_start(kafka, new_topic):
    """Driven on the enumerator: the AvailableNow target is fixed at the partitions' exact ends
    (records produced in multi-record batches), later records wait."""
    topic = new_topic(2)
    produce(kafka.bootstrap_servers, topic, range(10), partitions=2)
    config = KafkaSourceConfig.from_options({"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topic,
                                             "startingOffsets": "earliest"})
    enumerator = KafkaSplitEnumerator(config, streaming=True)
    start = enumerator.initial_offset()
    target = enumerator.available_now_offset(start)
    produce(kafka.bootstrap_servers, topic, range(10, 20), partitions=2)
    end = enumerator.latest_offset(start, ReadLimit(max_rows=4, until=target))
    assert end == {topic: {"0": 2, "1": 2}}
    assert enumerator.latest_offset(end, ReadLimit(until=target)) == target == {topic: {"0": 5, "1": 5}}
    splits = enumerator.plan_splits(start, end)
    assert [s.state for s in splits] == [{"topic": topic, "partition": p, "from": 0, "until": 2} for p in (0, 1)]


class _RecordingMetadata(KafkaMetadata):
    """The real broker's metadata, keeping the timestamps the enumerator asks for."""

    def __init__(self, client):
        super().__init__(client)
        self.asked: list[tuple[list, int]] = []

    def for_timestamp(self, partitions, timestamp_ms):
        partitions = list(partitions)
        self.asked.append((partitions, timestamp_ms))
        return super().for_timestamp(partitions, timestamp_ms)


def test_starting_timestamp_starts_at_the_first_record_at_or_after_it(kafka, new_topic):
    """The enumerator asks ListOffsets for the timestamp on every partition and starts where the
    broker answers: the first record at or after it, or the partition's end where none is that
    late (the broker answers -1)."""
    topic = new_topic(2)
    base = 1_700_000_000_000
    # partition 0: ids 0, 2, 4 at base + 0, 2, 4 s; partition 1: ids 1, 3, 5 at base + 1, 3, 5 s
    produce(kafka.bootstrap_servers, topic, range(6), partitions=2, timestamps={i: base + 1000 * i for i in range(6)})

    def start_at(timestamp: int):
        config = KafkaSourceConfig.from_options({"kafka.bootstrap.servers": kafka.bootstrap_servers,
                                                 "subscribe": topic, "startingTimestamp": str(timestamp)})
        enumerator = KafkaSplitEnumerator(config, streaming=True)
        enumerator.metadata = _RecordingMetadata(config.client)
        return enumerator.initial_offset(), enumerator

    start, enumerator = start_at(base + 2500)
    assert enumerator.metadata.asked == [([(topic, 0), (topic, 1)], base + 2500)]
    assert start == {topic: {"0": 2, "1": 1}}  # ids 4 and 3, the first records at or after base + 2.5 s
    assert enumerator.latest_offset(start, ReadLimit()) == {topic: {"0": 3, "1": 3}}
    assert start_at(base + 9000)[0] == {topic: {"0": 3, "1": 3}}  # later than every record: the ends
    assert start_at(base)[0] == {topic: {"0": 0, "1": 0}}


def test_offsets_for_timestamp_start_at_the_end_where_no_record_is_that_late():
    found = {("t", 0): 7, ("t", 1): -1, ("t", 2): 0}
    ends = {("t", 0): 9, ("t", 1): 4, ("t", 2): 5}
    assert offsets_for_timestamp(found, ends) == {("t", 0): 7, ("t", 1): 4, ("t", 2): 0}


def test_share_out_is_proportional_and_always_progresses():
    assert share_out({("t", 0): 90, ("t", 1): 10}, 10) == {("t", 0): 9, ("t", 1): 1}
    assert share_out({("t", 0): 5, ("t", 1): 5}, 100) == {("t", 0): 5, ("t", 1): 5}
    assert share_out({("t", 0): 1, ("t", 1): 1, ("t", 2): 1}, 1) == {("t", 0): 1, ("t", 1): 0, ("t", 2): 0}


@pytest.mark.parametrize(("options", "match"), [
    ({"subscribe": "t"}, "'kafka.bootstrap.servers': is required"),
    ({"kafka.bootstrap.servers": "h:1"}, "exactly one must be given"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "assign": '{"t": [0]}'}, "exactly one must be given"),
    ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "("}, "is not a regular expression"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingOffsets": "{nope"}, "is not valid JSON"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingOffsets": "newest"}, "unknown value 'newest'"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingOffsets": "committed"}, "set kafka.group.id"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.auto.offset.reset": "earliest"},
     "is set by sparklink"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "maxOffsetsPerTrigger": "0"}, "must be at least 1"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.isolation.level": "dirty"}, "unknown value 'dirty'"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingTimestamp": "5", "startingOffsets": "earliest"},
     "not both"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingTimestamp": "-5"}, "must be at least 0"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingTimestamp": "yesterday"}, "'yesterday' is not an"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": "maybe"}, "'failOnDataLoss'"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "maxFilesPerTrigger": "3"}, "unknown option"),
], ids=["no-bootstrap", "no-subscription", "two-subscriptions", "bad-pattern", "bad-json", "bad-name",
        "committed-without-group", "managed-property", "zero-limit", "bad-isolation", "timestamp-and-offsets",
        "negative-timestamp", "timestamp-not-a-number", "bad-fail-on-data-loss", "unknown-option"])
def test_bad_options_are_refused(options, match):
    with pytest.raises(ConfigError, match=match):
        KafkaSourceConfig.from_options(options)


def test_ending_offsets_are_refused_for_streams_and_latest_start_for_batch_reads():
    config = KafkaSourceConfig.from_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
                                             "endingOffsets": "latest"})
    with pytest.raises(ConfigError, match="'endingOffsets': is for spark.read only"):
        KafkaSplitEnumerator(config, streaming=True)
    config = KafkaSourceConfig.from_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
                                             "startingOffsets": "latest"})
    with pytest.raises(ConfigError, match="'latest' is not allowed for spark.read"):
        KafkaSplitEnumerator(config, streaming=False)


def test_record_batches_are_built_column_wise():
    """Messages as the client returns them (constructed here): gaps in offsets, a record without
    timestamp, log-append time, headers; and an empty batch."""
    names = source_schema(True).names
    empty = to_record_batch([], "t", 0, include_headers=True, names=names)
    assert isinstance(empty, pa.RecordBatch) and empty.num_rows == 0
    assert empty.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    messages = [Message(topic="t", partition=3, offset=7, key=b"k", value=b"a", timestamp=(TIMESTAMP_CREATE_TIME, 5)),
                Message(topic="t", partition=3, offset=9, value=b"b", timestamp=(TIMESTAMP_NOT_AVAILABLE, -1),
                        headers=[("h", b"x"), ("h", None)]),
                Message(topic="t", partition=3, offset=10, value=None, timestamp=(TIMESTAMP_LOG_APPEND_TIME, 6))]
    batch = to_record_batch(messages, "t", 3, include_headers=True, names=names)
    assert batch.schema == empty.schema
    assert batch.to_pydict() | {"timestamp": batch.column(5).cast(pa.int64()).to_pylist()} == {
        "key": [b"k", None, None], "value": [b"a", b"b", None], "topic": ["t"] * 3, "partition": [3] * 3,
        "offset": [7, 9, 10], "timestamp": [5000, None, 6000], "timestampType": [0, None, 1],
        "headers": [[], [{"key": "h", "value": b"x"}, {"key": "h", "value": None}], []]}
    same_kind = to_record_batch(messages[:1], "t", 3, include_headers=False, names=["offset", "timestampType"])
    assert same_kind.to_pydict() == {"offset": [7], "timestampType": [0]}
    with pytest.raises(ValueError, match="no column"):
        to_record_batch(messages, "t", 3, include_headers=False, names=["value", "headers"])


def test_reader_settings_keep_the_protocol_and_default_a_short_fetch_pause():
    """librdkafka pauses 1 s before fetching again for a partition whose queue filled; the reader
    sets 10 ms unless the user gave kafka.fetch.queue.backoff.ms, and its own protocol settings win."""
    settings = consumer_settings({"bootstrap.servers": "127.0.0.1:1", "enable.auto.commit": "true"})
    assert settings["fetch.queue.backoff.ms"] == "10"
    assert settings["enable.auto.commit"] == "false" and settings["auto.offset.reset"] == "error"
    assert consumer_settings({"fetch.queue.backoff.ms": "500"})["fetch.queue.backoff.ms"] == "500"
