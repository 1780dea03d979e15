"""The ``sparklink.delta`` source reading tables written by delta-rs (``write_deltalake``); what
it streams goes into the example directory sink and is read back with pyarrow."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from sparklink.delta.source import DeltaSource
from sparklink.errors import ConfigError, DataError
from sparklink.testing.spark_session import error_text


def _table(path, versions=3, rows=10, partitioned=True):
    for v in range(versions):
        ids = list(range(v * rows, (v + 1) * rows))
        write_deltalake(str(path), pa.table({"id": pa.array(ids, pa.int64()), "grp": pa.array([i % 2 for i in ids],
                                                                                               pa.int32())}),
                        mode="append", partition_by=["grp"] if partitioned else None)


def _directory_ids(out):
    return sorted(i for part in out.glob("part-*.parquet") for i in pq.read_table(part).column("id").to_pylist())


def test_batch_read_latest_and_version_as_of(spark, tmp_path):
    table = tmp_path / "t"
    _table(table)
    frame = spark.read.format("sparklink.delta").option("path", str(table)).load()
    assert sorted(r.id for r in frame.collect()) == sorted(DeltaTable(str(table)).to_pyarrow_table()["id"].to_pylist())
    assert all(r.grp == r.id % 2 for r in frame.collect())
    old = spark.read.format("sparklink.delta").option("path", str(table)).option("versionAsOf", "1").load()
    assert sorted(r.id for r in old.collect()) == list(range(20))


def test_stream_every_version_once_with_max_files_then_a_removing_version(spark, tmp_path):
    table, out, ck = tmp_path / "t", tmp_path / "out", tmp_path / "ck"
    _table(table)

    def run(options=None):
        query = (spark.readStream.format("sparklink.delta").option("path", str(table))
                 .option("maxFilesPerTrigger", "1").options(**(options or {})).load()
                 .writeStream.format("sparklink.directory").option("path", str(out))
                 .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
        query.awaitTermination()
        return query

    run()
    assert _directory_ids(out) == list(range(30))
    _table(table, versions=1)            # version 3 appends ids 0..9 again (a new version, read once)
    DeltaTable(str(table)).delete("id >= 25")  # version 4 removes data
    with pytest.raises(Exception) as failed:
        run()
    assert "version 4 removes data" in error_text(failed.value)
    run({"skipChangeCommits": "true"})
    assert _directory_ids(out) == sorted(list(range(30)) + list(range(10)))


def test_bad_options_and_unserved_tables(tmp_path):
    with pytest.raises(ConfigError, match="no Delta table"):
        DeltaSource({"path": str(tmp_path / "none")})
    _table(tmp_path / "t", versions=1)
    with pytest.raises(ConfigError, match="unknown option"):
        DeltaSource({"path": str(tmp_path / "t"), "startingTimestamp": "2026-01-01"})
    with pytest.raises(ConfigError, match="scheme 's3://'"):
        DeltaSource({"path": "s3://b/t"})
    DeltaTable(str(tmp_path / "t")).alter.set_table_properties({"delta.enableDeletionVectors": "true"})
    with pytest.raises(DataError, match="deletionVectors"):
        DeltaSource({"path": str(tmp_path / "t")})
