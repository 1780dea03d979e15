"""The Delta sink's compaction (``compaction.everyNCheckpoints``): a ``dataChange=false``
rewrite after every N-th micro-batch, once per micro-batch across replays. Micro-batches are
driven through the adapter's calls without Spark (as the conformance suite does); tables are
read back with delta-rs, the rewrite's actions from the commit files delta-rs wrote."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import AddAction, RemoveAction

from sparklink.delta.app_id import stream_app_id
from sparklink.delta.compaction import COMPACTION_KEY, commit_compaction, plan_bins, rewrite_bin
from sparklink.delta.sink import DeltaSink
from sparklink.delta.table_location import TableLocation
from sparklink.errors import ConfigError
from sparklink.formats.config import FormatConfig
from sparklink.options import Options
from sparklink.spark.sink_adapter import SinkStreamWriter
from sparklink.testing.conformance.outputs import SEQUENCE_SCHEMA
from sparklink.testing.conformance.sinks import crashing_task, run_micro_batch
from tests.delta.readers import (
    delta_ids,
    delta_storage_options,
    unreferenced_files,
    unreferenced_objects,
)


def _optimize_commits(log: Path) -> list[list[dict]]:
    """The actions of each compaction commit of a local table, in version order."""
    commits = []
    for entry in sorted(log.glob("*.json")):
        actions = [json.loads(line) for line in entry.read_text().splitlines() if line.strip()]
        if any(COMPACTION_KEY in a.get("commitInfo", {}) for a in actions):
            commits.append(actions)
    return commits


def _compactions(table) -> int:
    return sum(COMPACTION_KEY in h for h in DeltaTable(str(table)).history())


def test_every_second_micro_batch_is_followed_by_a_data_change_false_rewrite(tmp_path):
    table, ck = tmp_path / "table", tmp_path / "ck"
    options = {"path": str(table), "checkpointLocation": str(ck), "compaction.everyNCheckpoints": "2"}
    for batch in range(4):
        run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), batch, 3, f"job-{batch}")
    assert delta_ids(table) == list(range(40))
    delta = DeltaTable(str(table))
    assert _compactions(table) == 2
    rewrites = _optimize_commits(table / "_delta_log")
    assert len(rewrites) == 2
    for actions in rewrites:
        changes = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
        assert changes and all(change["dataChange"] is False for change in changes)
        assert any("remove" in a for a in actions) and any("add" in a for a in actions)
    assert len(delta.get_add_actions(flatten=True)) == 1  # 6 files of batches 2-3 (and batches 0-1's one) into one
    app_id = stream_app_id(ck)
    assert [h.get(COMPACTION_KEY) for h in delta.history() if COMPACTION_KEY in h] == \
        [f"{app_id}:3", f"{app_id}:1"]
    # Spark replays micro-batch 3: discarded, and not compacted again
    run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), 3, 2, "job-3-replayed")
    assert _compactions(table) == 2
    assert delta_ids(table) == list(range(40))
    assert unreferenced_files(table) == []


def test_compaction_on_s3(s3_server, s3_bucket, tmp_path):
    path = f"s3://{s3_bucket}/table"
    options = {"path": path, "checkpointLocation": str(tmp_path / "ck"), "compaction.everyNCheckpoints": "2",
               **s3_server.options()}
    for batch in range(2):
        run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), batch, 2, f"job-{batch}")
    delta = DeltaTable(path, storage_options=delta_storage_options(s3_server))
    assert delta_ids(path, storage_options=delta_storage_options(s3_server)) == list(range(20))
    assert sum(COMPACTION_KEY in h for h in delta.history()) == 1
    assert len(delta.get_add_actions(flatten=True)) == 1
    assert unreferenced_objects(s3_server, path) == []


@pytest.mark.parametrize(("options", "problem"), [
    ({"compaction.everyNCheckpoints": "0"}, "must be at least 1"),
    ({"compaction.targetFileSize": "64MB"}, "only together with compaction.everyNCheckpoints"),
    ({"compaction.everyNCheckpoints": "2", "compaction.targetFileSize": "huge"}, "compaction.targetFileSize"),
])
def test_bad_compaction_options_are_refused(options, problem):
    with pytest.raises(ConfigError, match=problem):
        DeltaSink({"path": "/t", **options}, SEQUENCE_SCHEMA)


def test_compaction_is_refused_for_df_write():
    sink = DeltaSink({"path": "/t", "compaction.everyNCheckpoints": "2"}, SEQUENCE_SCHEMA)
    with pytest.raises(ConfigError, match="applies to streams"):
        sink.prepare_tasks()


@pytest.mark.parametrize("point", ["delta.before_compaction", "delta.after_compaction"])
def test_a_crash_around_the_compaction_compacts_once(point, tmp_path, monkeypatch):
    """Micro-batch 1 (the 2nd: compaction due) is committed, then the driver dies before or
    after the compaction's commit; the restart rolls the micro-batch forward (its txn is in the
    table: nothing to commit) and compacts only if the compaction's marker is not there yet."""
    from sparklink.errors import FaultInjected
    from sparklink.faults import ENV_FAULT
    from sparklink.testing.faults import ENV_BATCH

    table = tmp_path / "table"
    options = {"path": str(table), "checkpointLocation": str(tmp_path / "ck"), "compaction.everyNCheckpoints": "2"}
    run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), 0, 2, "job-0")
    with monkeypatch.context() as armed:
        armed.setenv(ENV_FAULT, f"{point}:raise")
        armed.setenv(ENV_BATCH, "1")
        with pytest.raises(FaultInjected):
            run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), 1, 2, "job-1")
    run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), 1, 3, "job-1-replayed")
    run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), 2, 2, "job-2")
    assert _compactions(table) == 1
    assert delta_ids(table) == list(range(30))
    assert unreferenced_files(table) == []


def _small_table(path: Path, files: int = 4) -> None:
    for index in range(files):
        write_deltalake(str(path), pa.table({"id": pa.array(range(index * 10, index * 10 + 10), pa.int64())}),
                        mode="append")


def _ids(path) -> list[int]:
    return sorted(DeltaTable(str(path)).to_pyarrow_table().column("id").to_pylist())


def test_delta_rs_accepts_a_stale_rewrite_and_sparklink_refuses_it(tmp_path):
    """delta-rs 1.6.6 commits a rewrite planned before delta-rs's OPTIMIZE removed the same files
    (its conflict check lets ``dataChange=false`` removes through): the rows come twice. The
    sparklink compaction planned and rewritten at the same moment is refused at its commit."""
    library, ours = tmp_path / "library", tmp_path / "ours"
    for path in (library, ours):
        _small_table(path)
    location = TableLocation.from_options(Options({"path": str(ours)}))
    schema = pa.schema([pa.field("id", pa.int64())])

    stale = DeltaTable(str(library))  # the library alone: plan, rewrite, OPTIMIZE elsewhere, commit
    bins = plan_bins(stale, (), 1 << 30)
    written = [rewrite_bin(TableLocation.from_options(Options({"path": str(library)})), b, schema, (), "stest", 0,
                           FormatConfig(name="parquet")) for b in bins]
    DeltaTable(str(library)).optimize.compact()
    now = int(time.time() * 1000)
    stale.create_write_transaction(
        [RemoveAction(path=f.path, data_change=False, deletion_timestamp=now) for b in bins for f in b.files]
        + [AddAction(path=c["path"], size=c["size"], partition_values={}, modification_time=now, data_change=False,
                     stats=c["stats"]) for c in written], mode="append", schema=stale.schema())
    assert len(_ids(library)) == 80 and len(set(_ids(library))) == 40  # accepted: every row twice

    bins = plan_bins(DeltaTable(str(ours)), (), 1 << 30)
    assert [len(b.files) for b in bins] == [4]
    written = [rewrite_bin(location, b, schema, (), "stest", 0, FormatConfig(name="parquet")) for b in bins]
    DeltaTable(str(ours)).optimize.compact()
    assert not commit_compaction(location, bins, written, marker="app:0", partition_columns=(), batch_id=0)
    assert _ids(ours) == list(range(40))
    assert unreferenced_files(ours) == []  # the refused rewrite's file is removed


def test_a_compaction_that_loses_the_race_for_its_version_checks_again(tmp_path, monkeypatch):
    """Another writer commits between sparklink's check and its commit: the commit (at exactly
    the version after the checked one) fails, the check runs on the newer state, and the
    compaction commits on top of it."""
    from sparklink.delta import compaction

    table = tmp_path / "t"
    _small_table(table)
    location = TableLocation.from_options(Options({"path": str(table)}))
    bins = plan_bins(DeltaTable(str(table)), (), 1 << 30)
    written = [rewrite_bin(location, b, pa.schema([pa.field("id", pa.int64())]), (), "stest", 0,
                           FormatConfig(name="parquet")) for b in bins]
    checks = []
    original = compaction._active_paths

    def active_paths_then_an_append(delta):
        paths = original(delta)
        checks.append(delta.version())
        if len(checks) == 1:  # another writer takes the next version right after the check
            write_deltalake(str(table), pa.table({"id": pa.array([100], pa.int64())}), mode="append")
        return paths

    monkeypatch.setattr(compaction, "_active_paths", active_paths_then_an_append)
    assert commit_compaction(location, bins, written, marker="app:0", partition_columns=(), batch_id=0)
    assert checks == [3, 4]
    assert _ids(table) == list(range(40)) + [100]
    assert DeltaTable(str(table)).history(1)[0][COMPACTION_KEY] == "app:0"


def _micro_batch(sink: DeltaSink, batch_id: int, ids: list[int]) -> None:
    """Spark's calls for one micro-batch of ``ids`` in two tasks (as ``run_micro_batch``)."""
    stream_writer = SinkStreamWriter(sink, query_id="compaction-query")
    messages = [crashing_task(sink, batch_id, p, ids[p::2], f"job-{batch_id}") for p in range(2)]
    stream_writer.commit(messages, batch_id)


def test_two_compacting_streams_with_delta_rs_optimize_and_delete_keep_every_id_once(tmp_path, monkeypatch):
    """Two streams on one partitioned table, each compacting after every 2nd micro-batch, while
    delta-rs runs OPTIMIZE and DELETE on it. The interleaving is fixed (no timing): while stream
    A's compaction is rewritten but not committed, stream B commits a micro-batch and compacts,
    and while B's compaction waits at the same step delta-rs compacts the table; then delta-rs
    deletes ids. Both stale compactions are refused (each rewrote files another commit
    removed); the streams' later compactions commit. delta-rs reads every id once, deleted ids
    gone."""
    from sparklink.delta import compaction

    table = tmp_path / "t"
    options = {"path": str(table), "partitionColumns": "split", "compaction.everyNCheckpoints": "2"}
    stream_a = dict(options, checkpointLocation=str(tmp_path / "ck-a"))
    stream_b = dict(options, checkpointLocation=str(tmp_path / "ck-b"))
    ids_a = {b: list(range(b * 10, b * 10 + 10)) for b in range(4)}
    ids_b = {b: list(range(1000 + b * 10, 1000 + b * 10 + 10)) for b in range(4)}
    deleted: list[int] = []
    refused: list[int] = []
    original_commit = compaction.commit_compaction

    def interleave(point, *, batch_id=None, attempt=None):
        if point != "delta.compaction.before_commit":
            return
        waiting = len(steps)
        steps.append(point)
        if waiting == 0:  # A's first compaction, rewritten: B's micro-batch 1 and its compaction
            _micro_batch(DeltaSink(stream_b, SEQUENCE_SCHEMA), 1, ids_b[1])
            delta = DeltaTable(str(table))  # then delta-rs deletes ids (rewriting files A read)
            delta.delete("id % 7 = 3")
            deleted.extend(i for i in ids_a[0] + ids_a[1] + ids_b[0] + ids_b[1] if i % 7 == 3)
        elif waiting == 1:  # B's compaction, rewritten: delta-rs compacts the table first
            DeltaTable(str(table)).optimize.compact()

    def counting_commit(*args, **kwargs):
        done = original_commit(*args, **kwargs)
        if not done:
            refused.append(kwargs["batch_id"])
        return done

    steps: list[str] = []
    monkeypatch.setattr(compaction, "fault_point", interleave)
    monkeypatch.setattr("sparklink.delta.committer.commit_compaction", counting_commit)
    _micro_batch(DeltaSink(stream_a, SEQUENCE_SCHEMA), 0, ids_a[0])
    _micro_batch(DeltaSink(stream_b, SEQUENCE_SCHEMA), 0, ids_b[0])
    _micro_batch(DeltaSink(stream_a, SEQUENCE_SCHEMA), 1, ids_a[1])  # compaction due: the interleaving above
    assert refused == [1, 1] and len(steps) == 2
    for batch in (2, 3):
        _micro_batch(DeltaSink(stream_a, SEQUENCE_SCHEMA), batch, ids_a[batch])
        _micro_batch(DeltaSink(stream_b, SEQUENCE_SCHEMA), batch, ids_b[batch])
    assert refused == [1, 1] and len(steps) == 4  # both streams' compactions after micro-batch 3 committed

    expected = sorted(set(i for ids in (*ids_a.values(), *ids_b.values()) for i in ids) - set(deleted))
    assert deleted and _ids(table) == expected
    markers = [h[COMPACTION_KEY].rpartition(":")[2] for h in DeltaTable(str(table)).history() if COMPACTION_KEY in h]
    assert markers == ["3", "3"]
    assert unreferenced_files(table) == []
