"""How the Kafka tests look at a topic: records, open transactions, committed transactions.

Tansu shows records of ABORTED transactions to read_committed consumers (it keeps no
aborted-transaction index), so a read_committed consumer on Tansu cannot prove by itself that
a sink's aborted attempts stay invisible. :func:`committed_transaction_ids` reads instead what a
read_committed consumer sees on Apache Kafka: the records inside the offset ranges of the
transactions the sink committed (from its commit log), and the tests prove separately that
every other transaction of the sink was aborted (none left open, markers committed once).
"""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka import Consumer, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec


Client = str | dict  # the bootstrap servers, or a whole client config (a TLS broker's ``client``)


def client_of(bootstrap: Client) -> dict[str, str]:
    return dict(bootstrap) if isinstance(bootstrap, dict) else {"bootstrap.servers": bootstrap}


def client_of_options(options: dict[str, str]) -> dict[str, str]:
    """The client config in a query's ``kafka.*`` options."""
    return {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}


def partitions_of(bootstrap: Client, topic: str) -> list[int]:
    return sorted(AdminClient(client_of(bootstrap)).list_topics(topic, timeout=10).topics[topic].partitions)


def read_records(bootstrap: Client, topic: str, isolation: str = "read_committed") -> list[tuple[int, int, bytes]]:
    """Every record (partition, offset, value) a consumer with ``isolation`` sees, up to the end.

    Tansu reports a partition's end as the base offset of its last record batch + 1, so the
    records after the first one of a multi-record batch lie past the reported end; a fetch
    returns whole batches, so reading until the position reaches the reported end still
    delivers them (hence no cut at the end)."""
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
            records.append((m.partition(), m.offset(), m.value()))
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


def committed_transaction_ids(bootstrap: Client, topic: str, checkpoint: Path) -> list[int]:
    """Ids (record values) inside the offset ranges of the sink's committed transactions."""
    ranges = [(key, bounds) for entry in committed_entries(checkpoint) for c in entry["committables"]
              for key, bounds in c.get("ranges", {}).items()]
    ids = []
    for partition, offset, value in read_records(bootstrap, topic):
        key = f"{topic}-{partition}"
        if any(k == key and lo <= offset <= hi for k, (lo, hi) in ranges):
            ids.append(int(value))
    return sorted(ids)
