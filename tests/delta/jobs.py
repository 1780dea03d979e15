"""Driver jobs of the Delta tests (run in driver processes a test SIGKILLs, and in the test's own
session for the last run)."""

from __future__ import annotations

import json
import os
from pathlib import Path

JSON_SCHEMA = "id long, grp int, payload string"
CHANGELOG_SCHEMA = "id long, v string, op string, seq long"  # tests/delta/changelog.py's


def write_json_file(src: Path, name: str, ids: range) -> None:
    """JSON lines moved into ``src`` atomically."""
    staging = src.parent / (src.name + "-staging")
    staging.mkdir(parents=True, exist_ok=True)
    temp = staging / name
    temp.write_text("".join(json.dumps({"id": i, "grp": i % 3, "payload": f"p-{i}"}) + "\n" for i in ids))
    os.replace(temp, src / name)


def streams_into_delta(spark, source_table: str, table: str, checkpoint: str, available_now: bool = True,
                       max_files: int = 1, options: dict[str, str] | None = None, foreach_src: str | None = None,
                       foreach_table: str | None = None, changelog_src: str | None = None,
                       changelog_table: str | None = None) -> None:
    """The Delta family's kill sequence job. The ``sparklink.delta`` source on ``source_table``
    (``maxFilesPerTrigger=1``: one data file per micro-batch) -> the ``sparklink.delta`` sink at
    ``table`` (partitioned by ``grp``). With ``foreach_src`` and ``foreach_table``, a second query
    in the same driver reads the JSON files of ``foreach_src`` (``max_files`` per micro-batch) and
    writes each micro-batch with ``df.write`` into ``foreach_table`` inside ``foreachBatch``, with
    ``txnAppId`` / ``txnVersion`` = the batch id (its checkpoint: ``<checkpoint>-fb``). With
    ``changelog_src`` and ``changelog_table``, a third query streams the changelog's JSON files
    (one per micro-batch) into ``changelog_table`` with ``writeMode=upsert`` keyed by ``id``
    (``op``, ``seq``; its checkpoint: ``<checkpoint>-cl``)."""
    def stream(directory: str, schema: str = JSON_SCHEMA):
        return (spark.readStream.format("json").schema(schema).option("maxFilesPerTrigger", str(max_files))
                .load(directory))

    def trigger(writer):
        return writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="100 milliseconds")

    def write_batch(frame, batch_id: int) -> None:
        (frame.write.format("sparklink.delta").option("path", foreach_table).option("partitionColumns", "grp")
         .option("txnAppId", FOREACH_APP).option("txnVersion", batch_id).save())

    source = (spark.readStream.format("sparklink.delta").option("path", source_table).option("maxFilesPerTrigger", "1")
              .load())
    queries = [trigger(source.writeStream.format("sparklink.delta").option("path", table)
                       .option("partitionColumns", "grp").option("checkpointLocation", checkpoint)
                       .options(**(options or {}))).start()]
    if foreach_src is not None:
        queries.append(trigger(stream(foreach_src).writeStream.foreachBatch(write_batch)
                               .option("checkpointLocation", checkpoint + "-fb")).start())
    if changelog_src is not None:
        queries.append(trigger(stream(changelog_src, CHANGELOG_SCHEMA).writeStream.format("sparklink.delta")
                               .option("path", changelog_table).option("writeMode", "upsert")
                               .option("keyColumns", "id").option("opColumn", "op").option("sequenceColumn", "seq")
                               .option("checkpointLocation", checkpoint + "-cl")).start())
    for query in queries:
        query.awaitTermination()


FOREACH_APP = "foreach-kills"


def delta_to_files(spark, table: str, out: str, checkpoint: str, available_now: bool = True) -> None:
    """sparklink.delta (one data file per micro-batch) -> the file sink (Parquet, one bucket)."""
    frame = spark.readStream.format("sparklink.delta").option("path", table).option("maxFilesPerTrigger", "1").load()
    writer = (frame.writeStream.format("sparklink.files").option("path", out).option("format", "parquet")
              .option("bucketAssigner", "basepath").option("checkpointLocation", checkpoint))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="100 milliseconds")
    writer.start().awaitTermination()
