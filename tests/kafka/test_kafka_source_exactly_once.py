"""The Kafka family's one real SIGKILL sequence: Kafka -> Kafka, the source and the exactly-once
sink (``semantic=exactly-once``) in one query, with the driver SIGKILLed while records keep
arriving, restarted from its checkpoint each time on another number of write tasks; in the end a
read_committed consumer sees every record of the input in the output topic exactly once, and
Spark's own Kafka source agrees. Every connection of the query is over TLS (Apache Kafka's own
TLS listener; source and sink get kafka.security.protocol=ssl and the test CA).

Kill 1 is at the sink's own protocol point ``kafka.after_prepare`` in micro-batch 1 (a task's
transaction flushed with its batch marker, not committed: the restart fences and aborts it, then
writes the batch again); kill 2 comes from outside once the sink's commit log has two more
entries (observable progress, never a timer), so it lands right after a batch is logged, with
its transactions still to commit, or early in the next one. The restarts use 2, 3, then 1 write
tasks: the last run commits on fewer transactional ids than a crashed run used, whose leftovers
the sink fences. This sequence stands for the conformance suite's SIGKILL sequence of the Kafka
sink (``TestKafkaSinkExactlyOnce`` skips its own); the other protocol points are crashed at by
simulation there.

A second query of the same driver reads the same input as a changelog (12 keys, each fed by one
input partition so its changes arrive in id order; every seventh change a delete) and writes it
with ``writeMode=upsert`` (the record key from ``keyColumns``, a delete as a tombstone): after
the same kills, the topic's compacted view (the last record per key a read_committed consumer
sees, tombstones removing keys) equals a plain dict replaying the changes, and its sink leaves
nothing open either.
"""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest
from confluent_kafka import Producer

from sparklink.testing import logged_batches, maven
from sparklink.testing.faults import ENV_BATCH
from tests.kafka.jobs import changelog_change, kafka_to_kafka
from tests.kafka.readers import compacted, read_ids, read_keyed_records, read_records, sink_leftovers

JOB = "tests.kafka.jobs:kafka_to_kafka"
PARTITIONS = 3


class _Feeder(threading.Thread):
    """Produces ids 0, 1, 2, ... (10 per 0.2 s, batched) while drivers run."""

    def __init__(self, client: dict, topic: str):
        super().__init__(daemon=True)
        self.producer = Producer(dict(client, **{"linger.ms": 5}))
        self.topic, self.next, self.stopped = topic, 0, threading.Event()

    def send(self, count: int) -> None:
        for i in range(self.next, self.next + count):
            self.producer.produce(self.topic, value=str(i).encode(), partition=i % PARTITIONS)
        assert self.producer.flush(30) == 0
        self.next += count

    def run(self) -> None:
        while not self.stopped.wait(0.2):
            self.send(10)

    def stop(self) -> int:
        self.stopped.set()
        self.join()
        return self.next


@pytest.mark.slow
def test_driver_killed_while_records_arrive(kafka, kafka_tls, new_tls_topic, driver, tmp_path, spark):
    topic, out_topic, changelog_topic = new_tls_topic(PARTITIONS), new_tls_topic(PARTITIONS), new_tls_topic(2)
    checkpoint = tmp_path / "ck"
    commit_log = checkpoint / "sparklink" / "commits"
    security = {k: v for k, v in kafka_tls.options.items() if k != "kafka.bootstrap.servers"}
    args = {"bootstrap": kafka_tls.bootstrap_servers, "topic": topic, "out_topic": out_topic,
            "checkpoint": str(checkpoint), "max_offsets": 150, "security": security,
            "changelog_topic": changelog_topic}
    feeder = _Feeder(kafka_tls.client, topic)
    feeder.send(300)
    feeder.start()
    try:
        # 1: killed in micro-batch 1 at the sink's prepared transaction, on 2 write tasks (fault point)
        first = driver.run(JOB, dict(args, partitions=2), fault="kafka.after_prepare:kill",
                           once_marker=str(tmp_path / "fired"), env={ENV_BATCH: "1"}, timeout=300)
        assert first.killed, first.output
        assert (tmp_path / "fired").exists(), first.output
        # 2: on 3 write tasks, killed from outside once two more batches are logged (observable progress)
        process = driver.start(JOB, dict(args, partitions=3))
        target = logged_batches(commit_log) + 2
        process.kill_when(lambda: logged_batches(commit_log) >= target, what=f"commit-log entry {target - 1}")
    finally:
        total = feeder.stop()
    # the restart drains on 1 write task, in this session
    kafka_to_kafka(spark, **dict(args, partitions=1, available_now=True, max_offsets=100_000))

    ids = read_ids(kafka_tls.client, out_topic)  # a read_committed consumer (librdkafka, defaults)
    duplicates = {i: n for i, n in Counter(ids).items() if n > 1}
    assert not duplicates, f"duplicated ids: {sorted(duplicates)[:10]}"
    assert ids == list(range(total)), f"{len(ids)} ids, missing: {sorted(set(range(total)) - set(ids))[:10]}"
    assert len(read_records(kafka_tls.client, out_topic, "read_uncommitted")) > len(ids), \
        "no aborted record in the log: the kill at kafka.after_prepare left nothing for read_committed to hide"
    assert sink_leftovers(kafka_tls.client, out_topic, checkpoint) == []

    # the changelog query: the compacted topic equals a dict replaying every change in id order
    expected: dict[bytes, bytes] = {}
    for i in range(total):
        key, op = changelog_change(i)
        if op == "d":
            expected.pop(key.encode(), None)
        else:
            expected[key.encode()] = str(i).encode()
    assert compacted(kafka_tls.client, changelog_topic) == expected
    tombstones = [r for r in read_keyed_records(kafka_tls.client, changelog_topic) if r[3] is None]
    assert tombstones, "no delete reached the changelog topic as a tombstone"
    assert sink_leftovers(kafka_tls.client, changelog_topic, tmp_path / "ck-cl") == []

    # Spark's own Kafka source (spark-sql-kafka-0-10, kafka.isolation.level=read_committed) on the
    # broker's plaintext listener, in a driver process with the connector's jars
    seen_path = tmp_path / "spark-kafka-ids.json"
    result = driver.run("tests.kafka.jobs:spark_kafka_ids",
                        {"bootstrap": kafka.bootstrap_servers, "topic": out_topic, "out": str(seen_path)},
                        spark_conf={"spark.jars": maven.spark_jars("spark-kafka")}, timeout=300)
    assert result.ok, result.output
    seen = json.loads(seen_path.read_text())
    assert sorted(seen) == ids, f"Spark's Kafka source saw {len(seen)} ids, {len(set(seen))} distinct; expected {total}"
