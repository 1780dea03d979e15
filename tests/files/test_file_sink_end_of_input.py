"""The end of input: a query writing ``sparklink.files`` that ends without a crash leaves every
committed row visible, with no call after it (see :mod:`sparklink.spark.end_of_input`).

* (A user's driver script that returns right after ``awaitTermination()``: carried files and
  Parquet held for compaction, on local disk and S3, is in ``test_file_sink_nothing_unseen``.)
* ``query.stop()`` of a running query in this session; a restart continues exactly once.
* ``finishAtEnd=false`` keeps the carried file for the next run.
"""

from __future__ import annotations

from sparklink.spark.end_of_input import await_end_of_input, listening
from tests.files.jobs_sink import await_query, file_sink_writer, input_stream, start_stream_to_files
from tests.files.sink_readers import assert_exactly_once, hidden_files, read_ids


def test_query_stop_finishes_carried_files_and_a_restart_continues_exactly_once(spark, tmp_path):
    out, ck = tmp_path / "out", tmp_path / "ck"
    options = {"format": "json", "bucketAssigner": "basepath"}  # the default rolling policy: carried files
    with listening(spark):
        query = (file_sink_writer(input_stream(spark, rows=200, per_trigger=50), out=str(out), checkpoint=str(ck),
                                  options=options).trigger(processingTime="50 milliseconds").start())
        query.processAllAvailable()
        query.stop()
        done = await_end_of_input(spark, [str(query.id)])
    assert "carried file(s) copied" in done[str(query.id)]
    assert sorted(read_ids(out, "json")) == list(range(200)) and hidden_files(out) == []
    with listening(spark):
        query = start_stream_to_files(spark, out=str(out), checkpoint=str(ck), rows=300, per_trigger=50,
                                      options=options)
        await_query(query)
    assert_exactly_once(out, "json", 300)


def test_finish_at_end_false_keeps_the_carried_file_for_the_next_run(spark, tmp_path):
    out = tmp_path / "out"
    with listening(spark):
        await_query(start_stream_to_files(spark, out=str(out), checkpoint=str(tmp_path / "ck"), rows=100,
                                          per_trigger=50, options={"format": "json", "bucketAssigner": "basepath",
                                                                   "finishAtEnd": "false"}))
    assert read_ids(out, "json") == [] and hidden_files(out) != []  # one carried file per task, still hidden


def test_an_s3_output_is_finished_at_the_end_of_input(spark, s3_server, s3_bucket, tmp_path, monkeypatch):
    """On S3 too: an ``availableNow`` query carrying JSON files ends; its end of input completes
    each carried file's upload at its committed length (the S3 settings from the AWS
    environment: the sink's record holds no secret); a Parquet query with compaction every 3
    micro-batches ends with its last batch held, and its end of input finishes it. boto3 sees
    every row once, no upload, no tail."""
    from tests.files.s3_readers import all_keys, pending_uploads, s3_reader_ids

    for key, value in s3_server.environment().items():
        monkeypatch.setenv(key, value)
    options = {"format": "json", "bucketAssigner": "basepath", **s3_server.options()}
    held = {"format": "parquet", "bucketAssigner": "basepath", "compaction.everyNCheckpoints": "3", **s3_server.options()}
    with listening(spark):
        query = start_stream_to_files(spark, out=f"s3a://{s3_bucket}/out", checkpoint=str(tmp_path / "ck"),
                                      rows=100, options=options)
        compacted = start_stream_to_files(spark, out=f"s3a://{s3_bucket}/held", checkpoint=str(tmp_path / "ck2"),
                                          rows=100, per_trigger=25, options=held)  # 4 batches: the last one held
        await_query(query)
        await_query(compacted)
        done = await_end_of_input(spark, [str(query.id), str(compacted.id)])
    assert "carried file(s) completed at their committed length" in done[str(query.id)]
    assert str(compacted.id) in done, done
    client = s3_server.client()
    assert s3_reader_ids(client, s3_bucket, "json") == list(range(100))
    assert s3_reader_ids(client, s3_bucket, "parquet", prefix="held") == list(range(100))
    assert pending_uploads(client, s3_bucket) == [] and pending_uploads(client, s3_bucket, "held") == []
    assert [key for key in all_keys(client, s3_bucket) if ".tail-" in key] == []
