"""The Kafka source reader (Flink's KafkaSourceReader), run on executors.

A split is one topic-partition's offset range ``[from, until)``. The reader assigns that
partition to a consumer (no group membership, no offset commits), consumes up to
``maxRecordsPerBatch`` messages per client call and yields one Arrow record batch per call.
Under read_committed the broker skips control records and (on brokers that index them)
aborted records, so the reader stops when its position reaches ``until`` rather than when it
sees the record at ``until - 1``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, TopicPartition
from pyspark.sql.types import StructType

from sparklink.errors import DataError
from sparklink.kafka.config import EARLIEST_OFFSET, KafkaSourceConfig
from sparklink.kafka.metadata import REQUEST_TIMEOUT_SECONDS, KafkaError
from sparklink.kafka.records import to_record_batch
from sparklink.source import SourceReader, Split

POLL_TIMEOUT_SECONDS = 1.0
READER_GROUP = "sparklink-kafka-reader"  # librdkafka needs a group id; the reader never joins or commits


def split_for(topic: str, partition: int, start: int, until: int) -> Split:
    return Split(split_id=f"{topic}-{partition}", state={"topic": topic, "partition": partition,
                                                         "from": start, "until": until})


class KafkaSourceReader(SourceReader):
    """Reads one partition range per split (executor side, one reader per task)."""

    def __init__(self, config: KafkaSourceConfig, schema: StructType):
        self.config = config
        self.names = list(schema.names)
        self._consumer: Consumer | None = None

    def _open(self) -> Consumer:
        if self._consumer is None:
            settings = dict(self.config.client)
            settings.update({"group.id": settings.get("group.id", READER_GROUP), "enable.auto.commit": "false",
                             "enable.auto.offset.store": "false", "enable.partition.eof": "false"})
            self._consumer = Consumer(settings)
        return self._consumer

    def _first_offset(self, consumer: Consumer, topic: str, partition: int, start: int) -> int:
        """``start``, checked against what the partition still holds (``failOnDataLoss``)."""
        try:
            low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                        timeout=REQUEST_TIMEOUT_SECONDS)
        except KafkaException as exc:
            raise KafkaError(f"reading the offsets of {topic}-{partition}: {exc}") from None
        if start == EARLIEST_OFFSET:
            return low
        if start < low:
            if self.config.fail_on_data_loss:
                raise DataError(f"{topic}-{partition}: offsets {start} to {low - 1} were deleted before they were "
                                f"read (retention or topic recreated); set failOnDataLoss=false to skip them")
            return low
        return start

    def read(self, split: Split) -> Iterator[pa.RecordBatch]:
        state = split.state
        topic, partition, until = state["topic"], state["partition"], state["until"]
        consumer = self._open()
        start = self._first_offset(consumer, topic, partition, state["from"])
        if start >= until:
            return
        tp = TopicPartition(topic, partition, start)
        consumer.assign([tp])
        include_headers = self.config.include_headers
        idle_since = time.monotonic()
        try:
            while True:
                messages = consumer.consume(num_messages=self.config.max_records_per_batch,
                                            timeout=POLL_TIMEOUT_SECONDS)
                for message in messages:
                    if message.error() is not None:
                        raise KafkaError(f"reading {topic}-{partition}: {message.error()}")
                if messages and messages[-1].offset() >= until:
                    messages = [m for m in messages if m.offset() < until]
                if messages:
                    idle_since = time.monotonic()
                    yield to_record_batch(messages, topic, partition, include_headers=include_headers,
                                          names=self.names)
                    if messages[-1].offset() >= until - 1:
                        return
                position = consumer.position([TopicPartition(topic, partition)])[0].offset
                if position >= until:
                    return
                if time.monotonic() - idle_since > REQUEST_TIMEOUT_SECONDS:
                    raise KafkaError(f"{topic}-{partition}: no record arrived for {REQUEST_TIMEOUT_SECONDS:.0f}s at "
                                     f"position {position}, but the split ends at {until}")
        finally:
            consumer.unassign()

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
