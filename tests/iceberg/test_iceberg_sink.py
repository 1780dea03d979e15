"""The ``sparklink.iceberg`` sink's own cases: the three anchor faults of Flink's Iceberg
committer (iceberg#18098, #16008, #10892), concurrent writers, partitions, df.write and bad
options. Micro-batches are driven as Spark's adapter drives them (stream writer on the "driver",
tasks on "executors"; see sparklink.testing.conformance.sinks) against a real sqlite SQL catalog
and local warehouse; every table is read back with pyiceberg's scan."""

from __future__ import annotations

import shutil
import threading

import pytest

from sparklink.errors import ConfigError, FaultInjected
from sparklink.faults import ENV_FAULT
from sparklink.iceberg import sink as sink_module
from sparklink.iceberg.identity import SUMMARY_APP_ID, SUMMARY_BATCH_ID, SUMMARY_CHECKPOINT_ID
from sparklink.iceberg.sink import IcebergSink
from sparklink.iceberg.writer import table_parquet_format
from sparklink.spark.sink_adapter import SinkStreamWriter
from sparklink.testing.conformance import SEQUENCE_SCHEMA
from sparklink.testing.conformance.sinks import crashing_task
from sparklink.testing.faults import ENV_BATCH
from tests.iceberg.iceberg_readers import catalog_options, load_table, scan_ids, sparklink_snapshots


@pytest.fixture
def options(tmp_path):
    return catalog_options(tmp_path / "iceberg")


def micro_batch(options: dict, checkpoint, batch_id: int, ids: list[int], partitions: int = 2) -> None:
    """Spark's calls for one micro-batch writing ``ids`` (as the conformance suite makes them)."""
    sink = IcebergSink(dict(options, checkpointLocation=str(checkpoint)), SEQUENCE_SCHEMA)
    stream_writer = SinkStreamWriter(sink, query_id="iceberg-test")
    messages = [crashing_task(sink, batch_id, p, ids[p::partitions], f"job-{batch_id}") for p in range(partitions)]
    stream_writer.commit(messages, batch_id)


def ids_of(batch: int, base: int = 0) -> list[int]:
    return list(range(base + 10 * batch, base + 10 * batch + 10))


def test_fresh_checkpoint_with_the_same_app_id_starts_again_at_batch_0(options, tmp_path):
    """iceberg#18098: a deleted checkpoint and a restart with the same application id. Commits
    are matched on (app id, checkpoint id, batch id), never against a maximum batch id, so the new
    checkpoint's batches 0 and 1 are committed although the table already has the old 0 and 1."""
    options = dict(options, appId="orders-app")
    checkpoint = tmp_path / "ck"
    micro_batch(options, checkpoint, 0, ids_of(0))
    micro_batch(options, checkpoint, 1, ids_of(1))
    shutil.rmtree(checkpoint)
    micro_batch(options, checkpoint, 0, ids_of(0, base=100))
    micro_batch(options, checkpoint, 1, ids_of(1, base=100))
    assert scan_ids(options) == list(range(20)) + list(range(100, 120))
    summaries = sparklink_snapshots(options)
    assert [s[SUMMARY_BATCH_ID] for s in summaries] == ["0", "1", "0", "1"]
    assert {s[SUMMARY_APP_ID] for s in summaries} == {"orders-app"}
    assert len({s[SUMMARY_CHECKPOINT_ID] for s in summaries}) == 2


def test_an_app_id_other_than_the_checkpoints_is_refused(options, tmp_path):
    micro_batch(dict(options, appId="first"), tmp_path / "ck", 0, ids_of(0))
    with pytest.raises(ConfigError, match="appId.*'second' differs from 'first'"):
        micro_batch(dict(options, appId="second"), tmp_path / "ck", 1, ids_of(1))


@pytest.mark.parametrize("lose_spark_log", [False, True], ids=["log-kept", "log-lost"])
def test_lost_commit_response_is_found_in_the_ancestry(options, tmp_path, monkeypatch, lose_spark_log):
    """iceberg#16008: the catalog committed batch 1 but the driver died before Spark's commit
    (fault point ``iceberg.after_commit``). The restart replays batch 1; the committer finds its
    snapshot in the ancestry and commits nothing (even when the SDK's own commit log is gone)."""
    checkpoint = tmp_path / "ck"
    micro_batch(options, checkpoint, 0, ids_of(0))
    with monkeypatch.context() as armed:
        armed.setenv(ENV_FAULT, "iceberg.after_commit:raise")
        armed.setenv(ENV_BATCH, "1")
        with pytest.raises(FaultInjected, match=r"iceberg\.after_commit"):
            micro_batch(options, checkpoint, 1, ids_of(1))
    assert len(sparklink_snapshots(options)) == 2  # the commit landed; its response was "lost"
    if lose_spark_log:
        shutil.rmtree(checkpoint / "sparklink" / "commits")
    micro_batch(options, checkpoint, 1, ids_of(1), partitions=3)
    micro_batch(options, checkpoint, 2, ids_of(2))
    assert scan_ids(options) == list(range(30))
    assert [s[SUMMARY_BATCH_ID] for s in sparklink_snapshots(options)] == ["0", "1", "2"]


def test_rewind_to_an_older_checkpoint_replays_only_what_is_missing(options, tmp_path):
    """iceberg#10892: the query is restored from a copy of its checkpoint taken after batch 1,
    while the table already holds batches 0..3. Batches 2 and 3 are replayed and found in the
    ancestry (skipped); batch 4 is new and committed; nothing is lost or doubled."""
    checkpoint, saved = tmp_path / "ck", tmp_path / "ck-after-1"
    micro_batch(options, checkpoint, 0, ids_of(0))
    micro_batch(options, checkpoint, 1, ids_of(1))
    shutil.copytree(checkpoint, saved)
    micro_batch(options, checkpoint, 2, ids_of(2))
    micro_batch(options, checkpoint, 3, ids_of(3))
    shutil.rmtree(checkpoint)
    shutil.copytree(saved, checkpoint)
    for batch in (2, 3, 4):
        micro_batch(options, checkpoint, batch, ids_of(batch), partitions=3)
    assert scan_ids(options) == list(range(50))
    assert [s[SUMMARY_BATCH_ID] for s in sparklink_snapshots(options)] == ["0", "1", "2", "3", "4"]


@pytest.mark.parametrize("retries", [None, "0"], ids=["pyiceberg-retries", "sdk-retries"])
def test_a_commit_losing_the_compare_and_swap_is_retried_on_new_metadata(options, tmp_path, monkeypatch, retries,
                                                                        caplog):
    """Writer A has loaded the table and checked its ancestry; writer B commits a snapshot right
    then, so A's compare-and-swap on the metadata location fails. pyiceberg retries it on the
    refreshed metadata as the table's ``commit.retry.*`` properties say; with
    ``commit.retry.num-retries=0`` the failure reaches the sink, whose committer asks the SDK to
    retry (ancestry first). Both writers' rows are there once."""
    micro_batch(options, tmp_path / "ck-b", 0, ids_of(0, base=1000))
    if retries is not None:
        with load_table(options).transaction() as transaction:
            transaction.set_properties(**{"commit.retry.num-retries": retries})
    real_fault_point = sink_module.fault_point
    interleaved = []

    def fault_point(point, **kwargs):
        if point == "iceberg.before_commit" and not interleaved:
            interleaved.append(point)
            micro_batch(options, tmp_path / "ck-b", 1, ids_of(1, base=1000))  # B wins the race
        real_fault_point(point, **kwargs)

    monkeypatch.setattr(sink_module, "fault_point", fault_point)
    micro_batch(options, tmp_path / "ck-a", 0, ids_of(0))
    assert interleaved
    assert ("lost to another writer" in caplog.text) == (retries == "0")
    assert scan_ids(options) == list(range(10)) + list(range(1000, 1020))
    assert len(sparklink_snapshots(options)) == 3


def test_two_writers_at_once(options, tmp_path):
    """Two queries (two checkpoints) append to one table at the same time, 4 micro-batches each."""
    micro_batch(options, tmp_path / "ck-0", 0, ids_of(0))  # creates the table
    failures = []

    def writer(number: int) -> None:
        try:
            for batch in range(1 if number == 0 else 0, 4):
                micro_batch(options, tmp_path / f"ck-{number}", batch, ids_of(batch, base=1000 * number))
        except Exception as exc:  # reported by the test below
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert scan_ids(options) == list(range(40)) + list(range(1000, 1040))
    assert len(sparklink_snapshots(options)) == 8


def test_identity_partitions_of_an_existing_table_are_honoured(options, tmp_path):
    from pyiceberg.catalog import load_catalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import IntegerType, LongType, NestedField

    catalog = load_catalog("default", **{k[8:]: v for k, v in options.items() if k.startswith("catalog.")})
    catalog.create_namespace("db")
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "split", IntegerType()))
    catalog.create_table("db.events", schema=schema,
                         partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "split")))
    micro_batch(options, tmp_path / "ck", 0, list(range(30)), partitions=3)
    table = load_table(options)
    assert sorted(table.scan(row_filter="split == 1").to_arrow().column("id").to_pylist()) == list(range(1, 30, 3))
    files = table.inspect.files().to_pylist()
    assert sorted(f["partition"]["split"] for f in files) == [0, 1, 2]
    assert all(f"/data/split={f['partition']['split']}/" in f["file_path"] for f in files)
    assert scan_ids(options) == list(range(30))


def test_a_transform_it_does_not_serve_is_refused(options, tmp_path):
    from pyiceberg.catalog import load_catalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import VoidTransform
    from pyiceberg.types import IntegerType, LongType, NestedField

    catalog = load_catalog("default", **{k[8:]: v for k, v in options.items() if k.startswith("catalog.")})
    catalog.create_namespace("db")
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "split", IntegerType()))
    catalog.create_table("db.events", schema=schema,
                         partition_spec=PartitionSpec(PartitionField(1, 1000, VoidTransform(), "id_void")))
    # day, hour, month, year, bucket and truncate are served (test_iceberg_transforms.py); void is not
    with pytest.raises(ConfigError, match=r"void of column 'id', which this sink does not write"):
        micro_batch(options, tmp_path / "ck", 0, ids_of(0))
    assert scan_ids(options) == []


@pytest.mark.parametrize("drop, change, message", [
    ("table", {}, "table.*is required"),
    (None, {"table": "events"}, "'events' is not namespace.name"),
    ("catalog.name", {"catalog.name": ""}, "catalog.name.*must not be empty"),
])
def test_bad_options_are_refused(options, drop, change, message):
    bad = {k: v for k, v in options.items() if k != drop} | change
    with pytest.raises(ConfigError, match=message):
        IcebergSink(bad, SEQUENCE_SCHEMA)


def test_a_catalog_that_cannot_be_loaded_is_refused(options, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.pyiceberg.yaml
    bad = {k: v for k, v in options.items() if k not in ("catalog.type", "catalog.uri")} | {"catalog.name": "nowhere"}
    with pytest.raises(ConfigError, match="catalog 'nowhere' could not be loaded"):
        micro_batch(bad, tmp_path / "ck", 0, ids_of(0))


def test_df_write_appends_each_job_once(options, spark):
    for start in (0, 100):
        frame = spark.range(start, start + 50).selectExpr("id", "CAST(id % 3 AS INT) AS split")
        writer = frame.write.format("sparklink.iceberg")
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.mode("append").save()
    assert scan_ids(options) == list(range(50)) + list(range(100, 150))
    assert [s[SUMMARY_BATCH_ID] for s in sparklink_snapshots(options)] == ["job", "job"]


def test_a_branch_other_than_main_is_created_from_main_and_recovery_walks_its_ancestry(options, tmp_path,
                                                                                       monkeypatch):
    from pyiceberg.table.snapshots import ancestors_of

    micro_batch(options, tmp_path / "ck-main", 0, ids_of(0))
    branch = dict(options, branch="audit")
    micro_batch(branch, tmp_path / "ck-audit", 0, ids_of(0, base=100))
    with monkeypatch.context() as armed:  # iceberg#16008 on the branch: the response of batch 1 is lost
        armed.setenv(ENV_FAULT, "iceberg.after_commit:raise")
        armed.setenv(ENV_BATCH, "1")
        with pytest.raises(FaultInjected, match=r"iceberg\.after_commit"):
            micro_batch(branch, tmp_path / "ck-audit", 1, ids_of(1, base=100))
    micro_batch(branch, tmp_path / "ck-audit", 1, ids_of(1, base=100))  # the replay finds it on the branch
    micro_batch(options, tmp_path / "ck-main", 1, ids_of(1))
    table = load_table(options)
    assert scan_ids(options) == list(range(20))  # main: its own batches only
    audit = table.snapshot_by_name("audit")
    assert sorted(table.scan(snapshot_id=audit.snapshot_id).to_arrow().column("id").to_pylist()) == \
        list(range(10)) + list(range(100, 120))  # forked from main's first snapshot
    on_branch = [s.summary.get(SUMMARY_BATCH_ID) for s in ancestors_of(audit, table.metadata)]
    assert on_branch == ["1", "0", "0"]  # batch 1 once, then batch 0, then main's batch 0 it forked from


def test_a_branch_of_a_table_without_snapshots_and_a_tag_are_refused(options, tmp_path):
    with pytest.raises(ConfigError, match="no snapshot yet, so branch 'audit' has nothing to start from"):
        micro_batch(dict(options, branch="audit"), tmp_path / "ck", 0, ids_of(0))
    micro_batch(options, tmp_path / "ck-main", 0, ids_of(0))
    table = load_table(options)
    table.manage_snapshots().create_tag(table.current_snapshot().snapshot_id, "v1").commit()
    with pytest.raises(ConfigError, match="'v1' of db.events is a tag"):
        micro_batch(dict(options, branch="v1"), tmp_path / "ck-tag", 0, ids_of(0))


def test_files_of_failed_attempts_are_swept_after_the_next_commit(options, tmp_path):
    """Task attempts of a driver that died (files written, never committed) leave files no
    snapshot references; the first commit of the next run (a new run id: the SDK's restore)
    removes them (issue 37 item 2). Another writer's uncommitted file (another checkpoint) stays."""
    import dataclasses

    from sparklink.iceberg.sweep import referenced_files
    from sparklink.testing.conformance.sinks import write_attempt

    checkpoint = tmp_path / "ck"

    def run_batch(batch_id: int, ids: list[int], run_id: str) -> None:
        sink = IcebergSink(dict(options, checkpointLocation=str(checkpoint)), SEQUENCE_SCHEMA)
        messages = [dataclasses.replace(crashing_task(sink, batch_id, p, ids[p::2], f"job-{batch_id}"), run_id=run_id)
                    for p in range(2)]
        SinkStreamWriter(sink, query_id="iceberg-test").commit(messages, batch_id)

    run_batch(0, ids_of(0), "run-1")
    sink = IcebergSink(dict(options, checkpointLocation=str(checkpoint)), SEQUENCE_SCHEMA)
    orphans = write_attempt(sink, 1, 0, 0, ids_of(1)[:5], "job-1") + write_attempt(sink, 1, 1, 0, ids_of(1)[5:], "job-1")
    other = IcebergSink(dict(options, checkpointLocation=str(tmp_path / "other-ck")), SEQUENCE_SCHEMA)
    in_flight = write_attempt(other, 0, 0, 0, [999], "job-other")
    run_batch(1, ids_of(1), "run-2")  # the next run after the driver "died"
    assert scan_ids(options) == list(range(20))
    referenced = referenced_files(load_table(options))
    on_disk = {f"file://{p}" for p in (tmp_path / "iceberg" / "warehouse").rglob("*.parquet")}
    assert not {c["file"] for c in orphans} & on_disk
    assert on_disk - referenced == {c["file"] for c in in_flight}


def _codecs_of_data_files(options: dict) -> list[tuple[str, int]]:
    """(codec, row groups) of each data file, read by pyarrow from the files the table lists."""
    import pyarrow.parquet as pq

    metadata = [pq.ParquetFile(path.removeprefix("file://")).metadata
                for path in load_table(options).inspect.files().column("file_path").to_pylist()]
    return [(m.row_group(0).column(0).compression, m.num_row_groups) for m in metadata]


def test_data_files_follow_the_tables_parquet_write_properties(options, tmp_path):
    """Iceberg writes zstd unless the table says otherwise (write.parquet.compression-codec); the
    sink wrote snappy whatever the table said. A value it cannot apply is refused by name."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, LongType, NestedField

    micro_batch(options, tmp_path / "ck", 0, ids_of(0))  # a table the sink creates: Iceberg's default codec
    assert {codec for codec, _ in _codecs_of_data_files(options)} == {"ZSTD"}

    catalog = load_catalog("default", **{k[8:]: v for k, v in options.items() if k.startswith("catalog.")})
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "split", IntegerType()))
    other = dict(options, table="db.gzipped")
    catalog.create_table("db.gzipped", schema=schema, properties={
        "write.parquet.compression-codec": "gzip", "write.parquet.compression-level": "9",
        "write.parquet.row-group-size-bytes": "100"})
    micro_batch(other, tmp_path / "ck-gzip", 0, ids_of(0), partitions=1)
    assert [codec for codec, _ in _codecs_of_data_files(other)] == ["GZIP"]
    assert scan_ids(other) == ids_of(0)
    settings = table_parquet_format(load_table(other).properties, "db.gzipped")
    assert (settings.codec, settings.compression_level, settings.row_group_bytes) == ("gzip", 9, 100)
    # a level on a codec without levels is ignored, as Iceberg's writers do (pyarrow refuses it in every task)
    snappy = dict(options, table="db.snappy")
    catalog.create_table("db.snappy", schema=schema, properties={
        "write.parquet.compression-codec": "snappy", "write.parquet.compression-level": "3"})
    micro_batch(snappy, tmp_path / "ck-snappy", 0, ids_of(0))
    assert {codec for codec, _ in _codecs_of_data_files(snappy)} == {"SNAPPY"}
    assert scan_ids(snappy) == ids_of(0)

    for key, value, message in (("write.parquet.compression-codec", "lzo", "is not a Parquet codec"),
                                ("write.format.default", "orc", "asks for data files sparklink.iceberg does not write")):
        bad = dict(options, table=f"db.bad_{value}")
        catalog.create_table(bad["table"], schema=schema, properties={key: value})
        with pytest.raises(ConfigError, match=f"db.bad_{value}: table property {key}='{value}' {message}"):
            micro_batch(bad, tmp_path / f"ck-{value}", 0, ids_of(0))
        assert scan_ids(bad) == []
