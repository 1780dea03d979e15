"""Driver jobs for the SDK tests, run by ``sparklink.testing`` in their own driver process."""

from __future__ import annotations


def sequence_to_directory(spark, out: str, checkpoint: str, num_splits: int = 3, rows_per_split: int = 200,
                          max_rows_per_trigger: int = 150, rows_per_second: int | None = None,
                          run_seconds: float | None = None) -> None:
    """Stream the sequence source into the directory sink.

    With ``run_seconds`` None the query uses ``Trigger.AvailableNow`` and ends by itself;
    otherwise it runs micro-batches continuously for that long (to be killed at random).
    """
    reader = (spark.readStream.format("sparklink.sequence").option("numSplits", num_splits)
              .option("rowsPerSplit", rows_per_split).option("maxRowsPerTrigger", max_rows_per_trigger))
    if rows_per_second:
        reader = reader.option("rowsPerSecond", rows_per_second)
    writer = (reader.load().writeStream.format("sparklink.directory")
              .option("path", out).option("checkpointLocation", checkpoint))
    if run_seconds is None:
        writer.trigger(availableNow=True).start().awaitTermination()
    else:
        query = writer.trigger(processingTime="200 milliseconds").start()
        query.awaitTermination(run_seconds)
        query.stop()


def sequence_to_directory_batch(spark, out: str, num_splits: int = 4, rows_per_split: int = 50) -> None:
    """``df.write`` of the sequence source into the directory sink (a batch job)."""
    (spark.read.format("sparklink.sequence").option("numSplits", num_splits).option("rowsPerSplit", rows_per_split)
     .load().write.format("sparklink.directory").option("path", out).mode("append").save())
