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


def cdc_pipeline(spark, *, dsn: str, tables: str, slot: str, out: str, checkpoint: str,
                 available_now: bool = False):
    """sparklink.postgres-cdc (two tables, snapshot in small batches) into the file sink (json), one
    change per row; runs until killed, or to the end of the log with ``available_now`` (in larger
    batches: offsets are log positions, the limit may change between runs)."""
    query = (spark.readStream.format("sparklink.postgres-cdc").option("dsn", dsn).option("tables", tables)
             .option("slotName", slot).option("publication", f"{slot}_pub").option("snapshotChunkRows", "50")
             .option("maxChangesPerTrigger", "5000" if available_now else "200").load()
             .writeStream.format("sparklink.files").option("format", "json").option("rollingPolicy", "checkpoint")
             .option("path", out).option("checkpointLocation", checkpoint))
    started = query.trigger(availableNow=True).start() if available_now else query.start()
    started.awaitTermination()
    return started
