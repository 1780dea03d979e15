"""Driver jobs of the Iceberg kill sequences (run by the ``driver`` fixture, and in the test's own
session for the final run)."""

from __future__ import annotations

from typing import Any


def json_to_iceberg(spark, *, landing: str, checkpoint: str, options: dict[str, Any], available_now: bool,
                    foreach_batch: dict[str, Any] | None = None, changelog: dict[str, Any] | None = None) -> None:
    """Stream the JSON files of ``landing`` (one file per micro-batch) into ``sparklink.iceberg``;
    a processing-time query runs until the test SIGKILLs its driver, ``available_now`` finishes.
    With ``foreach_batch`` (the options of another table), a second query on the same files
    writes each micro-batch with ``df.write`` inside ``foreachBatch``, with ``txnAppId`` /
    ``txnVersion`` = the batch id (its checkpoint: ``<checkpoint>-foreach-batch``). With
    ``changelog`` (``{"landing": ..., "options": ...}``), a third query streams the changelog files
    of that landing folder (``id, v, seq, op``; one file per micro-batch) into a
    ``writeMode=upsert`` table (its checkpoint: ``<checkpoint>-changelog``)."""
    frame = (spark.readStream.format("json").schema("id LONG, label STRING").option("maxFilesPerTrigger", 1)
             .load(landing))
    writers = [frame.writeStream.format("sparklink.iceberg").option("checkpointLocation", checkpoint)
               .options(**{key: str(value) for key, value in options.items()})]
    if foreach_batch is not None:
        def write(batch, batch_id: int) -> None:
            (batch.write.format("sparklink.iceberg").mode("append")
             .options(**{key: str(value) for key, value in foreach_batch.items()})
             .option("txnAppId", "json-to-iceberg").option("txnVersion", str(batch_id)).save())

        writers.append(frame.writeStream.foreachBatch(write).option("checkpointLocation", f"{checkpoint}-foreach-batch"))
    if changelog is not None:
        changes = (spark.readStream.format("json").schema("id LONG, v STRING, seq LONG, op STRING")
                   .option("maxFilesPerTrigger", 1).load(changelog["landing"]))
        writers.append(changes.writeStream.format("sparklink.iceberg").option("checkpointLocation", f"{checkpoint}-changelog")
                       .options(**{key: str(value) for key, value in changelog["options"].items()}))
    queries = [(writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="100 milliseconds"))
               .start() for writer in writers]
    for query in queries:
        query.awaitTermination()


def iceberg_to_iceberg(spark, *, source: dict[str, Any], sink: dict[str, Any], checkpoint: str,
                       available_now: bool) -> None:
    """``sparklink.iceberg`` source (one data file per micro-batch) -> ``sparklink.iceberg`` sink."""
    frame = spark.readStream.format("sparklink.iceberg").options(**source).option("maxFilesPerTrigger", "1").load()
    writer = frame.writeStream.format("sparklink.iceberg").options(**sink).option("checkpointLocation", checkpoint)
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="100 milliseconds")
    writer.start().awaitTermination()
