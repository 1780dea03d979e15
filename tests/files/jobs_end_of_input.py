"""Driver jobs for the end-of-input tests (``tests/files/test_file_sink_nothing_unseen.py``):
user scripts in driver processes of their own, with the automatic end of input of
``sparklink.register(spark)``."""

from __future__ import annotations

import json
from typing import Any

from tests.files.jobs_sink import file_sink_writer, input_stream, start_stream_to_files

LOCAL_ROWS, S3_ROWS, TEXT_ROWS, STOP_ROWS = 1000, 1500, 1000, 1000


def returns_after_await_termination(spark, *, local: dict[str, str], s3: dict[str, str], s3_text: dict[str, str],
                                    s3_options: dict[str, str], result: str) -> None:
    """A script that reads right after ``awaitTermination()`` and returns without ``spark.stop()``:

    * case 1: ``availableNow`` into JSON with the ``default`` rolling policy (carried files),
      then at once ``spark.read.json(out).count()`` in the same script;
    * case 3: Parquet on S3 with ``compaction.everyNCheckpoints=2`` (one micro-batch, so its
      files are held), the script going on right after ``awaitTermination()``;
    * a text query on S3 nobody waits on by ``awaitTermination()``
      (``awaitAnyTermination()``), then the script returns: its end runs from the listener,
      at interpreter exit."""
    query = start_stream_to_files(spark, out=local["out"], checkpoint=local["ck"], rows=LOCAL_ROWS,
                                  select="id", options={"format": "json", "bucketAssigner": "basepath"})
    query.awaitTermination()
    seen = {"json": spark.read.json(local["out"]).count()}
    query = start_stream_to_files(spark, out=s3["out"], checkpoint=s3["ck"], rows=S3_ROWS,
                                  select="id", options={"compaction.everyNCheckpoints": "2", **s3_options})
    query.awaitTermination()
    with open(result, "w", encoding="utf-8") as file:
        json.dump(seen, file)
    start_stream_to_files(spark, out=s3_text["out"], checkpoint=s3_text["ck"], rows=TEXT_ROWS,
                          select="to_json(named_struct('id', id)) AS value",
                          options={"format": "text", "bucketAssigner": "basepath", **s3_options})
    spark.streams.resetTerminated()
    spark.streams.awaitAnyTermination()  # not a StreamingQuery method: the listener ends this one


returns_after_await_termination.end_of_input = True  # type: ignore[attr-defined]
returns_after_await_termination.exits_without_stop = True  # type: ignore[attr-defined]


def stops_the_session_with_a_query_active(spark, *, out: str, ck: str, **_: Any) -> None:
    """Case 4: a processing-time query (carried JSON files) still active when the script calls
    ``spark.stop()``."""
    frame = input_stream(spark, rows=STOP_ROWS, per_trigger=500).selectExpr("id")
    query = (file_sink_writer(frame, out=out, checkpoint=ck, options={"format": "json", "bucketAssigner": "basepath"})
             .trigger(processingTime="100 milliseconds").start())
    query.processAllAvailable()
    spark.stop()


stops_the_session_with_a_query_active.end_of_input = True  # type: ignore[attr-defined]
stops_the_session_with_a_query_active.exits_without_stop = True  # type: ignore[attr-defined]
