"""Idempotent ``df.write`` into Kafka (``txnAppId`` / ``txnVersion``, :mod:`sparklink.sink.txn`):
with ``semantic=exactly-once`` and a ``checkpointLocation`` for the committer's log, the pair
names the job's log entry, written before the transactions are committed; a replay is skipped.
Without a log the options are refused."""

from __future__ import annotations

import pytest

from tests.kafka.readers import open_transaction_partitions, read_records


def _write(spark, kafka, topic, start, end, version, **options):
    writer = (spark.range(start, end, 1, 2).selectExpr("cast(id as string) as value").write.format("sparklink.kafka")
              .option("kafka.bootstrap.servers", kafka.bootstrap_servers).option("topic", topic)
              .option("txnAppId", "app").option("txnVersion", version))
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def test_kafka_write_with_a_committed_pair_is_skipped(spark, kafka, new_topic, tmp_path):
    topic = new_topic(2)
    log = {"checkpointLocation": str(tmp_path / "ck")}
    _write(spark, kafka, topic, 0, 50, 0, **log)
    _write(spark, kafka, topic, 100, 150, 0, **log)  # a replay of version 0 (other rows, to see it skipped)
    _write(spark, kafka, topic, 50, 100, 1, **log)
    assert sorted(int(v) for _, _, v in read_records(kafka.bootstrap_servers, topic)) == list(range(100))
    assert open_transaction_partitions(kafka.bootstrap_servers, topic) == []
    with pytest.raises(Exception, match="option 'txnAppId': KafkaSink cannot record an idempotent write"):
        _write(spark, kafka, topic, 0, 10, 2)
