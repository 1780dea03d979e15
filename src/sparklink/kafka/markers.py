"""Per-(query, partition) batch markers and the writer registry, kept as consumer-group offsets.

*Batch marker*: each exactly-once writer adds, inside its transaction, the offset
``batchId + 1`` of the consumer group ``<prefix>-<query>-<partition>-marker`` (on partition 0
of the first topic it wrote) with ``send_offsets_to_transaction``. Group offsets sent in a
transaction become visible when it commits and are dropped when it aborts (checked on Apache
Kafka and on Tansu), so "the marker is at batch + 1 or later" is a durable "this partition's
transaction of that batch committed", one offset fetch away and never scanned. While a
transaction that carries a marker of the group is open, Apache Kafka holds the group's offset
back as unstable (the fetch waits for it to end, KIP-447), so a marker is never read half-way.

*Writer registry*: before a writer first uses its transactional id it commits an offset (not
in a transaction) to ``<prefix>-<query>-<partition>-writer``. The driver lists these groups to
find ids a crashed run used with more partitions than the current one, and fences them.
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka import KafkaError as ClientError
from confluent_kafka.admin import AdminClient

from sparklink.kafka.metadata import REQUEST_TIMEOUT_SECONDS, KafkaError, admin_config

_registered: set[str] = set()  # registry groups this Python worker already wrote (executor side)


def _consumer(client: dict[str, str], group: str) -> Consumer:
    settings = {k: v for k, v in client.items() if k not in ("isolation.level",)}
    settings.update({"group.id": group, "enable.auto.commit": "false"})
    return Consumer(settings)


def group_metadata(client: dict[str, str], group: str):
    """What ``send_offsets_to_transaction`` needs for ``group`` (executor side)."""
    consumer = _consumer(client, group)
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


def marker_offset(client: dict[str, str], group: str, topic: str) -> int:
    """The marker group's committed offset (-1 when none)."""
    consumer = _consumer(client, group)
    try:
        found = consumer.committed([TopicPartition(topic, 0)], timeout=REQUEST_TIMEOUT_SECONDS)
    except KafkaException as exc:
        hint = ""
        if exc.args and isinstance(exc.args[0], ClientError) and exc.args[0].code() == ClientError._TIMED_OUT:
            hint = (f" (no answer within {REQUEST_TIMEOUT_SECONDS:g}s: the brokers are unreachable, or a transaction "
                    "of the same transactional id is still open and holds the marker pending until it ends)")
        raise KafkaError(f"reading the batch marker of group '{group}': {exc}{hint}") from None
    finally:
        consumer.close()
    return max(found[0].offset, -1)


def register_writer(client: dict[str, str], group: str, topic: str) -> None:
    """Record that a transactional id is in use (executor side, once per worker process and id)."""
    if group in _registered:
        return
    consumer = _consumer(client, group)
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    except KafkaException as exc:
        raise KafkaError(f"registering writer group '{group}': {exc}") from None
    finally:
        consumer.close()
    _registered.add(group)


def registered_groups(client: dict[str, str], prefix: str) -> list[str]:
    """Every consumer group whose name starts with ``prefix`` (driver side)."""
    admin = AdminClient(admin_config(client))
    try:
        listing = admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_SECONDS).result()
    except KafkaException as exc:
        raise KafkaError(f"listing consumer groups: {exc}") from None
    return sorted(g.group_id for g in listing.valid if g.group_id.startswith(prefix))
