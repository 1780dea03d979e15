"""The manifest of live finished files and Spark's log (``_spark_metadata``), without Spark:
folding, retention, round trips, the log's batches and compact files."""

import json
import time

import pytest

from sparklink.storage.directory import as_directory
from sparklink.storage.local import LocalStorage
from sparklink.errors import DataError
from sparklink.files.sink.manifest import CompactManifest, FinishedFileManifest
from sparklink.files.sink.part_files import PENDING, PartFile
from sparklink.files.spark_log import (SinkFileStatus, SparkLog, SparkLogConfig, derive_compact_interval,
                                            local_path_of, status_for, uri_of)
from sparklink.files.sink.state import CompactionPlan, SinkState, StateStore


def part(name: str) -> PartFile:
    return PartFile(bucket="b", partition=0, path=f"b/.{name}.inprogress.s1", final=f"b/{name}", state=PENDING,
                    length=1, rows=1, created_at=0.0, last_write_at=0.0)


def test_fold_then_purge_keeps_every_finished_file(tmp_path):
    store = StateStore(as_directory(tmp_path / "_sparklink" / "state"))
    for batch in range(6):
        store.put(SinkState(batch_id=batch, committed_at=float(batch), finish=[part(f"part-{batch}")],
                            compactions=[CompactionPlan(bucket="b", inputs=[], tmp=f"b/.c{batch}", final=f"b/part-c{batch}")]
                            if batch == 3 else []))
    manifest = FinishedFileManifest(LocalStorage(tmp_path))
    expected = {f"b/part-{b}" for b in range(6)} | {"b/part-c3"}
    assert manifest.finished_files() == expected
    manifest.fold_before(4, now=10.0)
    manifest.fold_before(4, now=10.0)  # a crash between fold and purge repeats the fold: harmless
    store.purge_before(4)
    assert store.batch_ids() == [4, 5]
    assert manifest.compacted().up_to_batch == 3
    assert manifest.compacted().files["b/part-c3"] == 3.0
    assert manifest.finished_files() == expected


def test_retention_expires_then_deletes_files_no_log_names(tmp_path):
    store = StateStore(as_directory(tmp_path / "_sparklink" / "state"))
    (tmp_path / "b").mkdir()
    for batch in range(4):
        (tmp_path / "b" / f"part-{batch}").write_text("x")
        store.put(SinkState(batch_id=batch, committed_at=100.0 * batch, finish=[part(f"part-{batch}")]))
    log = SparkLog(LocalStorage(tmp_path), SparkLogConfig(retention=150.0))
    log.commit([status_for(LocalStorage(tmp_path), "b/part-0", committed_at=0.0)], now=0.0)
    manifest = FinishedFileManifest(LocalStorage(tmp_path), retention=150.0, cleanup_delay=50.0, spark_log=log)
    # at t=320: part-0 (age 320) and part-1 (age 220) are past the retention; part-1 is also past
    # retention + cleanupDelay and is deleted; part-0 is still named by Spark's log: kept, expired
    assert manifest.fold_before(4, now=320.0) == ["b/part-1"]
    assert not (tmp_path / "b" / "part-1").exists() and (tmp_path / "b" / "part-0").exists()
    assert manifest.compacted().expired == {"b/part-0": 0.0}
    assert manifest.finished_files() == {"b/part-2", "b/part-3"}
    assert manifest.expired_files() == {"b/part-0"}


def test_compact_manifest_round_trip_and_version_1(tmp_path):
    manifest = CompactManifest(up_to_batch=9, files={"a/part-1.parquet": 12.5}, expired={"a/part-0": 1.0})
    assert CompactManifest.from_json(json.loads(json.dumps(manifest.to_json())), source="x", storage=LocalStorage(tmp_path)) == manifest
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "kept").write_text("x")
    old = CompactManifest.from_json({"v": 1, "upToBatch": 3, "files": ["a/kept", "a/gone"]}, source="x", storage=LocalStorage(tmp_path))
    assert list(old.files) == ["a/kept"] and old.up_to_batch == 3


def test_sink_file_status_round_trip_and_uris(tmp_path):
    status = SinkFileStatus(path=uri_of(tmp_path / "a b=1" / "part-0"), size=3, modification_time=7)
    assert SinkFileStatus.from_json(json.loads(status.to_line())) == status
    assert status.path.startswith("file:///") and "a%20b%3D1" in status.path
    assert status.local_path() == str(tmp_path / "a b=1" / "part-0")
    assert local_path_of("file:/tmp/x") == "/tmp/x"  # Hadoop's spelling
    with pytest.raises(DataError, match="not a local file"):
        local_path_of("s3a://bucket/x")


@pytest.mark.parametrize("default, latest, expected", [(10, 9, 10), (10, 4, 5), (10, 19, 10), (3, 9, 5), (7, 29, 10)],
                         ids=["first", "smaller", "second", "divisor", "next-divisor"])
def test_compact_interval_is_derived_from_one_compact_file(default, latest, expected):
    assert derive_compact_interval(default, latest) == expected


def test_log_batches_compact_files_retention_and_cleanup(tmp_path):
    config = SparkLogConfig(compact_interval=3, cleanup_delay=0.0, retention=25.0)
    log = SparkLog(LocalStorage(tmp_path), config)
    start = time.time()  # log files are old enough for the clean-up when `now` is at least the clock
    for batch in range(10):
        (tmp_path / f"part-{batch}").write_text("x")
        status = status_for(LocalStorage(tmp_path), f"part-{batch}", committed_at=start + batch * 10)
        assert log.commit([status], now=start + batch * 10) == batch
        assert log.commit([status], now=start + batch * 10) == batch  # roll-forward: nothing appended
    names = sorted(log.log_files().values(), key=lambda n: int(n.split(".")[0]))
    assert names == ["5.compact", "6", "7", "8.compact", "9"]  # before the previous compact: deleted
    # 8.compact was written at t=80: files older than the 25 s retention left the log there
    assert [e.local_path() for e in log.view()] == [str(tmp_path / f"part-{b}") for b in (6, 7, 8, 9)]
    assert log.compact_interval() == 3


def test_first_log_batch_lists_the_files_the_output_already_had(tmp_path):
    (tmp_path / "old").write_text("x")
    (tmp_path / "new").write_text("y")
    log = SparkLog(LocalStorage(tmp_path))
    log.commit([status_for(LocalStorage(tmp_path), "new", committed_at=1.0)], now=1.0,
               existing=lambda: [status_for(LocalStorage(tmp_path), "old", committed_at=0.5)])
    assert sorted(e.local_path() for e in log.view()) == [str(tmp_path / "new"), str(tmp_path / "old")]


def test_damaged_log_files_are_named(tmp_path):
    log = SparkLog(LocalStorage(tmp_path))
    directory = tmp_path / "_spark_metadata"
    directory.mkdir()
    (directory / "0").write_text("v2\n{}")
    with pytest.raises(DataError, match="log version 'v2'"):
        log.view()
    (directory / "0").write_text("v1\n{\"path\": 1}")
    with pytest.raises(DataError, match="line 2"):
        log.view()
    (directory / "0").unlink()
    (directory / "2").write_text("v1\n")
    with pytest.raises(DataError, match="log batch 0 is missing"):
        log.view()
