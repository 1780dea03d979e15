"""The driver job of the Iceberg kill sequence (run by the ``driver`` fixture, and in the test's own
session for the final run)."""

from __future__ import annotations

from typing import Any


def streams_into_iceberg(spark, *, source: dict[str, Any], landing: str, checkpoint: str, options: dict[str, Any],
                         available_now: bool, foreach_batch: dict[str, Any] | None = None,
                         changelog: dict[str, Any] | None = None) -> None:
    """The Iceberg family's kill sequence job. The ``sparklink.iceberg`` source on the table of
    ``source`` (``maxFilesPerTrigger=1``: one data file per micro-batch) -> ``sparklink.iceberg``
    with ``options``; a processing-time query runs until the test SIGKILLs its driver,
    ``available_now`` finishes. With ``foreach_batch`` (the options of another table), a second
    query streams the JSON files of ``landing`` (one file per micro-batch) and writes each
    micro-batch with ``df.write`` inside ``foreachBatch``, with ``txnAppId`` / ``txnVersion`` = the
    batch id (its checkpoint: ``<checkpoint>-foreach-batch``). With ``changelog``
    (``{"landing": ..., "options": ...}``), a third query streams the changelog files of that
    landing folder (``id, v, seq, op``; one file per micro-batch) into a ``writeMode=upsert`` table
    (its checkpoint: ``<checkpoint>-changelog``)."""
    frame = (spark.readStream.format("sparklink.iceberg").options(**{key: str(value) for key, value in source.items()})
             .option("maxFilesPerTrigger", "1").load())
    writers = [frame.writeStream.format("sparklink.iceberg").option("checkpointLocation", checkpoint)
               .options(**{key: str(value) for key, value in options.items()})]
    if foreach_batch is not None:
        files = (spark.readStream.format("json").schema("id LONG, label STRING").option("maxFilesPerTrigger", 1)
                 .load(landing))

        def write(batch, batch_id: int) -> None:
            (batch.write.format("sparklink.iceberg").mode("append")
             .options(**{key: str(value) for key, value in foreach_batch.items()})
             .option("txnAppId", "json-to-iceberg").option("txnVersion", str(batch_id)).save())

        writers.append(files.writeStream.foreachBatch(write).option("checkpointLocation", f"{checkpoint}-foreach-batch"))
    if changelog is not None:
        changes = (spark.readStream.format("json").schema("id LONG, v STRING, seq LONG, op STRING")
                   .option("maxFilesPerTrigger", 1).load(changelog["landing"]))
        writers.append(changes.writeStream.format("sparklink.iceberg").option("checkpointLocation", f"{checkpoint}-changelog")
                       .options(**{key: str(value) for key, value in changelog["options"].items()}))
    queries = [(writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="100 milliseconds"))
               .start() for writer in writers]
    for query in queries:
        query.awaitTermination()
