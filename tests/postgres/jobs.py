"""Driver jobs for the PostgreSQL kill/restart tests (run by sparklink.testing in their own process)."""

from __future__ import annotations


def stream_sequence(spark, *, dsn: str, table: str, checkpoint: str, semantic: str, num_splits: int = 2,
                    rows_per_split: int = 60, max_rows: int = 40, key_columns: str = "id") -> None:
    """Stream ids 0..num_splits*rows_per_split-1 from sparklink.sequence into sparklink.postgres."""
    frame = (spark.readStream.format("sparklink.sequence").option("numSplits", num_splits)
             .option("rowsPerSplit", rows_per_split).option("maxRowsPerTrigger", max_rows).load())
    writer = (frame.writeStream.format("sparklink.postgres").option("dsn", dsn).option("table", table)
              .option("semantic", semantic).option("checkpointLocation", checkpoint))
    if key_columns:
        writer = writer.option("keyColumns", key_columns)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()


def batch_write(spark, *, dsn: str, table: str, checkpoint: str, semantic: str, start: int, end: int) -> None:
    """``df.write`` of ids start..end-1 (two partitions) into sparklink.postgres."""
    (spark.range(start, end, numPartitions=2).write.format("sparklink.postgres").mode("append")
     .option("dsn", dsn).option("table", table).option("semantic", semantic)
     .option("checkpointLocation", checkpoint).save())


# -- the changelog of the kill sequence (writeMode=upsert) ------------------------------------------
# Change ``id`` (0..CHANGELOG_ROWS-1, CHANGELOG_PER_BATCH per micro-batch: batch b holds ids
# b*CHANGELOG_PER_BATCH ..) of key ``k``: keys repeat within a batch, sequence values are a
# permutation of the ids (unique, out of order across batches), a fifth are deletes. The same
# change as Spark SQL (the job) and as Python (the test's replay, changelog_change).
CHANGELOG_ROWS, CHANGELOG_PER_BATCH, CHANGELOG_KEYS = 60, 30, 12
CHANGELOG_SQL = (f"(id * 7) % {CHANGELOG_KEYS} AS k", f"(id * 37) % {CHANGELOG_ROWS} AS seq",
                 "CASE WHEN (id * 13 + 3) % 5 = 0 THEN 'd' ELSE 'u' END AS op", "concat('v', id) AS v")


def changelog_change(i: int) -> tuple[int, int, str, str]:
    """Change ``i`` as (k, seq, op, v), as CHANGELOG_SQL computes it."""
    return (i * 7) % CHANGELOG_KEYS, (i * 37) % CHANGELOG_ROWS, "d" if (i * 13 + 3) % 5 == 0 else "u", f"v{i}"


def stream_changelog_then_sequence(spark, *, dsn: str, table: str, changelog_table: str, checkpoint: str,
                                   semantic: str, num_splits: int = 2, rows_per_split: int = 60,
                                   max_rows: int = 40) -> None:
    """First the changelog (2 micro-batches, partitioned by key: a key's changes meet in one task)
    into ``changelog_table`` with writeMode=upsert, then :func:`stream_sequence` into ``table``;
    each query has its own checkpoint under ``checkpoint``."""
    # one split: micro-batch b is exactly ids b*CHANGELOG_PER_BATCH .. (several splits are admitted
    # round-robin in uneven slices), which the test's replay relies on
    frame = (spark.readStream.format("sparklink.sequence").option("numSplits", 1)
             .option("rowsPerSplit", CHANGELOG_ROWS).option("maxRowsPerTrigger", CHANGELOG_PER_BATCH).load())
    (frame.selectExpr(*CHANGELOG_SQL).repartition(2, "k").writeStream.format("sparklink.postgres")
     .option("dsn", dsn).option("table", changelog_table).option("semantic", semantic)
     .option("writeMode", "upsert").option("keyColumns", "k").option("opColumn", "op").option("sequenceColumn", "seq")
     .option("checkpointLocation", f"{checkpoint}/changelog").trigger(availableNow=True).start().awaitTermination())
    stream_sequence(spark, dsn=dsn, table=table, checkpoint=f"{checkpoint}/sequence", semantic=semantic,
                    num_splits=num_splits, rows_per_split=rows_per_split, max_rows=max_rows)


def cdc_pipeline(spark, *, dsn: str, tables: str, slot: str, delta: str, target: str, checkpoint: str,
                 iceberg: dict[str, str] | None = None, available_now: bool = False):
    """sparklink.postgres-cdc (two tables, snapshot in small batches) into upsert sinks, each query
    with its own slot: ``sparklink.delta`` at ``delta``, ``sparklink.postgres`` into table
    ``target`` and, with ``iceberg`` (the table and catalog options), ``sparklink.iceberg``
    (keyColumns _table,id; opColumn _op; sequenceColumn _lsn). Runs until killed (any query
    failing ends the run), or to the end of the log with ``available_now`` (larger batches:
    offsets are log positions, the limit may change between runs). Returns the queries."""
    def changes(slot_name: str):
        return (spark.readStream.format("sparklink.postgres-cdc").option("dsn", dsn).option("tables", tables)
                .option("slotName", slot_name).option("publication", f"{slot_name}_pub")
                .option("snapshotChunkRows", "50").option("maxChangesPerTrigger", "5000" if available_now else "200")
                .load().writeStream.option("writeMode", "upsert").option("keyColumns", "_table,id")
                .option("opColumn", "_op").option("sequenceColumn", "_lsn"))

    writers = [changes(slot).format("sparklink.delta").option("path", delta)
               .option("checkpointLocation", f"{checkpoint}/delta"),
               changes(f"{slot}_pg").format("sparklink.postgres").option("dsn", dsn).option("table", target)
               .option("checkpointLocation", f"{checkpoint}/pg")]
    if iceberg is not None:
        writers.append(changes(f"{slot}_ice").format("sparklink.iceberg").options(**iceberg)
                       .option("checkpointLocation", f"{checkpoint}/iceberg"))
    queries = [(w.trigger(availableNow=True) if available_now else w).start() for w in writers]
    if available_now:
        for query in queries:
            query.awaitTermination()
    else:
        spark.streams.awaitAnyTermination()
    return queries
