"""Spark's own readers on the file sink's output, across driver crashes (SIGKILL of the driver
process group at named commit steps, triggered by commit progress, never by timers).

* While a sink driver runs, is killed and restarted, the test's own Spark session polls
  ``spark.read.parquet(output)`` (through ``_spark_metadata``): every poll sees whole
  micro-batches only (100 rows each, or 200 with compaction every 2 batches), never a row
  twice; at the end every row once.
* A chain Spark file sink -> sparklink file source (through Spark's log) -> sparklink file sink:
  Spark's sink driver SIGKILLed once (it leaves files its log never named, which the source must
  not read), the chain crashed once inside the sparklink sink's commit (simulated in the test's
  session: the file sink's real kills are tests/files/test_file_sink_exactly_once.py's): every
  row exactly once at the end.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sparklink.storage.directory import as_directory
from sparklink.files import finish
from tests.files.jobs_sink import await_query, files_to_files, spark_file_sink, start_stream_to_files
from tests.files.sink_readers import assert_exactly_once, hidden_files, read_ids

JOB = "tests.files.jobs_sink:stream_to_files"
ROWS, PER_BATCH = 500, 100
SCHEMA = "id LONG, split LONG, kind STRING, event_time TIMESTAMP, label STRING"

pytestmark = pytest.mark.slow


def poll(spark, out: Path, step: int, seen_counts: list[int]) -> None:
    """One read through Spark's log: whole micro-batches only, no duplicate."""
    if not (out / "_spark_metadata").is_dir():
        return
    ids = [row.id for row in spark.read.schema(SCHEMA).parquet(str(out)).select("id").collect()]
    assert len(ids) == len(set(ids)), f"a row seen twice by Spark's reader: {len(ids) - len(set(ids))} duplicates"
    assert len(ids) % step == 0, f"Spark's reader saw part of a micro-batch: {len(ids)} rows"
    seen_counts.append(len(ids))


def poll_while(running, spark, out: Path, step: int, seen: list[int]) -> None:
    """Poll Spark's reader while ``running()``, then once more (the state the run left)."""
    while running():
        poll(spark, out, step, seen)
        time.sleep(0.1)  # the interval between polls; kills follow commit steps, not this clock
    poll(spark, out, step, seen)


# one kill, inside a commit that compacts (the renames of part files between two readers' polls are
# crashed at by simulation: conformance filesink.after_first_rename, with _spark_metadata on)
@pytest.mark.parametrize("options, point, step", [
    ({"format": "parquet", "bucketAssigner": "basepath", "compaction.everyNCheckpoints": "2"},
     "compaction.after_rename", 2 * PER_BATCH),
], ids=["compaction"])
def test_spark_reader_sees_whole_batches_across_driver_kills(spark, driver, tmp_path, options, point, step):
    """A driver SIGKILLed inside its fourth commit, then the restart in this test's session
    (a clean run needs no driver of its own), while this session polls through the log."""
    out = tmp_path / "out"
    args = {"out": str(out), "checkpoint": str(tmp_path / "ck"), "rows": ROWS, "per_trigger": PER_BATCH,
            "options": options}
    seen: list[int] = []
    process = driver.start(JOB, args, env={"SPARKLINK_FAULT": f"{point}:kill",
                                           "SPARKLINK_FAULT_ONCE": str(tmp_path / "fired"),
                                           "SPARKLINK_FAULT_BATCH": "3"})
    poll_while(lambda: process.process.poll() is None, spark, out, step, seen)
    killed = process.wait(timeout=60)
    assert killed.killed and (tmp_path / "fired").exists(), killed.output
    query = start_stream_to_files(spark, **args)
    poll_while(lambda: query.isActive, spark, out, step, seen)
    await_query(query)
    finish(spark, out)  # compaction holds the last batch: finish it (at once: the query of this session stopped)
    poll(spark, out, step if "compaction.everyNCheckpoints" not in options else PER_BATCH, seen)
    assert seen[-1] == ROWS and seen == sorted(seen), f"polls saw {seen}; killed driver's log: {killed.output[-3000:]}"
    assert_exactly_once(out, "parquet", ROWS)
    assert hidden_files(out) == []


def test_chain_spark_sink_to_sparklink_source_and_sink_with_kills(spark, driver, armed, tmp_path):
    """Spark's sink driver SIGKILLed once, the chain's commit crashed once; the finishing runs in
    this test's session."""
    from sparklink.testing import error_text

    first, second = tmp_path / "spark_out", tmp_path / "out"
    spark_args = {"out": str(first), "checkpoint": str(tmp_path / "ck1"), "rows": ROWS, "per_trigger": PER_BATCH}
    chain_args = {"source": str(first), "out": str(second), "checkpoint": str(tmp_path / "ck2"),
                  "options": {"format": "parquet", "bucketAssigner": "basepath"}}
    # Spark's sink, killed as soon as its log holds batch 1
    process = driver.start("tests.files.jobs_sink:spark_file_sink", spark_args)
    process.kill_when(lambda: (first / "_spark_metadata" / "1").exists(), what="Spark's log batch 1")
    # the chain reads what Spark's log holds, one file per micro-batch; crashed in its second commit
    with armed("filesink.after_renames:raise@1", once_marker=str(tmp_path / "fired")), \
            pytest.raises(Exception) as crashed:
        files_to_files(spark, **chain_args)
    assert "filesink.after_renames" in error_text(crashed.value), error_text(crashed.value)[-3000:]
    spark_file_sink(spark, **spark_args)
    files_to_files(spark, **chain_args, max_files=4)
    assert_exactly_once(second, "parquet", ROWS)
    assert hidden_files(second) == []


def test_finish_is_refused_while_another_driver_runs_the_query(spark, driver, tmp_path):
    """finish from this process while the query runs in another driver: refused, naming the
    query; after that driver is SIGKILLed, its lease is observably released (the lease names
    the driver's process, which is gone) and finish publishes the carried files; the restarted
    query then writes every row exactly once."""
    from sparklink.errors import ConcurrentWriterError
    from sparklink.sink.lease import OutputLease
    from sparklink.spark.checkpoint import query_id_from_checkpoint
    from sparklink.testing.drivers import logged_batches
    from tests.files.jobs_sink import stream_to_files

    out, checkpoint, commits = tmp_path / "out", tmp_path / "ck", tmp_path / "out" / "_sparklink" / "commits"
    options = {"format": "json", "bucketAssigner": "basepath", "rollingPolicy": "default"}  # files carried
    args = {"out": str(out), "checkpoint": str(checkpoint), "rows": 2000, "per_trigger": PER_BATCH,
            "options": options}
    process = driver.start("tests.files.jobs_sink:stream_until_killed", args)
    wait_until(lambda: logged_batches(commits) >= 2, process, "2 committed micro-batches")
    query_id = query_id_from_checkpoint(checkpoint)
    with pytest.raises(ConcurrentWriterError, match=f"streaming query {query_id} owns .*Stop that query"):
        finish(spark, out)
    process.kill_when(lambda: logged_batches(commits) >= 3, what="3 committed micro-batches")
    lease = OutputLease(directory=as_directory(out / "_sparklink"))
    wait_until(lambda: not lease.read().holds(now=time.time()), None, "the killed driver's lease to be released")
    assert finish(spark, out).files >= 1  # the carried file(s) of the last commit
    committed = read_ids(out, "json")
    assert len(committed) == len(set(committed)) and len(committed) >= 3 * PER_BATCH, committed[:10]
    stream_to_files(spark, out=str(out), checkpoint=str(checkpoint), rows=2000, options=options,
                    per_trigger=1000)  # the restart, in this session
    finish(spark, out)  # at once: the query of this session has stopped
    assert_exactly_once(out, "json", 2000)
    assert hidden_files(out) == []


def wait_until(condition, process, what: str, timeout: float = 240) -> None:
    """Block until ``condition()`` holds (observable progress), or fail with the driver's log."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.process.poll() is not None:
            pytest.fail(f"driver ended before {what}: {process.log_tail()}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout:.0f}s" + (f": {process.log_tail()}" if process else ""))
        time.sleep(0.05)
