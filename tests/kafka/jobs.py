"""Driver jobs of the Kafka tests (run in driver processes that the tests SIGKILL)."""

from __future__ import annotations

CHANGELOG_KEYS_PER_PARTITION = 4  # the changelog's keys: 4 per input partition (id % 3), 12 in all


def changelog_change(i: int) -> tuple[str, str]:
    """Input id ``i`` as a change of the changelog query: (key, op). Its key depends on its input
    partition (``i % 3``), so a key's changes are read in id order; every seventh is a delete."""
    return f"k{i % 3 + 3 * ((i // 3) % CHANGELOG_KEYS_PER_PARTITION)}", "d" if i % 7 == 3 else "u"


def kafka_to_kafka(spark, *, bootstrap: str, topic: str, out_topic: str, checkpoint: str, partitions: int,
                   max_offsets: int = 200, available_now: bool = False, security: dict | None = None,
                   changelog_topic: str | None = None) -> None:
    """sparklink.kafka -> sparklink.kafka (``semantic=exactly-once``): each record of ``topic``
    written to ``out_topic`` with its value (an id as text) as key and value, by ``partitions``
    write tasks (a restart may change it). ``security``: more ``kafka.*`` options (a TLS
    broker's), given to the source and to the sink alike. With ``changelog_topic``, a second
    query of the same driver (checkpoint ``<checkpoint>-cl``) reads ``topic`` as a changelog
    (:func:`changelog_change`: key, op; ``seq`` = the id) and writes it with
    ``writeMode=upsert`` (the record key from ``keyColumns``, deletes as tombstones) into
    ``changelog_topic``, exactly-once too."""
    def source():
        return (spark.readStream.format("sparklink.kafka").option("kafka.bootstrap.servers", bootstrap)
                .options(**(security or {})).option("subscribe", topic).option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", max_offsets).load())

    def sink(frame, target: str, query_checkpoint: str):
        writer = (frame.writeStream.format("sparklink.kafka").option("kafka.bootstrap.servers", bootstrap)
                  .options(**(security or {})).option("topic", target).option("semantic", "exactly-once")
                  .option("checkpointLocation", query_checkpoint))
        return writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="200 milliseconds")

    copies = source().repartition(partitions).selectExpr("cast(value as string) as key",
                                                         "cast(value as string) as value")
    queries = [sink(copies, out_topic, checkpoint).start()]
    if changelog_topic is not None:
        ids = "cast(cast(value as string) as long)"
        changes = source().selectExpr(
            f"concat('k', {ids} % 3 + 3 * (({ids} div 3) % {CHANGELOG_KEYS_PER_PARTITION})) as k",
            f"case when {ids} % 7 = 3 then 'd' else 'u' end as op", f"{ids} as seq", "cast(value as string) as value")
        queries.append(sink(changes, changelog_topic, checkpoint + "-cl").option("writeMode", "upsert")
                       .option("keyColumns", "k").option("opColumn", "op").option("sequenceColumn", "seq").start())
    for query in queries:
        query.awaitTermination()


def sequence_to_kafka(spark, *, bootstrap: str, topic: str, checkpoint: str, partitions: int,
                      rows_per_split: int = 100, max_rows_per_trigger: int = 100,
                      semantic: str = "exactly-once", options: dict | None = None) -> None:
    """The sequence source (ids 0 .. 3*rows_per_split-1) -> sparklink.kafka, Trigger.AvailableNow,
    repartitioned to ``partitions`` write tasks (a restart may change it)."""
    frame = (spark.readStream.format("sparklink.sequence").option("numSplits", 3)
             .option("rowsPerSplit", rows_per_split).option("maxRowsPerTrigger", max_rows_per_trigger).load()
             .repartition(partitions).selectExpr("cast(id as string) as key", "cast(id as string) as value"))
    (frame.writeStream.format("sparklink.kafka").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).option("semantic", semantic).option("checkpointLocation", checkpoint)
     .options(**(options or {}))
     .trigger(availableNow=True).start().awaitTermination())


def spark_kafka_ids(spark, *, bootstrap: str, topic: str, out: str) -> None:
    """Spark's own Kafka source (``format("kafka")``, spark-sql-kafka-0-10 from the artifact set
    ``spark-kafka`` on ``spark.jars``) reads ``topic`` with ``kafka.isolation.level=read_committed``,
    every other option at its default; the ids (values) it saw go to ``out`` as a JSON list."""
    import json
    from pathlib import Path

    frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
             .option("kafka.isolation.level", "read_committed").load())
    ids = [int(row.value) for row in frame.select("value").collect()]
    Path(out).write_text(json.dumps(ids))
