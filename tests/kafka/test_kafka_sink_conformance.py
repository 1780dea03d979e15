"""The Kafka sink (``semantic=exactly-once``) through the published conformance suite, on Apache
Kafka's broker: SIGKILLs of the driver at a task's prepared transaction and after the batch is
logged, with restarts on other numbers of write tasks; simulated crashes at every fault point;
tasks failing on their first attempt; two attempts of one task, a repeated commit and an older
batch after a newer one.

:meth:`read_ids` is what a plain read_committed consumer (librdkafka, defaults) sees: the broker
hides the records of aborted transactions (fenced attempts, discarded replays, what a killed
driver left prepared), which the SIGKILL sequence checks are in the log. After it, Spark's own
Kafka source (spark-sql-kafka-0-10, in a driver process of its own with the connector's jars on
``spark.jars``) reads the topic with ``kafka.isolation.level=read_committed``: every id once.
:meth:`leftovers` checks the rest: no transaction of the sink is left open (every partition's
last stable offset is its end), and each partition's batch marker stands at the last batch it
committed + 1 (committed once, in order).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from sparklink.kafka.markers import marker_offset
from sparklink.testing import maven
from sparklink.testing.conformance import SinkConformance
from tests.kafka.conformance_sink import IdsKafkaSink
from tests.kafka.readers import (client_of_options, committed_entries, open_transaction_partitions, read_ids,
                                 read_records)

_prefixes = itertools.count()


class TestKafkaSinkExactlyOnce(SinkConformance):
    format = "sparklink-test.kafka-ids"
    data_source = "tests.kafka.conformance_sink:IdsKafkaDataSource"
    sink_factory = IdsKafkaSink
    refuses_second_query = False  # several queries may write one topic, each with its own transactional ids
    connector_points = ("kafka.after_prepare",)
    # one real SIGKILL where Kafka's state differs: a transaction flushed but not committed (the
    # restart fences and aborts it, then writes the batch again); the other points, the commit log
    # written with transactions still to commit (sink.after_log) among them, are crashed at by
    # simulation here (a new committer rolls them forward)
    sigkill_points = ("kafka.after_prepare",)
    sigkill_rows_per_split = 50  # 2 micro-batches
    task_failure_points = ("writer.after_write", "kafka.after_prepare")

    @pytest.fixture
    def sink_options(self, tmp_path, kafka, new_topic):
        return {"kafka.bootstrap.servers": kafka.bootstrap_servers, "topic": new_topic(3),
                "transactionalIdPrefix": f"conf{next(_prefixes)}", "checkpointLocation": str(tmp_path / "ck")}

    #: after the SIGKILL sequence, Spark's own Kafka source reads the topic too (once, plaintext)
    spark_reader = True

    def read_ids(self, options):
        return read_ids(client_of_options(options), options["topic"])

    @pytest.mark.slow
    def test_sigkill_at_each_protocol_point_with_restarts_on_other_partition_counts(self, sink_options, driver,
                                                                                     tmp_path, spark):
        """The suite's sequence, then: the topic holds records of aborted transactions (so the
        read_committed readers had something to hide), and Spark's Kafka source sees every id once."""
        super().test_sigkill_at_each_protocol_point_with_restarts_on_other_partition_counts(
            sink_options, driver, tmp_path, spark)
        client, topic = client_of_options(sink_options), sink_options["topic"]
        ids = self.read_ids(sink_options)
        assert len(read_records(client, topic, "read_uncommitted")) > len(ids), "no aborted record in the log"
        if not self.spark_reader:
            return
        out = tmp_path / "spark-kafka-ids.json"
        result = driver.run("tests.kafka.jobs:spark_kafka_ids",
                            {"bootstrap": client["bootstrap.servers"], "topic": topic, "out": str(out)},
                            spark_conf={"spark.jars": maven.spark_jars("spark-kafka")}, timeout=300)
        assert result.ok, result.output
        seen = json.loads(out.read_text())
        assert sorted(seen) == ids == list(range(3 * self.sigkill_rows_per_split)), \
            f"Spark's Kafka source saw {len(seen)} ids, {len(set(seen))} distinct"

    def leftovers(self, options):
        bootstrap, topic = client_of_options(options), options["topic"]
        problems = [f"open transaction on {topic}-{p}" for p in open_transaction_partitions(bootstrap, topic)]
        last_batch = {}
        for entry in committed_entries(Path(options["checkpointLocation"])):
            for committable in entry["committables"]:
                if committable["records"] and "marker" in committable:
                    last_batch[committable["marker"]["group"]] = entry["batchId"]
        for group, batch in last_batch.items():
            found = marker_offset(bootstrap, group, topic)
            if found != batch + 1:
                problems.append(f"marker of {group} is {found}, expected {batch + 1}")
        return problems


class TestKafkaSinkExactlyOnceOverTls(TestKafkaSinkExactlyOnce):
    """A crash after the commit log is written, simulated with every client connection over TLS
    (the writers' producers, the committer's FindCoordinator / EndTxn, the markers, the fencing, the
    test's readers): the broker's own TLS listener, certificates made by the test. The other
    simulated crashes and the rest of the suite run once, over plaintext, in the class above."""

    spark_reader = False  # Spark's Kafka source reads the plaintext sequence's topic

    @pytest.fixture
    def sink_options(self, tmp_path, kafka_tls, new_tls_topic):
        return {**kafka_tls.options, "topic": new_tls_topic(3), "transactionalIdPrefix": f"tls{next(_prefixes)}",
                "checkpointLocation": str(tmp_path / "ck")}

    # no driver SIGKILL of its own (the suite's budget: the family's real kills run over plaintext above and
    # in tests/kafka/test_kafka_source_exactly_once.py, whose connections are all TLS); over TLS a crash
    # right after the commit log is written is simulated: the sink is built again from its options and a
    # new committer commits the logged transactions through the broker's TLS listener
    sigkill_points = ()

    @classmethod
    def fault_points(cls):
        return ("sink.after_log",)  # where the transport matters; every other point runs over plaintext above

    test_task_failing_on_its_first_attempt = None
    test_second_query_on_the_same_output_is_refused = None
    test_two_attempts_of_one_task_commit_once_and_commit_twice_is_a_no_op = None
