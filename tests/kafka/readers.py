"""How the Kafka tests look at a topic: records, open transactions, the sink's commit log.

The reader of a sink's output is a plain read_committed consumer (librdkafka, defaults) on
Apache Kafka's broker, which hides the records of aborted transactions: :func:`read_ids` is
what a downstream application sees. (Tansu shows aborted records to read_committed consumers;
no sink output is judged on it.)
"""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka import Consumer, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from sparklink.kafka.markers import marker_offset

Client = str | dict  # the bootstrap servers, or a whole client config (a TLS broker's ``client``)


def client_of(bootstrap: Client) -> dict[str, str]:
    return dict(bootstrap) if isinstance(bootstrap, dict) else {"bootstrap.servers": bootstrap}


def client_of_options(options: dict[str, str]) -> dict[str, str]:
    """The client config in a query's ``kafka.*`` options."""
    return {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}


def partitions_of(bootstrap: Client, topic: str) -> list[int]:
    return sorted(AdminClient(client_of(bootstrap)).list_topics(topic, timeout=10).topics[topic].partitions)


def read_records(bootstrap: Client, topic: str, isolation: str = "read_committed") -> list[tuple[int, int, bytes]]:
    """Every record (partition, offset, value) a consumer with ``isolation`` sees, up to the
    partitions' ends (last stable offsets under read_committed, high watermarks otherwise)."""
    return [(partition, offset, value) for partition, offset, _key, value in read_keyed_records(bootstrap, topic, isolation)]


def compacted(bootstrap: Client, topic: str) -> dict[bytes, bytes]:
    """What log compaction keeps of ``topic`` as a read_committed consumer sees it: the last
    record per key in its partition's order, a tombstone (null value) removing the key."""
    kept: dict[bytes, bytes | None] = {}
    for _partition, _offset, key, value in sorted(read_keyed_records(bootstrap, topic)):
        kept[key] = value
    return {key: value for key, value in kept.items() if value is not None}


def read_keyed_records(bootstrap: Client, topic: str,
                       isolation: str = "read_committed") -> list[tuple[int, int, bytes, bytes | None]]:
    """Every record (partition, offset, key, value) a consumer with ``isolation`` sees, as
    :func:`read_records` reads them."""
    consumer = Consumer(dict(client_of(bootstrap), **{"group.id": "sparklink-test-reader",
                                                       "isolation.level": isolation, "enable.auto.commit": "false"}))
    ends = dict(end_offsets(bootstrap, topic, committed=isolation == "read_committed"))
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    records, done = [], {p for p, end in ends.items() if end == 0}
    idle = 0
    while len(done) < len(ends) and idle < 20:
        messages = consumer.consume(10_000, timeout=0.5)
        idle = 0 if messages else idle + 1
        for m in messages:
            assert m.error() is None, m.error()
            records.append((m.partition(), m.offset(), m.key(), m.value()))
        for p in ends:
            if consumer.position([TopicPartition(topic, p)])[0].offset >= ends[p]:
                done.add(p)
    consumer.close()
    return records


def end_offsets(bootstrap: Client, topic: str, *, committed: bool) -> dict[int, int]:
    """Last stable offsets (``committed``) or high watermarks per partition."""
    admin = AdminClient(client_of(bootstrap))
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    wanted = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions_of(bootstrap, topic)}
    return {tp.partition: f.result().offset for tp, f in admin.list_offsets(wanted, isolation_level=level).items()}


def open_transaction_partitions(bootstrap: Client, topic: str) -> list[int]:
    """Partitions whose last stable offset is behind the high watermark: an open transaction."""
    stable, high = end_offsets(bootstrap, topic, committed=True), end_offsets(bootstrap, topic, committed=False)
    return sorted(p for p in high if stable[p] != high[p])


def committed_entries(checkpoint: Path) -> list[dict]:
    """The sink's finished commit-log entries (batch order)."""
    log = checkpoint / "sparklink" / "commits"
    entries = [json.loads(p.read_text()) for p in log.glob("*.json")]
    return sorted((e for e in entries if e["state"] == "finished"), key=lambda e: e["batchId"])


def sink_leftovers(bootstrap: Client, topic: str, checkpoint: Path) -> list[str]:
    """What an exactly-once sink writing ``topic`` with its commit log under ``checkpoint`` left
    behind: open transactions (a partition's last stable offset behind its end), and batch
    markers not at the last batch their group committed + 1 (committed once, in order). [] is clean."""
    problems = [f"open transaction on {topic}-{p}" for p in open_transaction_partitions(bootstrap, topic)]
    last_batch = {}
    for entry in committed_entries(checkpoint):
        for committable in entry["committables"]:
            if committable["records"] and "marker" in committable:
                last_batch[committable["marker"]["group"]] = entry["batchId"]
    for group, batch in last_batch.items():
        found = marker_offset(client_of(bootstrap), group, topic)
        if found != batch + 1:
            problems.append(f"marker of {group} is {found}, expected {batch + 1}")
    return problems


def read_ids(bootstrap: Client, topic: str) -> list[int]:
    """Sorted ids (record values) a read_committed consumer sees in ``topic``."""
    return sorted(int(value) for _, _, value in read_records(bootstrap, topic))
