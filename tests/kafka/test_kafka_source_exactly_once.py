"""The Kafka source's exactly-once proof: Kafka -> sparklink.files, with the driver SIGKILLed
while records keep arriving, restarted from its checkpoint each time; in the end every record
is in the committed files exactly once. Every client connection is over TLS (Apache Kafka's own
TLS listener; the query gets kafka.security.protocol=ssl and the test CA).

The kills are triggered by the protocol (a fault point inside the sink's commit) and by
observable progress (a new entry in the file sink's commit log), never by a timer.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from confluent_kafka import Producer

from tests.kafka.jobs import kafka_to_files

JOB = "tests.kafka.jobs:kafka_to_files"
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


def _committed_ids(out: Path) -> list[int]:
    dataset = ds.dataset(str(out), format="parquet", ignore_prefixes=[".", "_"])
    return dataset.to_table(columns=["id"]).column("id").to_pylist() if dataset.files else []


def _commits(out: Path) -> int:
    return len(list((out / "_sparklink" / "commits").glob("*.json")))


@pytest.mark.slow
def test_driver_killed_while_records_arrive(kafka_tls, new_tls_topic, driver, tmp_path, spark):
    topic = new_tls_topic(PARTITIONS)
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    security = {k: v for k, v in kafka_tls.options.items() if k != "kafka.bootstrap.servers"}
    args = {"bootstrap": kafka_tls.bootstrap_servers, "topic": topic, "out": str(out), "checkpoint": str(checkpoint),
            "max_offsets": 150, "security": security}
    feeder = _Feeder(kafka_tls.client, topic)
    feeder.send(300)
    feeder.start()
    try:
        # 1: killed inside the file sink's commit, after its log entry (fault point)
        first = driver.run(JOB, args, fault="sink.after_log:kill", once_marker=str(tmp_path / "fired"), timeout=300)
        assert first.killed, first.output
        # 2: killed from outside once it committed two more micro-batches (observable progress)
        process = driver.start(JOB, args)
        target = _commits(out) + 2
        deadline = time.monotonic() + 240
        while _commits(out) < target:
            assert process.process.poll() is None, f"driver ended before it was killed: {process.log_tail()}"
            assert time.monotonic() < deadline, f"no progress within 240s: {process.log_tail()}"
            time.sleep(0.1)
        process.kill()
        assert process.wait(60).killed
    finally:
        total = feeder.stop()
    kafka_to_files(spark, **dict(args, available_now=True, max_offsets=100_000))  # the restart drains, in this session
    ids = _committed_ids(out)
    duplicates = {i: n for i, n in Counter(ids).items() if n > 1}
    assert not duplicates, f"duplicated ids: {sorted(duplicates)[:10]}"
    assert sorted(ids) == list(range(total)), f"missing: {sorted(set(range(total)) - set(ids))[:10]}"
