"""The example transactional directory sink through Spark: df.write, df.writeStream, refusals,
and a failed batch job whose staged output is removed. (A streaming task failing on its first
attempt is the conformance suite's, run against this sink from examples/conformance/.)"""

import os

import pyarrow.dataset as ds
import pytest

from tests.jobs_sdk import sequence_to_directory_batch


def visible_ids(path):
    return sorted(ds.dataset(str(path), format="parquet").to_table().column("id").to_pylist())


def visible_files(path):
    return sorted(n for n in os.listdir(path) if not n.startswith((".", "_")))


def test_batch_write_commits_when_the_job_commits(spark, tmp_path):
    df = spark.read.format("sparklink.sequence").option("numSplits", 2).option("rowsPerSplit", 50).load()
    df.write.format("sparklink.directory").option("path", str(tmp_path)).mode("append").save()
    df.write.format("sparklink.directory").option("path", str(tmp_path)).mode("append").save()
    assert visible_ids(tmp_path) == sorted(list(range(100)) * 2)
    assert len(list((tmp_path / "_sparklink" / "commits").glob("job-*.json"))) == 2


def test_batch_overwrite_is_refused(spark, tmp_path):
    df = spark.read.format("sparklink.sequence").option("rowsPerSplit", 5).load()
    with pytest.raises(Exception, match="does not support mode 'overwrite'"):
        df.write.format("sparklink.directory").option("path", str(tmp_path)).mode("overwrite").save()


def test_second_query_on_the_same_output_is_refused(spark, tmp_path):
    def start(checkpoint):
        return (spark.readStream.format("sparklink.sequence").option("rowsPerSplit", 20).load()
                .writeStream.format("sparklink.directory").option("path", str(tmp_path / "out"))
                .option("checkpointLocation", str(tmp_path / checkpoint)).trigger(availableNow=True).start())

    start("ck1").awaitTermination()
    second = start("ck2")
    with pytest.raises(Exception, match="belongs to streaming query"):
        second.awaitTermination()
    assert visible_ids(tmp_path / "out") == list(range(40))


def test_failed_batch_job_leaves_nothing_visible_and_the_next_job_is_exact(armed, tmp_path, spark):
    """A task fails on every attempt, so the job fails: the failed task's abort removes its
    staged file and the job's abort removes those of the tasks that had finished. A task Spark
    cancels while it is still writing may leave a staged file behind, but only in the hidden
    _staging folder."""
    out = tmp_path / "out"
    with armed("writer.after_write:raise"), pytest.raises(Exception, match="fault injected at 'writer.after_write'"):
        sequence_to_directory_batch(spark, out=str(out))
    assert visible_files(out) == []
    assert all("_staging" in p.relative_to(out).parts for p in out.rglob("*.parquet"))
    sequence_to_directory_batch(spark, out=str(out))  # the next job, in the test's own session
    assert visible_ids(out) == list(range(200))
