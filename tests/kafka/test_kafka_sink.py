"""The Kafka sink on Apache Kafka's broker: both semantics, the commit protocol driven directly
(two attempts of one task, a replayed batch, an older batch after a newer one, fencing of
partitions a crashed run used), a transaction the broker times out before the committer ends
it, and option errors. Tansu (a second implementation) for the refusal it answers differently."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from sparklink.errors import CommitError, ConfigError
from sparklink.kafka.markers import marker_offset
from sparklink.kafka.sink import KafkaSink
from sparklink.sink import WriterContext
from sparklink.sink.protocol import commit_batch
from tests.kafka.readers import open_transaction_partitions, read_records

SCHEMA = StructType([StructField("key", StringType()), StructField("value", StringType())])
QUERY = "protocol-query"


def _sink(kafka, topic, **extra):
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "topic": topic}
    options.update(extra)
    return KafkaSink(options, SCHEMA)


def _write(sink, batch_id, partition, attempt, ids, job_id="job"):
    context = WriterContext(partition_id=partition, attempt_number=attempt, task_attempt_id=attempt * 100 + partition,
                            job_id=job_id, batch_id=batch_id, query_id=QUERY)
    writer = sink.create_writer(context)
    try:
        values = [str(i) for i in ids]
        if ids:
            writer.write_batch(pa.RecordBatch.from_pydict({"key": values, "value": values}))
        writer.flush()
        return writer.prepare_commit()
    except BaseException:
        writer.abort()
        raise
    finally:
        writer.close()


def test_df_write_both_semantics(spark, kafka, new_topic):
    for semantic in ("exactly-once", "at-least-once"):
        topic = new_topic(2)
        frame = spark.range(0, 500, 1, 3).selectExpr("cast(id as string) as key", "cast(id as string) as value",
                                                     "array(named_struct('key', 'h', 'value', cast('x' as binary))) "
                                                     "as headers")
        (frame.write.format("sparklink.kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
         .option("topic", topic).option("semantic", semantic).save())
        records = read_records(kafka.bootstrap_servers, topic)
        assert sorted(int(v) for _, _, v in records) == list(range(500)), semantic
        assert open_transaction_partitions(kafka.bootstrap_servers, topic) == []
        back = (spark.read.format("sparklink.kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
                .option("subscribe", topic).option("includeHeaders", "true").load())
        assert back.filter("headers[0].key = 'h' and cast(headers[0].value as string) = 'x'").count() == 500


def test_protocol_attempts_replays_and_fencing(kafka, new_topic, tmp_path):
    """Writers and commits called exactly as Spark's adapter calls them."""
    topic = new_topic(2)
    checkpoint = tmp_path / "ck"
    sink = _sink(kafka, topic, checkpointLocation=str(checkpoint))
    loser = _write(sink, 0, 0, 0, [0, 1, 2])     # attempt 0, fenced by attempt 1 (same transactional id)
    winner = _write(sink, 0, 0, 1, [0, 1, 2])
    other = _write(sink, 0, 1, 0, [3, 4])
    assert commit_batch(sink, 0, "job-a", winner + other, [QUERY]) is True
    assert commit_batch(sink, 0, "job-a", winner + other, [QUERY]) is False  # a repeated commit
    replay = _write(sink, 0, 0, 0, [0, 1, 2], "job-b") + _write(sink, 0, 1, 0, [3, 4], "job-b")
    assert commit_batch(KafkaSink(sink.options, SCHEMA), 0, "job-b", replay, [QUERY]) is False  # discarded
    # a crashed run with three tasks left partition 2's transaction open ...
    _write(sink, 1, 2, 0, [99])
    assert open_transaction_partitions(kafka.bootstrap_servers, topic) != []
    # ... the next run has two tasks; after its commit no transaction is open any more
    newer = _write(sink, 1, 0, 0, [5]) + _write(sink, 1, 1, 0, [])
    assert commit_batch(sink, 1, "job-c", newer, [QUERY]) is True
    assert open_transaction_partitions(kafka.bootstrap_servers, topic) == []
    older = _write(sink, 0, 0, 0, [0, 1, 2], "job-d")
    assert commit_batch(sink, 0, "job-d", older, [QUERY]) is False
    assert open_transaction_partitions(kafka.bootstrap_servers, topic) == []
    # a read_committed consumer sees the committed transactions only: no fenced attempt, no
    # discarded replay, no aborted leftover of the crashed run (their records are in the log)
    assert sorted(int(v) for _, _, v in read_records(kafka.bootstrap_servers, topic)) == [0, 1, 2, 3, 4, 5]
    assert len(read_records(kafka.bootstrap_servers, topic, "read_uncommitted")) > 6
    config = sink.config
    assert marker_offset(config.client, config.marker_group(QUERY, 0), topic) == 2
    assert marker_offset(config.client, config.marker_group(QUERY, 1), topic) == 1
    assert loser[0]["epoch"] < winner[0]["epoch"]


def test_transaction_timed_out_by_the_broker_fails_the_commit_naming_the_lost_records(kafka, new_topic, tmp_path):
    """A prepared transaction the committer has not ended when ``transaction.timeout.ms`` passes:
    the broker aborts it (its coordinator checks every 0.5 s here, start_kafka), the committer's
    EndTxn is refused, the batch marker went with the transaction, so the commit fails with a
    CommitError naming the transaction, the batch, the partition and the records lost; a
    read_committed consumer sees none of them."""
    topic = new_topic(1)
    sink = _sink(kafka, topic, checkpointLocation=str(tmp_path / "ck"), **{"kafka.transaction.timeout.ms": "1000"})
    prepared = _write(sink, 0, 0, 0, [1, 2, 3])
    assert open_transaction_partitions(kafka.bootstrap_servers, topic) == [0]
    deadline = time.monotonic() + 60  # the broker's abort, observed: the partition's transaction ends
    while open_transaction_partitions(kafka.bootstrap_servers, topic):
        assert time.monotonic() < deadline, f"the broker did not abort within 60s; its log: {kafka.log_tail()}"
        time.sleep(0.2)
    with pytest.raises(CommitError) as raised:
        commit_batch(sink, 0, "job", prepared, [QUERY])
    message = str(raised.value)
    transactional_id = prepared[0]["transactionalId"]
    assert (f"transaction '{transactional_id}' of batch 0 (partition 0, 3 records) was refused" in message
            and "exceeded transaction.timeout.ms; its records are lost" in message), message
    assert read_records(kafka.bootstrap_servers, topic) == []
    assert len(read_records(kafka.bootstrap_servers, topic, "read_uncommitted")) == 3


def test_commit_of_a_fenced_transaction_without_marker_fails_on_tansu(tansu, new_tansu_topic, tmp_path):
    """Tansu answers the committer's EndTxn for a fenced session by closing the connection, not
    with an error code as Apache Kafka does: the committer's other refusal path, whose decision
    is the same (the marker is not committed: the commit fails). On Apache Kafka the newer
    session's open transaction would hold the marker's offset pending (read_committed offset
    fetches wait for it); the broker's own abort is tested above."""
    topic = new_tansu_topic(1)
    sink = _sink(tansu, topic, checkpointLocation=str(tmp_path / "ck"))
    prepared = _write(sink, 0, 0, 0, [1])
    _write(sink, 0, 0, 1, [1])  # a newer session of the same id aborts the prepared transaction
    with pytest.raises(Exception, match="refused .* marker is not committed"):
        commit_batch(sink, 0, "job", prepared, [QUERY])


@pytest.mark.parametrize(("options", "schema", "match"), [
    ({}, SCHEMA, "option 'topic': is required"),
    ({"topic": "t", "semantic": "twice"}, SCHEMA, "option 'semantic': unknown value 'twice'"),
    ({"topic": "t", "kafka.transactional.id": "x"}, SCHEMA, "is set by sparklink"),
    ({"topic": "t", "kafka.security.protocol": "TLS"}, SCHEMA, "'TLS' is not a protocol"),
    ({"topic": "t", "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-256"}, SCHEMA,
     "needs kafka.sasl.username and kafka.sasl.password"),
    ({"topic": "t", "kafka.ssl.ca.location": "/nonexistent/ca.pem"}, SCHEMA, "no TLS"),
    ({"topic": "t"}, StructType([StructField("key", StringType())]), "needs a 'value' column"),
    ({"topic": "t"}, StructType([StructField("value", IntegerType())]), "column 'value' is int"),
    ({"topic": "t", "colour": "red"}, StructType([StructField("value", BinaryType())]), "'colour': unknown option"),
], ids=["no-topic", "bad-semantic", "managed-property", "bad-protocol", "sasl-no-user", "ca-without-tls", "no-value",
        "int-value", "unknown-option"])
def test_bad_options_are_refused(options, schema, match):
    with pytest.raises(ConfigError, match=match):
        KafkaSink(dict({"kafka.bootstrap.servers": "127.0.0.1:1"}, **options), schema)
