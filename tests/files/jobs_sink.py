"""Driver jobs for the file sink's exactly-once tests (run by the ``driver`` fixture).

Each job streams the sequence source (ids 0..N-1) into ``sparklink.files`` with
``trigger(availableNow=True)``, so a restart with the same checkpoint finishes the work.
"""

from __future__ import annotations

from typing import Any


def input_stream(spark, *, rows: int, splits: int = 2, per_trigger: int | None = None):
    reader = (spark.readStream.format("sparklink.sequence")
              .option("numSplits", splits).option("rowsPerSplit", rows // splits))
    if per_trigger:
        reader = reader.option("maxRowsPerTrigger", per_trigger)
    return reader.load().selectExpr(
        "id", "split", "CAST(id % 3 AS STRING) AS kind",
        "timestamp_seconds(1700000000 + id * 60) AS event_time",
        "CONCAT('row-', CAST(id AS STRING)) AS label")


def file_sink_writer(frame, *, out: str, checkpoint: str, options: dict[str, Any]):
    """``frame.writeStream`` to ``sparklink.files`` at ``out`` with ``options``."""
    writer = frame.writeStream.format("sparklink.files").option("path", out).option("checkpointLocation", checkpoint)
    for key, value in options.items():
        writer = writer.option(key, str(value))
    return writer


def start_stream_to_files(spark, *, out: str, checkpoint: str, rows: int, options: dict[str, Any],
                          per_trigger: int | None = None, splits: int = 2, select: str | None = None):
    """Start writing the sequence to ``out`` (``availableNow``); returns the query."""
    frame = input_stream(spark, rows=rows, splits=splits, per_trigger=per_trigger)
    if select:
        frame = frame.selectExpr(select)
    writer = file_sink_writer(frame, out=out, checkpoint=checkpoint, options=options)
    return writer.trigger(availableNow=True).start()


def await_query(query) -> None:
    """Wait for the query's end; its failure is raised."""
    query.awaitTermination()
    exception = query.exception()
    if exception is not None:
        raise RuntimeError(str(exception))


def stream_to_files(spark, **args: Any) -> None:
    """Write the sequence to ``out`` until everything available is written."""
    await_query(start_stream_to_files(spark, **args))


def spark_file_sink(spark, *, out: str, checkpoint: str, rows: int, per_trigger: int) -> None:
    """Spark's own Parquet file sink (with its ``_spark_metadata`` log), fed by the sequence."""
    query = (input_stream(spark, rows=rows, per_trigger=per_trigger).selectExpr("id", "label")
             .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    await_query(query)


def files_to_files(spark, *, source: str, out: str, checkpoint: str, options: dict[str, Any],
                   max_files: int = 1) -> None:
    """sparklink file source (through the source's ``_spark_metadata``) -> sparklink file sink."""
    frame = (spark.readStream.format("sparklink.files").option("path", source).option("format", "parquet")
             .option("maxFilesPerTrigger", max_files).schema("id LONG, label STRING").load())
    writer = file_sink_writer(frame, out=out, checkpoint=checkpoint, options=options)
    await_query(writer.trigger(availableNow=True).start())


def stream_until_killed(spark, *, out: str, checkpoint: str, rows: int, per_trigger: int,
                        options: dict[str, Any]) -> None:
    """A query that keeps running (processing-time trigger) until the test SIGKILLs its driver."""
    frame = input_stream(spark, rows=rows, per_trigger=per_trigger)
    file_sink_writer(frame, out=out, checkpoint=checkpoint, options=options).trigger(
        processingTime="100 milliseconds").start().awaitTermination()
