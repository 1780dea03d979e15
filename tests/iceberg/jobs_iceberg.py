"""Driver jobs of the Iceberg sink's kill sequence (run by the ``driver`` fixture)."""

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
