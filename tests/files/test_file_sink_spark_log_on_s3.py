"""Spark's ``_spark_metadata`` log, the lease and ``sparklink.files.finish`` with the output on S3
(SeaweedFS, the session's ``s3_server``), checked by readers nobody here wrote: boto3 lists and
gets the objects, pyarrow reads them, and the log is read as Spark's ``FileStreamSinkLog``
reads it (the newest ``.compact`` file and the batches after it, one JSON status per line).

Spark's own ``spark.read.parquet`` cannot reach S3 here (no hadoop-aws jars on the test
machine), so Spark's reader is stood in for by that log reading; the sparklink file source reads
the prefix through the log (a stray object no commit names is ignored).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections import Counter
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparklink.errors import ConcurrentWriterError
from sparklink.files import finish
from sparklink.files.spark_log import SparkLog, SparkLogConfig
from sparklink.storage import S3Config, open_storage, parse_location
from sparklink.storage.directory import StorageDirectory
from sparklink.sink.lease import FencedError, OutputLease, check_fence
from sparklink.spark.driver import current_driver
from tests.files.s3_readers import all_keys, pending_uploads, s3_reader_ids, visible_keys

ROWS = 50_000


def spark_log_view(client, bucket: str, prefix: str) -> list[dict]:
    """The file statuses a Spark reader takes from ``<prefix>/_spark_metadata`` (as Spark's
    FileStreamSinkLog.allFiles: the newest compact batch and every batch after it)."""
    batches = {}
    for key in all_keys(client, bucket, f"{prefix}/_spark_metadata"):
        name = key.rpartition("/")[2]
        if name.split(".")[0].isdigit() and name.count(".") <= 1:
            batches[int(name.split(".")[0])] = name
    compacts = [b for b, name in batches.items() if name.endswith(".compact")]
    start = max(compacts) if compacts else 0
    statuses: dict[str, dict] = {}
    for batch in range(start, max(batches) + 1):
        body = client.get_object(Bucket=bucket, Key=f"{prefix}/_spark_metadata/{batches[batch]}")["Body"].read()
        lines = body.decode("utf-8").split("\n")
        assert lines[0] == "v1"
        for line in lines[1:]:
            status = json.loads(line)
            assert status["action"] == "add"
            statuses[status["path"]] = status
    return list(statuses.values())


def sparklink_source_ids(spark, s3_server, bucket: str) -> list[int]:
    """Ids the sparklink file source reads from the output (through its _spark_metadata log)."""
    frame = spark.read.format("sparklink.files").options(**s3_server.options()) \
        .option("path", f"s3://{bucket}/out").option("format", "parquet").schema("id long").load()
    return sorted(row.id for row in frame.collect())


def test_available_now_with_compaction_then_finish_on_s3(spark, s3_server, s3_bucket, tmp_path, monkeypatch):
    """The done-when case of issue 23: 50,000 rows streamed to ``s3a://`` with
    ``compaction.everyNCheckpoints=2`` and ``availableNow`` (5 micro-batches: the fifth's file is
    held for compaction), then ``sparklink.files.finish(spark, "s3://bucket/out")``."""
    client = s3_server.client()
    (spark.readStream.format("sparklink.sequence").option("numSplits", 2).option("rowsPerSplit", ROWS // 2)
     .option("maxRowsPerTrigger", ROWS // 5).load().selectExpr("id")
     .writeStream.format("sparklink.files").options(**s3_server.options())
     .option("path", f"s3a://{s3_bucket}/out").option("checkpointLocation", str(tmp_path / "ck"))
     .option("format", "parquet").option("bucketAssigner", "basepath").option("compaction.everyNCheckpoints", "2")
     .trigger(availableNow=True).start().awaitTermination())
    committed = s3_reader_ids(client, s3_bucket, "parquet")
    assert len(committed) == len(set(committed)) == ROWS * 4 // 5  # the fifth batch is held
    assert any(k.startswith("out/_spark_metadata/") for k in all_keys(client, s3_bucket))
    # a stray visible object no commit names: a plain listing sees it, readers of the log do not
    buffer = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array([-1], pa.int64())}), buffer)
    client.put_object(Bucket=s3_bucket, Key="out/part-stray.parquet", Body=buffer.getvalue())
    assert sparklink_source_ids(spark, s3_server, s3_bucket) == committed  # not the stray
    requests: Counter[str] = Counter()  # every call finish makes on its S3 clients (docs/object-stores.md)
    new_client = S3Config.client

    def counted_client(config):
        client = new_client(config)
        client.meta.events.register("before-call.s3", lambda model, **_: requests.update([model.name]))
        return client

    monkeypatch.setattr(S3Config, "client", counted_client)
    # the S3 settings as the query's options (the sink's record holds no secret; without them, the AWS
    # environment: this session's end of input, if installed, finds none here and leaves the output to this call)
    result = finish(spark, f"s3://{s3_bucket}/out", options=s3_server.options())
    monkeypatch.undo()
    print(f"S3 requests of one finish (one held file): {dict(requests)}, {sum(requests.values())} in all")
    assert result.files == 1
    # a plain S3 reader: every row once, no upload left
    assert s3_reader_ids(client, s3_bucket, "parquet") == [-1] + list(range(ROWS))  # the stray too
    assert pending_uploads(client, s3_bucket) == []
    # Spark's reader of the log: it names exactly the visible objects, by s3a:// URI (as the query gave
    # the path; the finish given s3:// appends in the log's scheme), with their sizes
    view = spark_log_view(client, s3_bucket, "out")
    assert {urlparse(s["path"]).scheme for s in view} == {"s3a"}
    named = {unquote(urlparse(s["path"]).path).lstrip("/"): s["size"] for s in view}
    visible = [k for k in visible_keys(client, s3_bucket) if k != "out/part-stray.parquet"]
    assert sorted(named) == sorted(visible)
    for key, size in named.items():
        assert client.head_object(Bucket=s3_bucket, Key=key)["ContentLength"] == size
    ids = []
    for key in named:
        data = client.get_object(Bucket=s3_bucket, Key=key)["Body"].read()
        ids.extend(pq.read_table(io.BytesIO(data)).column("id").to_pylist())
    assert sorted(ids) == list(range(ROWS))
    assert sparklink_source_ids(spark, s3_server, s3_bucket) == list(range(ROWS))  # the stray ignored


def test_the_lease_on_s3_refuses_a_second_writer_and_fences(s3_server, s3_bucket):
    """The lease object on S3, written with If-None-Match / If-Match: a query holds it until it
    expires, a finish takes over only then (its mark refuses planning until its step ends), a
    batch planned before is fenced, and a write based on a stale read is refused, not lost."""
    location = parse_location("path", f"s3://{s3_bucket}/out")
    storage = open_storage(location, s3_server.options())
    lease = OutputLease(directory=StorageDirectory(storage, "_sparklink"), timeout=60, output=location.uri())
    with lease.exclusive():
        assert lease.renew("q1", driver=current_driver(), now=1000.0) == 0
        with pytest.raises(ConcurrentWriterError, match=r"streaming query q1 owns s3://.*leaseTimeout 60s"):
            lease.ensure_free(by="the test", now=1059.0)
    finisher = OutputLease(directory=StorageDirectory(storage, "_sparklink"), timeout=60, output=location.uri())
    with finisher.exclusive():
        finisher.ensure_free(by="the test", now=1061.0)  # expired
        stale = OutputLease(directory=StorageDirectory(storage, "_sparklink"), timeout=60)
        stale.read()
        assert finisher.fence(driver=current_driver(), now=1061.0) == 1
        with pytest.raises(ConcurrentWriterError, match="sparklink.files.finish is finishing"):
            lease.renew("q1", driver=current_driver(), now=1062.0)  # no micro-batch is planned meanwhile
        assert not stale._write(stale._last)  # a write on a stale read is refused (If-Match)
    with pytest.raises(FencedError, match="micro-batch 7 was planned before"):
        check_fence(lease, [0], batch_id=7)
    with pytest.raises(FencedError):
        lease.renew("q1", driver=current_driver(), now=1070.0, planned_epochs=[0], batch_id=7)
    assert lease.renew("q1", driver=current_driver(), now=1070.0, planned_epochs=[1], batch_id=8) == 1


def test_the_spark_log_on_s3_keeps_its_scheme_compacts_and_expires(s3_server, s3_bucket):
    """Log batches on S3 through the seam: entries named by the output's URI scheme (an
    ``s3://`` writer appending to an ``s3a://`` log keeps ``s3a``), compact batches drop files
    past the retention, and the files a compact batch replaced are deleted after cleanupDelay."""
    s3a = open_storage(parse_location("path", f"s3a://{s3_bucket}/log"), s3_server.options())
    s3 = open_storage(parse_location("path", f"s3://{s3_bucket}/log"), s3_server.options())
    config = SparkLogConfig(compact_interval=3, cleanup_delay=0.0, retention=25.0)
    base = time.time()  # commit times 10 s apart from now on (the clean-up compares them with LastModified)
    for batch in range(8):
        s3a.put(f"k=1/part-{batch}", b"x" * (batch + 1))
        log = SparkLog(s3a if batch < 4 else s3, config)
        log.commit([log.status(f"k=1/part-{batch}", committed_at=base + batch * 10)], now=base + batch * 10 + 1)
    view = SparkLog(s3, config).view()  # 5.compact keeps batches 3..5 (within 25 s of batch 5), then 6, 7
    assert [e.path for e in view] == [f"s3a://{s3_bucket}/log/k%3D1/part-{b}" for b in (3, 4, 5, 6, 7)]
    assert [e.size for e in view] == [4, 5, 6, 7, 8]
    # 0 and 1 are older than the compact batch before the newest one: deleted (cleanupDelay 0)
    assert sorted(SparkLog(s3, config).log_files().values()) == ["2.compact", "3", "4", "5.compact", "6", "7"]
    assert SparkLog(s3a).relative(f"s3://{s3_bucket}/log/k=1/part-7") == "k=1/part-7"
    assert SparkLog(s3a).relative(f"s3a://{s3_bucket}/other/part-7") is None


def test_file_retention_on_s3_expires_and_deletes_through_the_seam(s3_server, s3_bucket, tmp_path):
    """``fileRetention`` on an S3 output: a fold of sparklink's manifest moves files past the
    retention to ``expired`` and deletes them (``DeleteObject``) once past the retention plus
    ``cleanupDelay`` and named by no log file; a file a log file still names stays."""
    from sparklink.files.sink.connector import FileSinkConnector
    from sparklink.sink.protocol import commit_batch
    from sparklink.testing.conformance.outputs import SEQUENCE_SCHEMA
    from sparklink.testing.conformance.sinks import write_attempt

    client = s3_server.client()
    options = {"path": f"s3://{s3_bucket}/out", "format": "parquet", "bucketAssigner": "basepath",
               "checkpointLocation": str(tmp_path / "ck"), "fileRetention": "1h", **s3_server.options()}
    for batch in range(3):
        sink = FileSinkConnector(options, SEQUENCE_SCHEMA)
        assert commit_batch(sink, batch, f"job{batch}", write_attempt(sink, batch, 0, 0, [batch], f"job{batch}"))
    assert s3_reader_ids(client, s3_bucket, "parquet") == [0, 1, 2]
    manifest = sink.manifest()
    assert manifest.spark_log is not None and manifest.retention == 3600.0
    later = time.time() + 3600 + 600 + 60  # past the retention and the log's cleanupDelay
    assert manifest.fold_before(3, now=later) == []  # expired, but the Spark log still names them
    assert manifest.expired_files() and s3_reader_ids(client, s3_bucket, "parquet") == [0, 1, 2]
    client.delete_objects(Bucket=s3_bucket, Delete={"Objects": [{"Key": k} for k in all_keys(
        client, s3_bucket, "out/_spark_metadata")]})  # as a compact batch past the retention leaves them out
    sink = FileSinkConnector(dict(options, sparkMetadata="false"), SEQUENCE_SCHEMA)
    assert commit_batch(sink, 3, "job3", write_attempt(sink, 3, 0, 0, [3], "job3"))
    deleted = sink.manifest().fold_before(4, now=later)  # the next fold deletes what no log file names
    assert len(deleted) == 4 and s3_reader_ids(client, s3_bucket, "parquet") == []  # batch 3's too: all past 1h10
    assert all(f"out/{key}" not in visible_keys(client, s3_bucket) for key in deleted)


def test_finish_on_s3_killed_at_each_step_rolls_forward(s3_server, s3_bucket, tmp_path):
    """Real SIGKILLs of ``sparklink.files.finish`` on S3, each in a process of its own (no JVM:
    finish needs no Spark session), at ``finish.after_intent``, inside the compaction of the held
    files (``compaction.after_rename``) and at ``finish.after_state``; each next finish rolls the
    last one forward: a plain S3 reader sees either the committed rows or all of them, never a
    part, and at the end every row once, no upload left. S3 settings come from the AWS
    environment (the sink's record never holds a secret)."""
    from sparklink.files.sink.connector import FileSinkConnector
    from sparklink.sink.protocol import commit_batch
    from sparklink.testing.conformance.outputs import SEQUENCE_SCHEMA
    from sparklink.testing.conformance.sinks import write_attempt

    client = s3_server.client()
    uri = f"s3://{s3_bucket}/out"
    options = {"path": uri, "format": "parquet", "bucketAssigner": "basepath", "compaction.everyNCheckpoints": "3",
               "checkpointLocation": str(tmp_path / "ck"), **s3_server.options()}
    for batch in range(5):  # batches 0-2 compacted and visible; 3-4 held
        sink = FileSinkConnector(options, SEQUENCE_SCHEMA)
        ids = [batch * 10 + i for i in range(10)]
        assert commit_batch(sink, batch, f"job{batch}", write_attempt(sink, batch, 0, 0, ids, f"job{batch}"))
    assert s3_reader_ids(client, s3_bucket, "parquet") == list(range(30))
    env = dict(os.environ, **s3_server.environment(), SPARKLINK_FAULT="finish.after_intent,compaction.after_rename,"
               "finish.after_state", SPARKLINK_FAULT_ONCE=str(tmp_path / "fired"))
    script = ("from sparklink.files.sink.finish import finish_output; from sparklink.spark.driver import current_driver; "
              f"print(finish_output({uri!r}, driver=current_driver()))")
    for expected in ("killed", "killed", "killed", "done"):
        (tmp_path / "fired").unlink(missing_ok=True)
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                             start_new_session=True, timeout=120)
        assert (run.returncode != 0) == (expected == "killed"), run.stderr[-3000:]
        env["SPARKLINK_FAULT"] = ",".join(env["SPARKLINK_FAULT"].split(",")[1:])
        assert s3_reader_ids(client, s3_bucket, "parquet") in (list(range(30)), list(range(50)))
    assert s3_reader_ids(client, s3_bucket, "parquet") == list(range(50))
    assert pending_uploads(client, s3_bucket) == []
    named = {unquote(urlparse(s["path"]).path).lstrip("/") for s in spark_log_view(client, s3_bucket, "out")}
    assert named == set(visible_keys(client, s3_bucket))
