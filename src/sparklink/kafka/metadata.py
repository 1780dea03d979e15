"""What the driver asks the brokers: partitions of the subscription and offsets (driver side).

One :class:`KafkaMetadata` is opened per enumerator (once per query run, or per ``spark.read``)
and asked once per micro-batch; it never reads records.
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from sparklink.errors import SparklinkError
from sparklink.kafka.config import Subscription, TopicPartitionKey

REQUEST_TIMEOUT_SECONDS = 30.0


class KafkaError(SparklinkError):
    """The brokers refused or failed a request; the message names the request and the client's error."""


def admin_config(client: dict[str, str]) -> dict[str, str | int | float | bool]:
    """The client properties an AdminClient accepts (consumer-only ones dropped)."""
    consumer_only = {"isolation.level", "group.id", "auto.offset.reset", "enable.partition.eof", "fetch.min.bytes",
                     "fetch.max.bytes", "max.partition.fetch.bytes", "fetch.wait.max.ms", "queued.max.messages.kbytes",
                     "enable.auto.commit", "session.timeout.ms", "max.poll.interval.ms", "group.instance.id",
                     "partition.assignment.strategy", "check.crcs", "queued.min.messages", "fetch.message.max.bytes"}
    return {k: v for k, v in client.items() if k not in consumer_only}


class KafkaMetadata:
    """Partitions and offsets of a cluster, as the enumerator needs them (driver side)."""

    def __init__(self, client: dict[str, str]):
        self.client = client
        self.admin = AdminClient(admin_config(client))
        committed = client.get("isolation.level", "read_committed") == "read_committed"
        self.isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED

    def partitions(self, subscription: Subscription) -> list[TopicPartitionKey]:
        """The partitions the subscription covers now, sorted. ``assign`` lists exactly its own."""
        try:
            topics = self.admin.list_topics(timeout=REQUEST_TIMEOUT_SECONDS).topics
        except KafkaException as exc:
            raise KafkaError(f"listing topics at {self.client.get('bootstrap.servers')}: {exc}") from None
        if subscription.assignment:
            return [tp for tp in subscription.assignment if tp[0] in topics and tp[1] in topics[tp[0]].partitions]
        found: list[TopicPartitionKey] = []
        for name, meta in topics.items():
            if not name.startswith("__") and subscription.matches(name) and meta.error is None:
                found.extend((name, partition) for partition in meta.partitions)
        return sorted(found)

    def _list_offsets(self, partitions: Iterable[TopicPartitionKey], spec_for,
                      isolation: IsolationLevel | None = None) -> dict[TopicPartitionKey, int]:
        wanted = {TopicPartition(topic, partition): spec_for(topic, partition) for topic, partition in partitions}
        if not wanted:
            return {}
        futures = self.admin.list_offsets(wanted, isolation_level=isolation or self.isolation,
                                          request_timeout=REQUEST_TIMEOUT_SECONDS)
        result = {}
        for tp, future in futures.items():
            try:
                result[(tp.topic, tp.partition)] = future.result().offset
            except KafkaException as exc:
                raise KafkaError(f"listing offsets of {tp.topic}-{tp.partition}: {exc}") from None
        return result

    def earliest(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        return self._list_offsets(partitions, lambda *_: OffsetSpec.earliest())

    def latest(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """The end of each partition a reader may read up to: the last stable offset under
        read_committed (nothing of an open transaction), the high watermark otherwise."""
        return self._list_offsets(partitions, lambda *_: OffsetSpec.latest())

    def high_watermarks(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """The end of each partition including records of open transactions (the high watermark)."""
        return self._list_offsets(partitions, lambda *_: OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED)

    def for_timestamp(self, partitions: Iterable[TopicPartitionKey], timestamp_ms: int) -> dict[TopicPartitionKey, int]:
        """The broker's answer per partition: the first offset with a timestamp at or after
        ``timestamp_ms``, or -1 when no record is that late."""
        return self._list_offsets(partitions, lambda *_: OffsetSpec.for_timestamp(timestamp_ms))

    def committed(self, group_id: str, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """The group's committed offsets; partitions without one are absent."""
        consumer = Consumer(dict(self.client, **{"group.id": group_id, "enable.auto.commit": "false"}))
        try:
            found = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=REQUEST_TIMEOUT_SECONDS)
        except KafkaException as exc:
            raise KafkaError(f"reading offsets of consumer group '{group_id}': {exc}") from None
        finally:
            consumer.close()
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}

    def mirror_to_group(self, group_id: str, offsets: dict[TopicPartitionKey, int]) -> None:
        """Commit ``offsets`` to ``group_id`` so that lag monitors see the query's progress.
        Only a mirror: the query's position is the offset in Spark's checkpoint."""
        if not offsets:
            return
        consumer = Consumer(dict(self.client, **{"group.id": group_id, "enable.auto.commit": "false"}))
        try:
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
        except KafkaException as exc:
            raise KafkaError(f"committing offsets to consumer group '{group_id}': {exc}") from None
        finally:
            consumer.close()
