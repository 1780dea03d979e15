"""Driver job for the idempotent foreachBatch test (run by sparklink.testing in its own process)."""

from __future__ import annotations


def foreach_batch_two_sinks(spark, *, dsn: str, table: str, out: str, checkpoint: str, rows: int,
                            per_trigger: int) -> None:
    """Stream ids 0..rows-1; each micro-batch is written with ``df.write`` to the file sink and to
    PostgreSQL (``semantic=write-ahead``, no key), both with txnAppId / txnVersion = batch id."""

    def write_both(frame, batch_id: int) -> None:
        (frame.write.format("sparklink.files").mode("append").option("path", out).option("format", "parquet")
         .option("bucketAssigner", "basepath").option("txnAppId", "two-sinks").option("txnVersion", batch_id)
         .save())
        (frame.write.format("sparklink.postgres").mode("append").option("dsn", dsn).option("table", table)
         .option("semantic", "write-ahead").option("checkpointLocation", checkpoint + "-pg")
         .option("txnAppId", "two-sinks").option("txnVersion", batch_id).save())

    (spark.readStream.format("sparklink.sequence").option("numSplits", 2).option("rowsPerSplit", rows // 2)
     .option("maxRowsPerTrigger", per_trigger).load().select("id")
     .writeStream.foreachBatch(write_both).option("checkpointLocation", checkpoint)
     .trigger(availableNow=True).start().awaitTermination())
