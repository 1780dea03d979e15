"""How the Kafka tests write topics: records with known ids, a topic deleted and re-created.

Producers batch as librdkafka does by default (several records per record batch), so every
test that reads a partition up to its end checks that the reported ends are exact."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from sparklink.testing.kafka import create_topic


def produce(bootstrap: str, topic: str, ids, *, partitions: int, headers: bool = False,
            timestamps: dict[int, int] | None = None, one_per_batch: bool = False) -> None:
    """Records ``str(i)`` with key ``k<i>`` to partition ``i % partitions`` (``timestamps``: the
    create time of id i in ms, else the client's clock), acknowledged on return.
    ``one_per_batch``: one record per record batch, for Tansu, which reports a partition's end as
    the base offset of its last batch + 1."""
    batching = {"batch.num.messages": 1, "linger.ms": 0} if one_per_batch else {"linger.ms": 20}
    producer = Producer({"bootstrap.servers": bootstrap, **batching})
    for i in ids:
        producer.produce(topic, key=f"k{i}".encode(), value=str(i).encode(), partition=i % partitions,
                         headers=[("n", str(i).encode())] if headers and i % 2 else None,
                         timestamp=(timestamps or {}).get(i, 0))
    assert producer.flush(30) == 0


def recreate_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Delete ``topic`` and create it again, empty: its offsets start at 0 again."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result()
    for _attempt in range(50):  # the deletion may still be under way: retried on the broker's answer
        try:
            create_topic(bootstrap, topic, partitions)
            return
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    raise AssertionError(f"{topic} still exists after being deleted (50 create attempts)")
