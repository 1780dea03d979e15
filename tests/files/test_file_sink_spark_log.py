"""The file sink's Spark log (``_spark_metadata``), bounded logs and ``sparklink.files.finish``.

Log sizes are measured by driving the sink's commit protocol directly (writer, committer and
post-commit hook, as Spark calls them) for 500 micro-batches under a simulated clock: the
same code paths as a query, without 500 Spark micro-batches.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from sparklink.storage.directory import as_directory
from sparklink.storage.local import LocalStorage
from sparklink.files.sink.inspection import find_violations
from sparklink.errors import ConcurrentWriterError
from sparklink.files import finish
from sparklink.files.sink.connector import FileSinkConnector
from sparklink.files.sink.finish import finish_output
from sparklink.files.sink.manifest import FinishedFileManifest
from sparklink.files.spark_log import SparkLog
from sparklink.sink.lease import DriverIdentity, FencedError, LeaseState, OutputLease, this_machine
from sparklink.spark.driver import current_driver
from sparklink.sink.protocol import commit_batch
from sparklink.sink.writer import WriterContext
from sparklink.spark.sink_adapter import SinkCommitMessage, SinkStreamWriter
from tests.files.sink_readers import read_ids

SCHEMA = StructType([StructField("id", LongType(), False)])


def plain_rows(out: Path) -> list[int]:
    """What a reader without the log sees (pyarrow skips names starting with '.' or '_')."""
    files = [str(p) for p in out.rglob("part-*") if not any(s.startswith((".", "_")) for s in p.relative_to(out).parts)]
    return sorted(ds.dataset(files, format="parquet").to_table().column("id").to_pylist()) if files else []


def commit_one_batch(out: Path, checkpoint: Path, batch_id: int, ids: list[int], options: dict[str, str]) -> None:
    """One micro-batch as Spark runs it: a new sink on the driver, one task, the commit."""
    sink = FileSinkConnector({"path": str(out), "checkpointLocation": str(checkpoint), "format": "parquet",
                              "bucketAssigner": "basepath", **options}, SCHEMA)
    writer = sink.create_writer(WriterContext(partition_id=0, attempt_number=0, task_attempt_id=batch_id, job_id="j",
                                              batch_id=batch_id, query_id=None))
    writer.write_batch(pa.record_batch({"id": pa.array(ids, pa.int64())}))
    writer.flush()
    committables = writer.prepare_commit()
    writer.close()
    commit_batch(sink, batch_id, f"job{batch_id}", committables)


class FakeClock:
    """Commit times one second apart, ahead of the real clock (log clean-up compares them with
    file modification times)."""

    def __init__(self) -> None:
        self.now = time.time() + 1.0

    def __call__(self) -> float:
        return self.now


def spark_ids(spark, out: Path) -> list[int]:
    """What ``spark.read.parquet(out)`` reads (through ``_spark_metadata``); fails if the log
    names a file that is gone."""
    return sorted(row.id for row in spark.read.parquet(str(out)).collect())


def log_ids(out: Path) -> list[int]:
    """The rows of the files Spark's log names, read with pyarrow."""
    files = [e.local_path() for e in SparkLog(LocalStorage(out)).view()]
    return sorted(ds.dataset(files, format="parquet").to_table().column("id").to_pylist())


def log_sizes(out: Path) -> tuple[int, int]:
    return SparkLog(LocalStorage(out)).total_bytes(), FinishedFileManifest(LocalStorage(out)).total_bytes()


@pytest.fixture
def memory_dir(tmp_path):
    """A directory in memory when the machine has one (fsync is most of a commit's cost on disk)."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="sparklink-test-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("retention, batches", [("60s", 500), (None, 250)], ids=["with-retention", "without-retention"])
def test_both_logs_stay_bounded_over_500_batches(spark, memory_dir, monkeypatch, retention, batches):
    real_time, clock = time.time, FakeClock()
    monkeypatch.setattr(time, "time", clock)
    out, checkpoint = memory_dir / "out", memory_dir / "ck"
    options = {"compaction.everyNCheckpoints": "2", "spark.sql.streaming.fileSink.log.cleanupDelay": "10s"}
    if retention:
        options["fileRetention"] = retention
    sizes, spark_reads = [], 0
    for batch in range(batches):
        commit_one_batch(out, checkpoint, batch, [batch], options)
        sizes.append(sum(log_sizes(out)))
        clock.now += 1.0
        if retention and batch in (250, batches - 1):  # expired files have been deleted by now
            monkeypatch.setattr(time, "time", real_time)
            assert spark_ids(spark, out) == log_ids(out)  # Spark's reader: no entry names a deleted file
            monkeypatch.setattr(time, "time", clock)
            spark_reads += 1
    live = FinishedFileManifest(LocalStorage(out)).finished_files()
    spark_view = {os.path.relpath(e.local_path(), out) for e in SparkLog(LocalStorage(out)).view()}
    if retention:
        # 60 s of files at one batch a second, two batches per compacted file: about 30 live files,
        # plus the expired ones waiting for the clean-up delay and their log files
        assert len(live) <= 60 and max(sizes[100:]) < 150_000, (len(live), max(sizes[100:]))
        assert max(sizes[400:]) <= 1.1 * max(sizes[100:200]), f"log size keeps growing with a retention: {sizes[::50]}"
        assert spark_view <= live | FinishedFileManifest(LocalStorage(out)).expired_files()
        assert len(plain_rows(out)) < 200 and spark_reads == 2  # expired files were deleted
    else:
        assert len(live) == batches // 2 and spark_view == live  # every compacted file, each once
        assert plain_rows(out) == list(range(batches))
        spark_bytes = [SparkLog(LocalStorage(out)).total_bytes()]
        assert spark_bytes[0] / len(live) < 700, "Spark's log holds more than the live files"
    violations, _ = find_violations(out)
    assert violations == []


def test_finish_makes_held_files_visible_exactly_once_after_kills(tmp_path):
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    options = {"compaction.everyNCheckpoints": "3"}
    for batch in range(5):  # batches 0-2 compacted and visible; 3-4 held
        commit_one_batch(out, checkpoint, batch, [batch * 10 + i for i in range(10)], options)
    assert plain_rows(out) == list(range(30))
    env = dict(os.environ, SPARKLINK_FAULT="finish.after_intent,compaction.after_rename,finish.after_state",
               SPARKLINK_FAULT_ONCE=str(tmp_path / "fired"))
    script = ("from sparklink.files.sink.finish import finish_output; from sparklink.spark.driver import current_driver; "
              f"print(finish_output({str(out)!r}, driver=current_driver()))")
    for expected in ("killed", "killed", "killed", "done"):
        Path(tmp_path / "fired").unlink(missing_ok=True)
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                             start_new_session=True, timeout=120)
        assert (run.returncode != 0) == (expected == "killed"), run.stderr[-3000:]
        env["SPARKLINK_FAULT"] = ",".join(env["SPARKLINK_FAULT"].split(",")[1:])
        assert plain_rows(out) in (list(range(30)), list(range(50)))  # never a part of the finish
    assert plain_rows(out) == list(range(50))
    assert finish(None, out).files == 0  # a second finish has nothing to do
    assert find_violations(out)[0] == []
    commit_one_batch(out, checkpoint, 5, [50], options)  # the query goes on after a finish
    commit_one_batch(out, checkpoint, 6, [51], options)
    commit_one_batch(out, checkpoint, 7, [52], options)
    assert plain_rows(out) == list(range(53))


def test_available_now_run_with_compaction_then_finish(spark, tmp_path):
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    (spark.readStream.format("sparklink.sequence").option("numSplits", 2).option("rowsPerSplit", 2500)
     .option("maxRowsPerTrigger", 1000).load().selectExpr("id")
     .writeStream.format("sparklink.files").option("path", str(out)).option("checkpointLocation", str(checkpoint))
     .option("format", "parquet").option("bucketAssigner", "basepath").option("compaction.everyNCheckpoints", "2")
     .trigger(availableNow=True).start().awaitTermination())
    before = plain_rows(out)
    assert len(before) == 4000  # the fifth batch is held for compaction
    assert spark.read.parquet(str(out)).count() == 4000
    result = finish(spark, out)
    assert result.files == 1
    assert plain_rows(out) == list(range(5000))
    assert sorted(r.id for r in spark.read.parquet(str(out)).collect()) == list(range(5000))
    assert find_violations(out)[0] == []


def test_finish_is_refused_while_the_owning_query_runs(spark, tmp_path):
    out = tmp_path / "out"
    query = (spark.readStream.format("sparklink.sequence").option("numSplits", 1).option("rowsPerSplit", 10).load()
             .selectExpr("id").writeStream.format("sparklink.files").option("path", str(out))
             .option("checkpointLocation", str(tmp_path / "ck")).option("format", "parquet")
             .option("bucketAssigner", "basepath").trigger(processingTime="1 second").start())
    try:
        query.processAllAvailable()
        with pytest.raises(ConcurrentWriterError, match=r"query .* is running in this session and owns .*stop it"):
            finish(spark, out)
    finally:
        query.stop()
    assert finish(spark, out).files == 0


def test_spark_log_is_not_switched_off_on_an_output_that_has_one(tmp_path):
    out = tmp_path / "out"
    commit_one_batch(out, tmp_path / "ck", 0, [1], {})
    with pytest.raises(Exception, match="sparkMetadata.*is false"):
        commit_one_batch(out, tmp_path / "ck", 1, [2], {"sparkMetadata": "false"})


def test_lease_is_held_until_it_expires_or_its_driver_is_gone(tmp_path):
    lease = OutputLease(directory=as_directory(tmp_path / "_sparklink"), timeout=60)
    with lease.exclusive():
        assert lease.renew("q1", driver=current_driver(), now=1000.0) == 0
        with pytest.raises(ConcurrentWriterError, match=r"streaming query q1 owns .*holds it until .*leaseTimeout 60s"):
            lease.ensure_free(by="the test", now=1059.0)
        lease.ensure_free(by="the test", now=1061.0)  # expired
        assert lease.fence(driver=current_driver(), now=1061.0) == 1  # taken over: the epoch fences
        with pytest.raises(ConcurrentWriterError, match="sparklink.files.finish is finishing"):
            lease.renew("q1", driver=current_driver(), now=1100.0)  # no micro-batch is planned while a finish holds the output
    with lease.exclusive():  # the finish's step ended: its mark is released
        assert lease.renew("q1", driver=current_driver(), now=1100.0) == 1  # a renewal keeps the epoch
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    gone = DriverIdentity(host="here", machine=this_machine(), pid=ended.pid, started="0")
    elsewhere = DriverIdentity(host="there", machine="another-boot/pid:[1]", pid=ended.pid, started="0")
    state = LeaseState(query_id="q1", epoch=0, renewed_at=1000.0, expires_at=1060.0, driver=gone)
    assert not state.holds(now=1001.0)  # its driver ended on this machine: nothing to wait for
    assert replace(state, driver=elsewhere).holds(now=1001.0)  # another machine's driver is waited out
    assert not replace(state, driver=elsewhere).holds(now=1060.0)
    assert replace(state, driver=current_driver()).holds(now=1001.0)


def run_micro_batch(out: Path, checkpoint: Path, batch_id: int, ids: list[int], options: dict[str, str]):
    """Plan one micro-batch as Spark does (the stream writer built on the driver renews the
    lease) and run its task; returns the commit to call."""
    sink = FileSinkConnector({"path": str(out), "checkpointLocation": str(checkpoint), "bucketAssigner": "basepath",
                              **options}, SCHEMA)
    stream_writer = SinkStreamWriter(sink, query_id="q1")
    writer = sink.create_writer(WriterContext(partition_id=0, attempt_number=0, task_attempt_id=batch_id, job_id="j",
                                              batch_id=batch_id, query_id="q1"))
    writer.write_batch(pa.record_batch({"id": pa.array(ids, pa.int64())}))
    writer.flush()
    message = SinkCommitMessage(partition_id=0, attempt_number=0, query_id="q1", committables=writer.prepare_commit(),
                                run_id="run1", lease_epoch=sink.lease_epoch)
    writer.close()
    return lambda: stream_writer.commit([message], batch_id)


def json_rows(out: Path) -> list[int]:
    return read_ids(out, "json")


def test_finish_fences_a_micro_batch_planned_before_it(tmp_path):
    """A query still running after its lease expired: finish publishes the carried file as it
    was committed (a copy, so the batch's appends to it stay hidden) and the batch planned
    before the finish is refused at its commit; planned again, it commits once."""
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    options = {"format": "json", "rollingPolicy": "default"}  # one file carried across batches
    run_micro_batch(out, checkpoint, 0, [0, 1, 2], options)()
    assert json_rows(out) == []  # carried, hidden
    stale_commit = run_micro_batch(out, checkpoint, 1, [3, 4], options)  # appended to the carried file
    result = finish_output(out, driver=current_driver())  # the lease's driver is this process: finished at once
    assert (result.copied, result.compacted) == (1, 0)  # a copy of the carried file: no compaction is configured
    assert json_rows(out) == [0, 1, 2]
    with pytest.raises(FencedError, match="micro-batch 1 was planned before sparklink.files.finish"):
        stale_commit()
    assert json_rows(out) == [0, 1, 2]
    run_micro_batch(out, checkpoint, 1, [3, 4], options)()  # Spark replans the batch after the restart
    finish_output(out, driver=current_driver())
    assert json_rows(out) == [0, 1, 2, 3, 4]
    assert find_violations(out)[0] == []
