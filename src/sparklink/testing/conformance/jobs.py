"""Driver jobs of the conformance suite, run by :class:`sparklink.testing.DriverProcess` in a
driver process of their own (which a test may SIGKILL)."""

from __future__ import annotations

import importlib

from sparklink.spark.registration import register_data_source as register_data_source_class


def register_data_source(spark, data_source: str | None) -> None:
    """Register ``"module:attribute"`` (a PySpark DataSource class) with ``spark``; None: nothing
    (sparklink's own formats are registered by the session already)."""
    if data_source:
        module_name, _, attribute = data_source.partition(":")
        register_data_source_class(spark, getattr(importlib.import_module(module_name), attribute))


def sequence_to_sink(spark, *, fmt: str, options: dict, checkpoint: str, num_splits: int = 3,
                     rows_per_split: int = 100, max_rows_per_trigger: int = 100, partitions: int | None = None,
                     data_source: str | None = None) -> None:
    """Stream ids ``0 .. num_splits*rows_per_split-1`` into ``fmt`` with Trigger.AvailableNow;
    ``partitions`` repartitions the stream first (so a restart can change the task count)."""
    register_data_source(spark, data_source)
    frame = (spark.readStream.format("sparklink.sequence").option("numSplits", num_splits)
             .option("rowsPerSplit", rows_per_split).option("maxRowsPerTrigger", max_rows_per_trigger).load())
    if partitions:
        frame = frame.repartition(partitions)
    writer = frame.writeStream.format(fmt).option("checkpointLocation", checkpoint)
    for key, value in options.items():
        writer = writer.option(key, str(value))
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()


def source_to_directory(spark, *, fmt: str, options: dict, schema: str | None, out: str, checkpoint: str,
                        data_source: str | None = None) -> None:
    """Stream any source into the exactly-once example directory sink (Trigger.AvailableNow)."""
    register_data_source(spark, data_source)
    reader = spark.readStream.format(fmt)
    if schema:
        reader = reader.schema(schema)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    (reader.load().writeStream.format("sparklink.directory").option("path", out)
     .option("checkpointLocation", checkpoint).trigger(availableNow=True).start().awaitTermination())
