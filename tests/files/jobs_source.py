"""Driver jobs for the file source's exactly-once tests, and helpers to feed and check them.

Jobs run in a separate driver process (``sparklink.testing.DriverProcess``) that a test kills:
``stream_to_directory`` streams ``sparklink.files`` into the transactional example sink
``sparklink.directory``; a restart with the same checkpoint resumes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq

SCHEMA = "id long, payload string"


def write_csv_file(src: Path, name: str, ids: range, *, staging: Path | None = None) -> None:
    """Write ``ids`` as CSV rows and move the file into ``src`` atomically (the documented convention)."""
    staging = staging or src.parent / (src.name + "-staging")
    staging.mkdir(parents=True, exist_ok=True)
    body = "".join(f"{i},payload-{i}\n" for i in ids)
    temp = staging / name
    temp.write_text(body)
    os.replace(temp, src / name)


def committed_ids(out: Path) -> list[int]:
    """Every id in the sink's committed (visible) files, duplicates included."""
    ids: list[int] = []
    for part in sorted(out.glob("part-*.parquet")):
        ids.extend(pq.read_table(part, columns=["id"]).column("id").to_pylist())
    return ids


def stream_to_directory(spark, src: str, out: str, checkpoint: str, available_now: bool = True,
                        max_files: int = 2, max_split_bytes: str | None = None, fmt: str = "csv",
                        options: dict[str, str] | None = None) -> None:
    """sparklink.files (CSV) -> sparklink.directory, availableNow or a 200 ms processing-time trigger;
    ``options``: more source options (an S3 source's settings)."""
    reader = (spark.readStream.format("sparklink.files").option("path", src).option("format", fmt)
              .option("minFileAge", "0").option("maxFilesPerTrigger", str(max_files)).options(**(options or {})))
    if max_split_bytes:
        reader = reader.option("maxSplitBytes", max_split_bytes)
    frame = reader.schema(SCHEMA).load()
    writer = (frame.writeStream.format("sparklink.directory").option("path", out)
              .option("checkpointLocation", checkpoint))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="200 milliseconds")
    writer.start().awaitTermination()


def stream_text_to_directory(spark, src: str, out: str, checkpoint: str, max_files: int) -> None:
    """Text lines -> sparklink.directory with availableNow (the many-small-files state test)."""
    frame = (spark.readStream.format("sparklink.files").option("path", src).option("format", "text")
             .option("minFileAge", "0").option("maxFilesPerTrigger", str(max_files)).load())
    (frame.writeStream.format("sparklink.directory").option("path", out).option("checkpointLocation", checkpoint)
     .trigger(availableNow=True).start().awaitTermination())
