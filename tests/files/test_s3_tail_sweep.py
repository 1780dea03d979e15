"""The tail objects of a carried file on S3 once the file is finished (issue 24 item 4), against
SeaweedFS and read back with boto3 (no Spark: the SDK's calls as the adapter makes them).

A task attempt that continues a carried file writes a tail object of its own
(``<hidden name>.tail-<writerUid>``). When its micro-batch is never committed (the driver was
killed) no commit names that tail. It used to survive for good once a later commit, or
``sparklink.files.finish``, finished the carried file: only the tails of files still carried were
listed. Now every tail of a file a commit or a finish made visible is deleted.
"""

from __future__ import annotations

import pytest

from sparklink.files.sink.connector import FileSinkConnector
from sparklink.files.sink.finish import finish_output
from sparklink.spark.driver import current_driver
from sparklink.storage.s3_recoverable import TAIL_INFIX
from sparklink.spark.sink_adapter import SinkStreamWriter
from sparklink.testing.conformance.outputs import SEQUENCE_SCHEMA
from sparklink.testing.conformance.sinks import run_micro_batch, write_attempt
from tests.files.s3_readers import all_keys, pending_uploads, s3_reader_ids


def _tails(client, bucket: str) -> list[str]:
    return [key for key in all_keys(client, bucket) if TAIL_INFIX in key]


@pytest.mark.parametrize("end", ["rolled-by-a-commit", "finished"])
def test_the_tail_of_an_attempt_no_commit_named_is_swept_once_its_carried_file_is_finished(s3_server, s3_bucket,
                                                                                           tmp_path, end):
    client = s3_server.client()
    uri = f"s3://{s3_bucket}/out"
    options = {"path": uri, "format": "json", "bucketAssigner": "basepath", "rollingPolicy": "default",
               "rolloverInterval": "1h", "inactivityInterval": "1h", "checkpointLocation": str(tmp_path / "ck"),
               **s3_server.options()}
    run_micro_batch(FileSinkConnector(options, SEQUENCE_SCHEMA), 0, 1, "job-0")  # ids 0-9, carried
    assert len(_tails(client, s3_bucket)) == 1 and s3_reader_ids(client, s3_bucket, "json") == []
    # batch 1: an attempt continues the carried file, writes its own tail, and the driver dies before the commit
    sink = FileSinkConnector(options, SEQUENCE_SCHEMA)
    SinkStreamWriter(sink, query_id="conformance-query")  # the driver's per-micro-batch step: the carried files
    write_attempt(sink, 1, 0, 0, list(range(10, 20)), "job-1")
    assert len(_tails(client, s3_bucket)) == 2
    if end == "rolled-by-a-commit":  # the restarted query commits batch 1 again and rolls the carried file
        run_micro_batch(FileSinkConnector(dict(options, rolloverInterval="0s"), SEQUENCE_SCHEMA), 1, 1, "job-1b")
        expected = list(range(20))
    else:  # the query stops; sparklink.files.finish completes the carried file at its committed length
        result = finish_output(uri, driver=current_driver(), options=s3_server.options())
        assert (result.completed, result.copied, result.finished) == (1, 0, 0)
        assert "1 carried file(s) completed at their committed length" in result.summary()
        expected = list(range(10))
    assert _tails(client, s3_bucket) == []
    assert pending_uploads(client, s3_bucket) == []
    assert s3_reader_ids(client, s3_bucket, "json") == expected
