"""The Kafka source reader (Flink's KafkaSourceReader), run on executors.

A split is one topic-partition's offset range ``[from, until)``. The reader assigns that
partition to a consumer (no group membership, no offset commits) and yields one Arrow record
batch per ``consume`` call. Each call asks for as many messages as make an Arrow batch of about
``BATCH_BYTES`` (from the record sizes seen so far), at most ``maxRecordsPerBatch`` and at most
what is left of the range: librdkafka's ``consume`` waits for its whole timeout when it gets fewer
messages than it asked for, so asking for exactly the rest returns as soon as the range's last
record arrives. Under read_committed the broker skips control records and (on brokers that
index them) aborted records, which are offsets that never arrive as messages: the reader stops
when its position reaches ``until`` rather than when it sees the record at ``until - 1``.

``failOnDataLoss``: before reading, the range is checked against what the partition still
holds (its low and high watermarks); offsets deleted before they were read (retention,
DeleteRecords) or beyond the partition's end (the topic was deleted and re-created) fail the
task with a message naming them, or are skipped with ``failOnDataLoss=false``. A fetch the
broker answers "offset out of range" while reading is the same case.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka import KafkaError as ClientError
from pyspark.sql.types import StructType

from sparklink.errors import DataError
from sparklink.kafka.config import EARLIEST_OFFSET, KafkaSourceConfig
from sparklink.kafka.metadata import REQUEST_TIMEOUT_SECONDS, KafkaError, KafkaMetadata
from sparklink.kafka.records import first_error, record_offset, to_record_batch
from sparklink.source import SourceReader, Split

LOG = logging.getLogger(__name__)
# How long one consume call waits when fewer records than asked for are there (offsets of
# control or aborted records, which never arrive) before the reader looks at its position.
# Every split of a transactional topic ends on a commit marker, so each split pays this once:
# 0.2 s made a 10,000-record read of 4 partitions take 0.8 s against 0.5 s at 20 ms. A call
# that returns early hands over what is queued (a smaller record batch), nothing else changes.
POLL_TIMEOUT_SECONDS = 0.02
# The size one Arrow record batch aims at: the messages asked for per consume call follow from
# the size of the records read so far (many small records per call, few large ones), capped by
# maxRecordsPerBatch. The first call of a split asks for at most FIRST_CALL_RECORDS.
BATCH_BYTES = 8 << 20
FIRST_CALL_RECORDS = 1_000
READER_GROUP = "sparklink-kafka-reader"  # librdkafka needs a group id; the reader never joins or commits
# librdkafka stops fetching a partition whose local queue holds queued.min.messages (100,000) and
# then waits fetch.queue.backoff.ms (1,000 ms by default) before it fetches again, even when the
# reader has emptied the queue long before: a split of 500,000 records waited about 4 s in those
# pauses (116k records/s read outside Spark against 730k/s at 10 ms). The queue's size limits
# (queued.min.messages, queued.max.messages.kbytes) stay at their defaults; a kafka.* option
# given by the user wins.
FETCH_QUEUE_BACKOFF_MS = "10"
_OUT_OF_RANGE = (ClientError._AUTO_OFFSET_RESET, ClientError.OFFSET_OUT_OF_RANGE)


def records_per_call(batch: pa.RecordBatch, most: int) -> int:
    """How many messages the next consume call asks for, from the bytes per row of ``batch``."""
    return max(1, min(most, BATCH_BYTES * batch.num_rows // max(1, batch.nbytes)))


def split_for(topic: str, partition: int, start: int, until: int) -> Split:
    return Split(split_id=f"{topic}-{partition}", state={"topic": topic, "partition": partition,
                                                         "from": start, "until": until})


def readable_range(name: str, start: int, until: int, low: int, high: int, *,
                   fail_on_data_loss: bool) -> tuple[int, int]:
    """The part of the split ``[start, until)`` of partition ``name`` that the partition, holding
    ``[low, high)`` now, can still serve. Offsets below ``low`` were deleted before they were read;
    offsets at or beyond ``high`` that the split was planned with mean the partition's offsets
    went back (the topic was deleted and re-created). Either is data loss: an error naming the
    offsets, or (``fail_on_data_loss`` false) skipped with a warning."""
    if start == EARLIEST_OFFSET:
        start = low
    lost = []
    if start < low:
        lost.append(f"offsets {start} to {low - 1} were deleted before they were read (retention, DeleteRecords)")
    if until > high:
        lost.append(f"offsets {max(start, high)} to {until - 1} were planned but the partition now ends at {high} "
                    "(the topic was deleted and re-created)")
    if lost:
        message = f"{name}: {'; '.join(lost)}"
        if fail_on_data_loss:
            raise DataError(f"{message}; set failOnDataLoss=false to skip them")
        LOG.warning("%s; skipped (failOnDataLoss=false)", message)
    return max(start, low), min(until, high)


def consumer_settings(client: Mapping[str, str]) -> dict[str, str]:
    """The reader's librdkafka settings: the user's ``kafka.*`` options, the reader's fetch pause
    where the user set none, and what the reader's protocol needs whatever the user set (no
    offset commits, no end-of-partition events, an out-of-range fetch reported rather than
    silently moved to the end: ``auto.offset.reset=error``)."""
    settings = dict(client)
    settings.setdefault("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)
    settings.update({"group.id": settings.get("group.id", READER_GROUP), "enable.auto.commit": "false",
                     "enable.auto.offset.store": "false", "enable.partition.eof": "false",
                     "auto.offset.reset": "error"})
    return settings


class KafkaSourceReader(SourceReader):
    """Reads one partition range per split (executor side, one reader per task)."""

    def __init__(self, config: KafkaSourceConfig, schema: StructType):
        self.config = config
        self.names = list(schema.names)
        self._consumer: Consumer | None = None

    def _open(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(consumer_settings(self.config.client))
        return self._consumer

    def readable(self, topic: str, partition: int, start: int, until: int) -> tuple[int, int]:
        """The part of ``[start, until)`` the partition still holds (:func:`readable_range`),
        asked of the broker. The consumer's watermarks are the low watermark and, under
        read_committed, the last stable offset, which an open transaction holds back (on Tansu
        down to 0): a range beyond it is checked again on the high watermark before it counts
        as lost."""
        consumer = self._open()
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=REQUEST_TIMEOUT_SECONDS, cached=False)
        except KafkaException as exc:
            raise KafkaError(f"reading the offsets of {topic}-{partition}: {exc}") from None
        if until > high and self.config.client.get("isolation.level") == "read_committed":
            high = KafkaMetadata(self.config.client).high_watermarks([(topic, partition)])[(topic, partition)]
        return readable_range(f"{topic}-{partition}", start, until, low, high,
                              fail_on_data_loss=self.config.fail_on_data_loss)

    def read(self, split: Split) -> Iterator[pa.RecordBatch]:
        state = split.state
        topic, partition = state["topic"], state["partition"]
        consumer = self._open()
        position, until = self.readable(topic, partition, state["from"], state["until"])
        if position >= until:
            return
        consumer.assign([TopicPartition(topic, partition, position)])
        most, include_headers = self.config.max_records_per_batch, self.config.include_headers
        batch_size = min(most, FIRST_CALL_RECORDS)
        idle_since = time.monotonic()
        try:
            while position < until:
                messages = consumer.consume(num_messages=min(batch_size, until - position),
                                            timeout=POLL_TIMEOUT_SECONDS)
                error = first_error(messages)
                if error is not None:
                    if error.code() not in _OUT_OF_RANGE:
                        raise KafkaError(f"reading {topic}-{partition}: {error}")
                    # records deleted while the task read: the same check as at the start
                    resumed, until = self.readable(topic, partition, position, until)
                    if resumed == position and resumed < until:
                        raise KafkaError(f"reading {topic}-{partition} at offset {position}: {error}")
                    position = resumed
                    consumer.assign([TopicPartition(topic, partition, position)])
                    continue
                if messages and record_offset(messages[-1]) >= until:  # past offsets that never arrived
                    messages = [m for m in messages if record_offset(m) < until]
                    if not messages:
                        return
                if messages:
                    idle_since = time.monotonic()
                    batch = to_record_batch(messages, topic, partition, include_headers=include_headers,
                                            names=self.names)
                    batch_size = records_per_call(batch, most)
                    yield batch
                    position = record_offset(messages[-1]) + 1
                    if position >= until:
                        return
                # offsets that never arrive (control or aborted records) still move the position
                position = max(position, consumer.position([TopicPartition(topic, partition)])[0].offset)
                if time.monotonic() - idle_since > REQUEST_TIMEOUT_SECONDS:
                    raise KafkaError(f"{topic}-{partition}: no record arrived for {REQUEST_TIMEOUT_SECONDS:.0f}s at "
                                     f"position {position}, but the split ends at {until}")
        finally:
            consumer.unassign()

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
