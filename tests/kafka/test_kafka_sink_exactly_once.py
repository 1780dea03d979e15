"""The Kafka sink's exactly-once proof on a real broker (Tansu).

The driver is SIGKILLed at the protocol's points (a task's transaction prepared, the batch
logged, the batch committed but not yet recorded by Spark), restarting each time with another
number of write tasks. Tansu shows aborted records to read_committed consumers, so the check is
the sink's side of the guarantee, which is what a read_committed reader sees on Apache Kafka:

* no transaction of the sink is left open (every partition's last stable offset is its end);
* the records of the transactions the sink committed hold every id exactly once;
* every committed transaction carries its batch marker, and each partition's marker is at
  the last batch it wrote + 1 (markers only move forward: each batch committed once).
"""

from __future__ import annotations

from collections import Counter

import pytest

from sparklink.kafka.markers import marker_offset
from tests.kafka.readers import (committed_entries, committed_transaction_ids, open_transaction_partitions,
                                 read_records)

JOB = "tests.kafka.jobs:sequence_to_kafka"
ROWS_PER_SPLIT = 100  # 300 ids, 100 per trigger: 3 micro-batches


def _assert_sink_state(kafka, topic, checkpoint, expected_ids):
    assert open_transaction_partitions(kafka.bootstrap_servers, topic) == []
    ids = committed_transaction_ids(kafka.bootstrap_servers, topic, checkpoint)
    duplicates = {i: n for i, n in Counter(ids).items() if n > 1}
    assert not duplicates, f"ids in more than one committed transaction: {sorted(duplicates)[:10]}"
    assert ids == expected_ids
    last_batch_of = {}
    for entry in committed_entries(checkpoint):
        for committable in entry["committables"]:
            if committable["records"]:
                marker = committable["marker"]
                last_batch_of[(marker["group"], marker["topic"])] = entry["batchId"]
    assert last_batch_of, "no committed transaction"
    for (group, marker_topic), batch in last_batch_of.items():
        assert marker_offset({"bootstrap.servers": kafka.bootstrap_servers}, group, marker_topic) == batch + 1, group


@pytest.mark.slow
def test_sigkill_at_each_protocol_point_with_other_partition_counts(kafka, new_topic, driver, tmp_path):
    topic = new_topic(3)
    checkpoint = tmp_path / "ck"
    args = {"bootstrap": kafka.bootstrap_servers, "topic": topic, "checkpoint": str(checkpoint),
            "rows_per_split": ROWS_PER_SPLIT}
    kills = [("kafka.after_prepare", 0, 3), ("sink.after_log", 1, 2), ("sink.after_commit", 2, 1)]
    for point, batch, partitions in kills:
        marker = tmp_path / f"fired-{point}"
        crashed = driver.run(JOB, dict(args, partitions=partitions), fault=f"{point}:kill", once_marker=str(marker),
                             env={"SPARKLINK_FAULT_BATCH": str(batch)})
        assert crashed.killed, f"{point}: {crashed.output}"
        assert marker.exists(), crashed.output
    finished = driver.run(JOB, dict(args, partitions=2))
    assert finished.ok, finished.output
    _assert_sink_state(kafka, topic, checkpoint, list(range(3 * ROWS_PER_SPLIT)))
    # What Tansu cannot show: its read_committed consumers also see the aborted attempts' records.
    visible_on_tansu = read_records(kafka.bootstrap_servers, topic)
    assert len(visible_on_tansu) >= 3 * ROWS_PER_SPLIT
