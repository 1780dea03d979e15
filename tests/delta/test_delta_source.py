"""The ``sparklink.delta`` source reading tables written by delta-rs (``write_deltalake``); what
it streams goes into the example directory sink and is read back with pyarrow."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from sparklink.delta.source import DeltaSource
from sparklink.errors import ConfigError, DataError
from sparklink.testing.spark_session import error_text
from tests.delta.readers import delta_ids


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
    with pytest.raises(ConfigError, match="'yesterday' is not a date or timestamp"):
        DeltaSource({"path": str(tmp_path / "t"), "startingTimestamp": "yesterday"})
    with pytest.raises(ConfigError, match="exclusive with startingVersion"):
        DeltaSource({"path": str(tmp_path / "t"), "startingTimestamp": "2026-01-01", "startingVersion": "0"})
    with pytest.raises(ConfigError, match="unknown option"):
        DeltaSource({"path": str(tmp_path / "t"), "startingOffsets": "earliest"})
    with pytest.raises(ConfigError, match="scheme 'gs://'"):
        DeltaSource({"path": "gs://b/t"})
    with pytest.raises(ConfigError, match="unknown option"):  # a source never writes: no such setting
        DeltaSource({"path": "s3://bucket/t", "s3.allowUnconditionalWrites": "true"})
    _table(tmp_path / "t", versions=1)  # versions 0 and 1
    with pytest.raises(ConfigError, match="option 'versionAsOf': version 5 of .* does not exist: the table's latest "
                                          "version is 1"):
        DeltaSource({"path": str(tmp_path / "t"), "versionAsOf": "5"})
    with pytest.raises(ConfigError, match="option 'startingVersion': version 2 of .* does not exist yet: the table's "
                                          "latest version is 1"):
        DeltaSource({"path": str(tmp_path / "t"), "startingVersion": "2"}).create_enumerator(streaming=True) \
            .initial_offset()
    for option in ({"startingVersion": "1"}, {"startingTimestamp": "2026-01-01"}, {"maxFilesPerTrigger": "1"}):
        with pytest.raises(ConfigError, match=f"option '{next(iter(option))}': applies to spark.readStream"):
            DeltaSource({"path": str(tmp_path / "t"), **option}).create_enumerator(streaming=False)
    with pytest.raises(ConfigError, match="option 'versionAsOf': applies to spark.read"):
        DeltaSource({"path": str(tmp_path / "t"), "versionAsOf": "0"}).create_enumerator(streaming=True)
    DeltaTable(str(tmp_path / "t")).alter.set_table_properties({"delta.enableDeletionVectors": "true"})
    # delta-rs's upgrade adds reader features: deletionVectors is served since issue 40
    # (tests/peers/test_delta_connector.py reads Delta's own deletion vectors), variantType is not
    with pytest.raises(DataError, match="needs reader features variantType, not served"):
        DeltaSource({"path": str(tmp_path / "t")})


def _set_commit_times(table, seconds):
    for version, moment in enumerate(seconds):
        os.utime(table / "_delta_log" / f"{version:020d}.json", (moment, moment))


def test_starting_timestamp_is_the_first_version_committed_at_or_after_it(tmp_path):
    """Commit times are the commit files' modification times, made strictly increasing (two
    versions with one time: the later one is 1 ms later), as Spark's Delta reads them."""
    table = tmp_path / "t"
    _table(table, versions=4)
    base = datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp()
    _set_commit_times(table, [base, base + 60, base + 60, base + 120])

    def start(value):
        return DeltaSource({"path": str(table), "startingTimestamp": value}).create_enumerator(streaming=True) \
            .initial_offset()

    assert start("2026-03-01") == {"version": 0, "index": 0}                     # before every commit
    assert start("2026-03-01T12:00:30") == {"version": 1, "index": 0}            # naive: UTC
    assert start("2026-03-01T12:01:00.0005+00:00") == {"version": 2, "index": 0}  # v2 counts as 12:01:00.001
    assert start("2026-03-01T14:01:30+02:00") == {"version": 3, "index": 0}
    with pytest.raises(ConfigError, match="after the latest commit"):
        start("2026-03-01T12:02:01")


def test_without_a_starting_option_the_stream_reads_the_latest_snapshot_then_the_changes(spark, tmp_path):
    """As Spark's Delta source: the snapshot of the latest version at the start (a delete in
    the history does not stop it: the snapshot is after it), then later versions' appends."""
    table, out, ck = tmp_path / "t", tmp_path / "out", tmp_path / "ck"
    _table(table, versions=2)                    # v0: ids 0-9, v1: 10-19
    DeltaTable(str(table)).delete("id < 5")      # v2 removes data
    _table(table, versions=1)                    # v3: ids 0-9 again

    def run():
        (spark.readStream.format("sparklink.delta").option("path", str(table)).option("maxFilesPerTrigger", "2")
         .load().writeStream.format("sparklink.directory").option("path", str(out))
         .option("checkpointLocation", str(ck)).trigger(availableNow=True).start().awaitTermination())

    run()
    assert _directory_ids(out) == sorted(list(range(5, 20)) + list(range(10)))
    write_deltalake(str(table), pa.table({"id": pa.array([100, 101], pa.int64()), "grp": pa.array([0, 1], pa.int32())}),
                    mode="append", partition_by=["grp"])
    run()
    assert _directory_ids(out) == sorted(list(range(5, 20)) + list(range(10)) + [100, 101])


def test_a_restart_with_other_partitioning_reads_every_id_once(spark, tmp_path):
    """sparklink.delta -> repartition(k) -> sparklink.delta (compacting every 2 micro-batches):
    stopped after a first availableNow run, the source table compacted by delta-rs (a
    dataChange=false version the stream skips) and appended to, restarted with another k and
    another maxFilesPerTrigger: delta-rs reads every id of the output once."""
    source, out, ck = tmp_path / "src", tmp_path / "out", tmp_path / "ck"
    _table(source, versions=4, partitioned=False)

    def run(partitions, max_files):
        (spark.readStream.format("sparklink.delta").option("path", str(source))
         .option("maxFilesPerTrigger", str(max_files)).load().repartition(partitions)
         .writeStream.format("sparklink.delta").option("path", str(out)).option("compaction.everyNCheckpoints", "2")
         .option("checkpointLocation", str(ck)).trigger(availableNow=True).start().awaitTermination())

    run(partitions=2, max_files=1)
    assert delta_ids(out) == list(range(40))
    DeltaTable(str(source)).optimize.compact()
    _table_from(source, first=40, versions=3)
    run(partitions=3, max_files=2)
    assert delta_ids(out) == list(range(70))
    assert any("sparklink.compaction" in h for h in DeltaTable(str(out)).history())


def _table_from(path, first, versions, rows=10):
    for v in range(versions):
        ids = list(range(first + v * rows, first + (v + 1) * rows))
        write_deltalake(str(path), pa.table({"id": pa.array(ids, pa.int64()), "grp": pa.array([i % 2 for i in ids],
                                                                                               pa.int32())}),
                        mode="append")


def test_typed_partition_values_of_a_snapshot_read_as_delta_rs_reads_them(tmp_path):
    """Partition columns of several types (bool, date, timestamp, string, a null): the source's
    splits of a snapshot (planned and read as Spark's adapter does, without Spark) give the rows
    delta-rs gives."""
    from datetime import date

    table = tmp_path / "t"
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "flag": pa.array([True, False, None]),
                     "day": pa.array([date(2026, 1, 1), date(2026, 1, 2), date(2026, 1, 1)]),
                     "at": pa.array([datetime(2026, 1, 1, 10, 30, 5, 123000, tzinfo=UTC)] * 3,
                                    pa.timestamp("us", tz="UTC")),
                     "name": pa.array(["a b", "c/d", "e"])})
    write_deltalake(str(table), data, partition_by=["flag", "day", "at", "name"])
    source = DeltaSource({"path": str(table)})
    enumerator = source.create_enumerator(streaming=False)
    start = enumerator.initial_offset()
    splits = enumerator.plan_splits(start, enumerator.latest_offset(start, None))
    reader = source.create_reader(source.schema())
    rows = [row for split in splits for batch in reader.read(split) for row in pa.Table.from_batches([batch]).to_pylist()]
    expected = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    assert sorted(rows, key=lambda r: r["id"]) == sorted(expected, key=lambda r: r["id"])


def test_small_files_are_read_several_to_a_task_and_planning_imports_no_pandas(spark, tmp_path):
    """A version per small file is not a Spark task per file (each costs about 0.1 s before it
    reads a byte); and planning never imports pandas (pyarrow's constructors do, and so does
    converting a zoned timestamp to Python: 0.17-0.27 s in every streaming query's fresh planning
    process). Planning starts as PySpark's planning process does, from the registered DataSource
    class pickled with cloudpickle, and imports neither the sink side (the format's sink class,
    its writer and file formats: about 0.2 s) nor the reader's Parquet module."""
    import subprocess
    import sys

    table, out, ck = tmp_path / "t", tmp_path / "out", tmp_path / "ck"
    for v in range(8):  # a zoned timestamp column: converting its statistics to Python imports pandas
        ids = pa.array(range(v * 10, (v + 1) * 10), pa.int64())
        write_deltalake(str(table), pa.table({"id": ids, "at": pa.array([datetime(2026, 1, 1, v, tzinfo=UTC)] * 10,
                                                                         pa.timestamp("us", tz="UTC"))}),
                        mode="append")
    frame = spark.read.format("sparklink.delta").option("path", str(table)).load()
    assert frame.rdd.getNumPartitions() <= (os.cpu_count() or 2)
    assert sorted(r.id for r in frame.collect()) == list(range(80))
    query = (spark.readStream.format("sparklink.delta").option("path", str(table)).load()
             .writeStream.format("sparklink.directory").option("path", str(out))
             .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    query.awaitTermination()
    assert _directory_ids(out) == list(range(80))
    from pyspark import cloudpickle

    import sparklink

    pickled = tmp_path / "data_source.pickle"
    pickled.write_bytes(cloudpickle.dumps(next(c for c in sparklink.data_sources() if c.name() == "sparklink.delta")))
    planning = ("import sys\n"
                "from pyspark import cloudpickle\n"
                f"data_source = cloudpickle.loads(open({str(pickled)!r}, 'rb').read())({{'path': {str(table)!r}}})\n"
                "reader = data_source.streamReader(data_source.schema())\n"
                "start = reader.initialOffset()\n"
                "end = reader.latestOffset(start, reader.getDefaultReadLimit())\n"
                "partitions = reader.partitions(start, end)\n"
                "heavy = sorted(m for m in ('pandas', 'pyarrow.parquet', 'sparklink.delta.sink', 'sparklink.formats')\n"
                "               if m in sys.modules)\n"
                "print(len(partitions), sum(len(p.splits) for p in partitions), ','.join(heavy) or '-')\n")
    done = subprocess.run([sys.executable, "-c", planning], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    tasks, files, heavy = done.stdout.split()
    assert int(files) == 8 and int(tasks) <= (os.cpu_count() or 2) and heavy == "-", done.stdout


def test_deletion_vector_positions_hold_across_the_batches_of_a_streamed_file(tmp_path):
    """The reader streams a file in batches of about 16 MiB decoded: the rows a deletion vector
    removes are file positions, counted across batches, ranges that straddle a batch boundary
    included."""
    from sparklink.delta.source import DeltaReader
    from sparklink.delta.table_location import location_from_options
    from sparklink.source import Split

    rows = 200_000  # 200-byte strings: 40 MB decoded, three batches
    pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64()), "s": [f"{i:0200d}" for i in range(rows)]}),
                   tmp_path / "f.parquet", row_group_size=20_000)
    reader = DeltaReader(location_from_options({"path": str(tmp_path)}), pa.schema([("id", pa.int64())]))
    first = next(iter(reader.read(Split(split_id="v0-0", state={"path": "f.parquet", "size": 1,
                                                                 "partitionValues": {}}))))
    edge = first.num_rows  # the second batch's first position
    deleted = [[10, 20], [edge - 5, edge + 5], [rows - 1, rows]]
    split = Split(split_id="v0-0", state={"path": "f.parquet", "size": 1, "partitionValues": {}, "deleted": deleted})
    batches = list(reader.read(split))
    assert len(batches) >= 3
    gone = {i for start, stop in deleted for i in range(start, stop)}
    assert [i for b in batches for i in b.column("id").to_pylist()] == [i for i in range(rows) if i not in gone]
