"""``df.write`` ``mode("overwrite")`` and ``replaceWhere`` into sparklink.delta (Delta's Spark
connector names them so): one table version that removes the old rows and adds the new ones,
read back by delta-rs."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sparklink.delta.sink import DeltaSink
from sparklink.errors import ConfigError
from sparklink.sink import WriterContext
from sparklink.sink.protocol import commit_batch
from tests.delta.readers import unreferenced_files

SCHEMA = StructType([StructField("id", LongType()), StructField("day", StringType())])


def job(path: str, rows: list[tuple[int, str]], *, overwrite: bool, job_id: str, **options: str) -> None:
    """A df.write job as Spark's adapter runs it (one task), Spark-free."""
    sink = DeltaSink({"path": path, "partitionColumns": "day", **options}, SCHEMA)
    if overwrite:
        sink.prepare_overwrite()
    sink.prepare_tasks()
    writer = sink.create_writer(WriterContext(partition_id=0, attempt_number=0, task_attempt_id=0, job_id=job_id,
                                              batch_id=None, query_id=None))
    writer.write_batch(pa.RecordBatch.from_pydict({"id": pa.array([r[0] for r in rows], pa.int64()),
                                                   "day": pa.array([r[1] for r in rows])}))
    writer.flush()
    committables = writer.prepare_commit()
    writer.close()
    try:
        commit_batch(sink, None, job_id, committables)
    except Exception:
        sink.abort_job(job_id, committables)
        raise


def rows(path: str) -> list[tuple[int, str]]:
    return sorted((r["id"], r["day"]) for r in DeltaTable(path).to_pyarrow_table().to_pylist())


def test_overwrite_replaces_every_row_in_one_version(tmp_path):
    path = str(tmp_path / "t")
    job(path, [(1, "a"), (2, "b")], overwrite=False, job_id="j1")
    version = DeltaTable(path).version()
    job(path, [(3, "c")], overwrite=True, job_id="j2")
    assert rows(path) == [(3, "c")]
    assert DeltaTable(path).version() == version + 1
    assert DeltaTable(path).history(1)[0]["operation"] == "WRITE"


def test_replace_where_replaces_only_the_matching_rows_and_refuses_rows_outside_it(tmp_path):
    path = str(tmp_path / "t")
    job(path, [(1, "a"), (2, "a"), (3, "b")], overwrite=False, job_id="j1")
    job(path, [(9, "a")], overwrite=True, job_id="j2", replaceWhere="day = 'a'")
    assert rows(path) == [(3, "b"), (9, "a")]
    version = DeltaTable(path).version()
    with pytest.raises(ConfigError, match="replaceWhere.*failed validation"):
        job(path, [(10, "b")], overwrite=True, job_id="j3", replaceWhere="day = 'a'")
    assert DeltaTable(path).version() == version and rows(path) == [(3, "b"), (9, "a")]
    assert unreferenced_files(path) == [] and not list((tmp_path / "t" / "_sparklink").rglob("*.parquet"))


def test_replace_where_without_overwrite_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="replaceWhere.*overwrite"):
        job(str(tmp_path / "t"), [(1, "a")], overwrite=False, job_id="j1", replaceWhere="day = 'a'")


def test_overwrite_and_replace_where_through_spark(spark, tmp_path):
    from deltalake import write_deltalake

    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": pa.array([1, 2], pa.int64()), "day": ["a", "b"]}), partition_by=["day"])
    (spark.createDataFrame([(5, "b")], "id long, day string").write.format("sparklink.delta").mode("overwrite")
     .option("path", path).option("replaceWhere", "day = 'b'").save())
    assert rows(path) == [(1, "a"), (5, "b")]
    spark.createDataFrame([(7, "c")], "id long, day string").write.format("sparklink.delta").mode("overwrite") \
        .option("path", path).save()
    assert rows(path) == [(7, "c")]
