"""Driver jobs of the Iceberg kill sequences (run by the ``driver`` fixture, and in the test's own
session for the final run)."""

from __future__ import annotations

from typing import Any


def json_to_iceberg(spark, *, landing: str, checkpoint: str, options: dict[str, Any], available_now: bool) -> None:
    """Stream the JSON files of ``landing`` (one file per micro-batch) into ``sparklink.iceberg``;
    a processing-time query runs until the test SIGKILLs its driver, ``available_now`` finishes."""
    frame = (spark.readStream.format("json").schema("id LONG, label STRING").option("maxFilesPerTrigger", 1)
             .load(landing))
    writer = frame.writeStream.format("sparklink.iceberg").option("checkpointLocation", checkpoint)
    for key, value in options.items():
        writer = writer.option(key, str(value))
    if available_now:
        writer.trigger(availableNow=True).start().awaitTermination()
    else:
        writer.trigger(processingTime="100 milliseconds").start().awaitTermination()


def iceberg_to_iceberg(spark, *, source: dict[str, Any], sink: dict[str, Any], checkpoint: str,
                       available_now: bool) -> None:
    """``sparklink.iceberg`` source (one data file per micro-batch) -> ``sparklink.iceberg`` sink."""
    frame = spark.readStream.format("sparklink.iceberg").options(**source).option("maxFilesPerTrigger", "1").load()
    writer = frame.writeStream.format("sparklink.iceberg").options(**sink).option("checkpointLocation", checkpoint)
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="100 milliseconds")
    writer.start().awaitTermination()
