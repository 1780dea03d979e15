"""The committer's connections (:mod:`sparklink.kafka.transaction_coordinator`) on Apache Kafka's
broker, without Spark: ``end_transaction`` keeps one connection per client config between calls
and remembers each transactional id's coordinator; a kept connection that broke is replaced
and the call still ends the transaction; a fenced session is still refused. Each transaction
is read back by a read_committed consumer."""

from __future__ import annotations

from pyspark.sql.types import StringType, StructField, StructType

from sparklink.kafka import transaction_coordinator as coordinators
from sparklink.kafka.producer import RecordProducer
from sparklink.kafka.sink_config import KafkaSinkConfig
from sparklink.kafka.transaction_coordinator import end_transaction
from tests.kafka.readers import read_ids


def _prepare(kafka, topic: str, transactional_id: str, value: int) -> tuple[int, int]:
    """A transaction of one record left open (prepared) by the sink's producer; its session."""
    config = KafkaSinkConfig.from_options({**kafka.options, "topic": topic},
                                          StructType([StructField("value", StringType())]))
    producer = RecordProducer(config, transactional_id)
    session = producer.init_transactions()
    producer.begin()
    producer.producer.produce(topic, str(value).encode())
    producer.flush()
    return session


def test_kept_connection_ends_transactions_and_a_broken_one_is_replaced(kafka, new_topic):
    topic = new_topic(1)
    coordinators.close_kept_connections()
    key = (tuple(sorted(kafka.client.items())), 30.0)
    for value, transactional_id in enumerate(["coord-a", "coord-b", "coord-a"]):
        producer_id, epoch = _prepare(kafka, topic, f"{topic}-{transactional_id}", value)
        assert end_transaction(kafka.client, f"{topic}-{transactional_id}", producer_id, epoch, commit=True).ok
        assert len(coordinators._kept[key]) == 1  # one connection, kept and used again
    kept = coordinators._kept[key][0]
    kept.client.close()  # the kept connection breaks (a broker restart, an idle timeout)
    producer_id, epoch = _prepare(kafka, topic, f"{topic}-coord-c", 3)
    assert end_transaction(kafka.client, f"{topic}-coord-c", producer_id, epoch, commit=True).ok
    # a fenced session (a newer producer initialised the id) is refused on the kept connection too
    old_id, old_epoch = _prepare(kafka, topic, f"{topic}-coord-d", 4)
    newer_id, newer_epoch = _prepare(kafka, topic, f"{topic}-coord-d", 5)  # fences and aborts record 4
    refused = end_transaction(kafka.client, f"{topic}-coord-d", old_id, old_epoch, commit=True)
    assert not refused.ok and not refused.retriable, refused.error_name
    assert end_transaction(kafka.client, f"{topic}-coord-d", newer_id, newer_epoch, commit=True).ok
    assert read_ids(kafka.bootstrap_servers, topic) == [0, 1, 2, 3, 5]
