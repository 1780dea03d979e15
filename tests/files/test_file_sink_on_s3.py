"""The file sink with its output on S3 (SeaweedFS started by the session's ``s3_server``).

Part files are multipart uploads completed by the commit (sparklink.files.sink.s3_parts). The
published conformance suite runs against it from tests/conformance/test_sink_conformance.py,
the same tests as on local disk (parametrized over both stores). Here: nothing of an uncommitted batch is ever listed, a carried file of several parts across
batches and retries, a ``df.write`` job on S3 and the abort of a failed one, the S3 requests of
one micro-batch (quoted in docs/object-stores.md), and the options refused on S3.
"""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pytest

from sparklink.errors import ConfigError, FaultInjected
from sparklink.faults import ENV_FAULT
from sparklink.files.sink.connector import FileSinkConfig, FileSinkConnector
from sparklink.files.sink.part_files import PartFile
from sparklink.storage.s3_recoverable import upload_of
from sparklink.sink.protocol import commit_batch
from sparklink.testing.conformance.sinks import write_attempt
from sparklink.testing.faults import ENV_BATCH
from tests.files.s3_readers import PREFIX, pending_uploads, s3_reader_ids
from tests.files.s3_readers import all_keys as _all_keys
from tests.files.s3_readers import visible_keys as _visible_keys


@pytest.fixture(scope="module")
def s3_client(s3_server):
    """A plain S3 client of the server for this module's checks (a boto3 client costs ~0.2 s)."""
    return s3_server.client()


# ---------------------------------------------------------------------------------- the data path


@pytest.fixture
def s3_options(s3_server, s3_bucket, tmp_path):
    return {"path": f"s3a://{s3_bucket}/{PREFIX}", "format": "parquet", "bucketAssigner": "basepath",
            "checkpointLocation": str(tmp_path / "ck"), **s3_server.options()}


def _sink(options) -> FileSinkConnector:
    from sparklink.testing.conformance.outputs import SEQUENCE_SCHEMA

    return FileSinkConnector(options, SEQUENCE_SCHEMA)


def test_nothing_uncommitted_is_listed_and_recovery_leaves_no_upload(s3_server, s3_bucket, s3_options, monkeypatch):
    """Staged files are uploads (parts up, nothing listed); a commit that dies after its state
    lists nothing either; the replay's commit rolls the logged batch forward, completes it
    once and aborts every upload no commit names."""
    client = s3_server.client()
    sink = _sink(s3_options)
    failed = sink.create_writer(_context(0, 0))  # a task attempt that fails: Spark calls its abort
    failed.write_batch(_rows([1, 2, 3]))
    failed.flush()
    assert len(pending_uploads(client, s3_bucket)) == 1
    failed.abort()
    staged = write_attempt(sink, 0, 0, 1, [1, 2, 3], "job-0") + write_attempt(sink, 0, 1, 0, [4, 5], "job-0")
    assert len(pending_uploads(client, s3_bucket)) == 2
    assert _visible_keys(client, s3_bucket) == []
    uploads = [upload_of(PartFile.from_json(c)) for c in staged]
    assert all(u.parts and u.key.startswith("part-") for u in uploads)  # at the finished key, parts uploaded
    monkeypatch.setenv(ENV_FAULT, "filesink.after_state:raise")
    monkeypatch.setenv(ENV_BATCH, "0")
    with pytest.raises(FaultInjected):
        commit_batch(sink, 0, "job-0", staged, ["q1"])
    monkeypatch.delenv(ENV_FAULT)
    assert _visible_keys(client, s3_bucket) == []  # logged and stated, nothing completed yet
    write_attempt(_sink(s3_options), 1, 0, 0, [9], "job-x")  # a task of a run that died: never committed
    # the restarted query: its first commit restores (rolls batch 0 forward), then Spark's replay of 0 is discarded
    sink = _sink(s3_options)
    replay = write_attempt(sink, 0, 0, 0, [1, 2, 3, 4, 5], "job-1")
    assert commit_batch(sink, 0, "job-1", replay, ["q1"]) is False
    assert s3_reader_ids(client, s3_bucket, "parquet") == [1, 2, 3, 4, 5]
    batch = write_attempt(sink, 1, 0, 0, [6], "job-2")
    assert commit_batch(sink, 1, "job-2", batch, ["q1"]) is True
    assert s3_reader_ids(client, s3_bucket, "parquet") == [1, 2, 3, 4, 5, 6]
    assert pending_uploads(client, s3_bucket) == []  # the dead run's upload aborted after the commit
    # completing a committed batch again is a no-op (the object's size and ETag recognise it)
    sink.create_committer().apply(sink.state_store().get(0))
    assert s3_reader_ids(client, s3_bucket, "parquet") == [1, 2, 3, 4, 5, 6]


def test_a_carried_file_keeps_its_upload_and_tail_across_batches_retries_and_the_final_roll(s3_server, s3_bucket,
                                                                                           s3_options):
    """A carried JSON file of more than one part: its full parts stay in the upload, the rest in
    a tail object; a failed attempt that continued it leaves it as committed, the retry resumes
    with part numbers of its own; the driver's roll uploads the tail as the last part. Every id
    once, in order, nothing left behind."""
    from sparklink.storage.s3_recoverable import ATTEMPT_SLOTS

    client = s3_server.client()
    options = dict(s3_options, format="json", rollingPolicy="default", rolloverInterval="1h",
                   inactivityInterval="1h", **{"s3.partSize": "5MB"})
    rows = 260_000  # about 6.5 MiB of JSON lines: one full part and a tail per batch
    sink = _sink(options)
    first = write_attempt(sink, 0, 0, 0, list(range(rows)), "job0")
    assert commit_batch(sink, 0, "job0", first, ["q1"]) is True
    carried = sink.state_store().get(0).in_progress
    assert len(carried) == 1 and _visible_keys(client, s3_bucket) == []
    record = upload_of(carried[0])
    assert [p.number for p in record.parts] == [1] and 0 < record.tail_size < 5 * 1024 * 1024
    sink = _sink(options)
    sink.prepare_tasks()
    failed = sink.create_writer(_context(1, 0, attempt=0))
    failed.write_batch(_rows(range(rows, 2 * rows)))
    failed.flush()
    failed.abort()  # Spark retries the task: the carried file is as batch 0 committed it
    retry = write_attempt(sink, 1, 0, 1, list(range(rows, 2 * rows)), "job1")
    numbers = [p.number for p in upload_of(PartFile.from_json(retry[0])).parts]
    # the committed part 1, then attempt 1's slot: 1 + 1 + 1, then every ATTEMPT_SLOTS-th number
    assert len(numbers) >= 2 and numbers == [1] + list(range(3, 3 + ATTEMPT_SLOTS * (len(numbers) - 1), ATTEMPT_SLOTS))
    assert commit_batch(sink, 1, "job1", retry, ["q1"]) is True
    tails = [k for k in _all_keys(client, s3_bucket) if ".tail-" in k]
    assert len(tails) == 1  # the superseded tail of batch 0 and the failed attempt's are deleted
    sink = _sink(dict(options, rolloverInterval="0s"))  # every carried file rolls at the next commit
    last = write_attempt(sink, 2, 1, 0, [2 * rows], "job2")  # another partition: the carried file is not continued
    assert commit_batch(sink, 2, "job2", last, ["q1"]) is True
    [key] = [k for k in _visible_keys(client, s3_bucket) if k.endswith(record.key)]
    lines = client.get_object(Bucket=s3_bucket, Key=key)["Body"].read().decode().splitlines()
    assert [json.loads(line)["id"] for line in lines] == list(range(2 * rows))
    assert s3_reader_ids(client, s3_bucket, "json") == list(range(2 * rows + 1))
    assert pending_uploads(client, s3_bucket) == []
    assert [k for k in _all_keys(client, s3_bucket) if ".tail-" in k] == []


def _rows(ids) -> pa.RecordBatch:
    ids = list(ids)
    return pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64()), "split": pa.array([0] * len(ids), pa.int32())})


def test_s3_requests_of_one_micro_batch(s3_server, s3_options):
    """The requests of a steady-state micro-batch of two tasks, one file each: the tasks'
    (executor side) and those of the Python worker that commits (driver side: the
    per-micro-batch check, then the commit; the planning repeats the check's 8 reads).
    docs/object-stores.md quotes these counts."""
    from sparklink.sink.recovery import prepare_micro_batch
    from sparklink.spark.driver import current_driver

    sink = _sink(s3_options)
    for batch in range(2):
        prepare_micro_batch(sink, query_id="q1", driver=current_driver())  # the lease is taken, then renewed within its timeout
        staged = write_attempt(sink, batch, 0, 0, [batch], f"job{batch}")
        commit_batch(sink, batch, f"job{batch}", staged, ["q1"])

    sink = _sink(s3_options)
    requests: Counter[str] = Counter()

    def count(model, **_):
        requests.update([model.name])

    events = sink.storage().client.meta.events  # the process's client: the sink's and its writers'
    events.register("before-call.s3", count)
    try:
        staged = []
        for partition in range(2):
            writer = sink.create_writer(_context(2, partition))
            writer.write_batch(pa.RecordBatch.from_pydict({"id": pa.array([partition], pa.int64()),
                                                          "split": pa.array([partition], pa.int32())}))
            writer.flush()
            staged += writer.prepare_commit()
            writer.close()
        tasks, requests = requests, Counter()
        prepare_micro_batch(sink, query_id="q1", driver=current_driver())
        commit_batch(sink, 2, "job2", staged, ["q1"])  # its post-commit sweeps stale uploads
        driver = requests
    finally:
        events.unregister("before-call.s3", count)
    print(f"S3 requests of one micro-batch: tasks {dict(tasks)}, driver {dict(driver)}")
    assert tasks == Counter(CreateMultipartUpload=2, UploadPart=2)
    assert driver["CompleteMultipartUpload"] == 2 and driver["ListMultipartUploads"] == 1
    # the log entry created and finished, the state created, the _spark_metadata batch (the lease, renewed
    # moments ago by this driver, is only read)
    assert driver["PutObject"] == 4
    assert sum(driver.values()) <= 33, dict(driver)  # 29 measured: 8 of them the per-micro-batch check


def _context(batch_id, partition, attempt=0):
    from sparklink.sink.writer import WriterContext

    return WriterContext(partition_id=partition, attempt_number=attempt, task_attempt_id=partition,
                         job_id=f"job{batch_id}", batch_id=batch_id, query_id="q1")


def test_a_file_finished_alone_over_the_copy_limit_is_copied_part_by_part_and_rolled_forward(
        s3_server, s3_bucket, s3_options, monkeypatch):
    """With compaction a file finished alone is copied from its hidden name; above S3's 5 GB
    limit of one CopyObject (lowered here to 1 MiB) the copy is a multipart upload of
    UploadPartCopy ranges of ``s3.partSize``. A driver killed mid-copy leaves an upload at the
    finished key that no commit names: the roll-forward copies again (the bytes whole, once)
    and its sweep aborts the dead copy's upload; verify finds the output sound."""
    import sparklink.storage.s3 as s3_module
    from sparklink.files.sink.inspection import find_violations

    monkeypatch.setattr(s3_module, "MAX_COPY_OBJECT_SIZE", 1024 * 1024)
    client = s3_server.client()
    options = dict(s3_options, format="json", rollingPolicy="checkpoint",
                   **{"compaction.everyNCheckpoints": "1", "s3.partSize": "5MB"})
    rows = 240_000  # about 5.5 MiB of JSON lines: two copy parts
    sink = _sink(options)
    staged = write_attempt(sink, 0, 0, 0, list(range(rows)), "job0")
    monkeypatch.setenv(ENV_FAULT, "filesink.after_state:raise")
    monkeypatch.setenv(ENV_BATCH, "0")
    with pytest.raises(FaultInjected):
        commit_batch(sink, 0, "job0", staged, ["q1"])
    monkeypatch.delenv(ENV_FAULT)
    [alone] = sink.state_store().get(0).finish
    storage = sink.storage()
    sink.part_files().commit_hidden(alone)  # what the killed commit did before its copy
    dead_copy = storage.start_upload(alone.final)
    storage.upload_part(alone.final, dead_copy, 1, b"x" * (5 * 1024 * 1024))  # the copy's first part, never completed
    assert _visible_keys(client, s3_bucket) == []
    sink = _sink(options)  # the restarted query: its first commit rolls batch 0 forward
    requests: Counter[str] = Counter()

    def count(model, **_):
        requests.update([model.name])

    events = sink.storage().client.meta.events
    events.register("before-call.s3", count)
    try:
        assert commit_batch(sink, 0, "job1", [], ["q1"]) is False
    finally:
        events.unregister("before-call.s3", count)
    assert requests["UploadPartCopy"] == 2 and requests["CopyObject"] == 0, dict(requests)
    assert _visible_keys(client, s3_bucket) == [f"{PREFIX}/{alone.final}"]
    assert s3_reader_ids(client, s3_bucket, "json") == list(range(rows))
    assert pending_uploads(client, s3_bucket) == []  # the dead copy's upload is aborted by the sweep
    assert find_violations(options["path"], key="id", options=s3_server.options()) == ([], {"files": 1, "rows": rows})


def test_a_batch_write_to_s3_and_the_abort_of_a_failed_job(s3_server, s3_bucket, tmp_path):
    """A ``df.write`` job to s3a:// (its tasks and its commit as Spark's adapter calls them; the
    adapter in Spark itself: tests/files/test_bad_input.py and tests/files/test_file_sink.py on
    local disk) lands every row once; a failed job leaves no upload, and a streaming sweep never
    aborts a running job's uploads (their writer uids are the job's)."""
    client = s3_server.client()
    options = {"path": f"s3a://{s3_bucket}/{PREFIX}", "format": "json", "bucketAssigner": "basepath",
               **s3_server.options()}
    job = _sink(options)
    staged = write_attempt(job, None, 0, 0, list(range(0, 50, 2)), "job-ok")
    staged += write_attempt(job, None, 1, 0, list(range(1, 50, 2)), "job-ok")
    assert pending_uploads(client, s3_bucket) and s3_reader_ids(client, s3_bucket, "json") == []
    assert commit_batch(job, None, "job-ok", staged) is True
    assert s3_reader_ids(client, s3_bucket, "json") == list(range(50))
    sink = _sink(options)
    failed = write_attempt(sink, None, 0, 0, [100], "job-failed")
    write_attempt(sink, None, 1, 0, [101], "job-failed")  # a task that died before reporting
    other_job = write_attempt(sink, None, 0, 0, [200], "job-running")
    streaming = _sink(dict(options, checkpointLocation=str(tmp_path / "ck")))
    streaming.sweep_after(streaming.state_store().latest_before(None))
    assert len(pending_uploads(client, s3_bucket)) == 3  # job uploads are not a query's orphans
    sink.abort_job("job-failed", failed)
    assert [u for u in pending_uploads(client, s3_bucket)] == \
        [f"{PREFIX}/{upload_of(PartFile.from_json(other_job[0])).key} "
         f"(upload {upload_of(PartFile.from_json(other_job[0])).upload_id})"]
    assert s3_reader_ids(client, s3_bucket, "json") == list(range(50))


@pytest.mark.parametrize(("options", "refused"), [
    ({"s3.partSize": "4MB"}, "s3.partSize"),
], ids=["part-size"])
def test_what_is_not_served_on_s3_is_refused_at_start_naming_the_option(options, refused):
    with pytest.raises(ConfigError, match=rf"option '{refused}'"):
        _sink({"path": "s3://bucket/out", "checkpointLocation": "/tmp/ck-not-used", "s3.endpoint": "http://127.0.0.1:9",
               **options})


def test_s3_options_on_a_local_path_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"option 's3.partSize': applies to s3:// and s3a:// paths"):
        FileSinkConfig.from_options({"path": str(tmp_path / "out"), "s3.partSize": "8MB"})
