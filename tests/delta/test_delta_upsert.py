"""``writeMode=upsert`` into sparklink.delta: one delta-rs MERGE per micro-batch with its txn,
checked against a plain dict replaying the changelog (delta-rs reads the table). Spark-free
(the adapter's calls simulated, as the conformance suite does) except the df.write case."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sparklink.delta.compaction import COMPACTION_KEY
from sparklink.delta.sink import DeltaSink
from sparklink.errors import ConfigError, DataError
from sparklink.sink import WriterContext
from sparklink.sink.committer import CommitRequest
from sparklink.spark.sink_adapter import SinkCommitMessage, SinkStreamWriter
from tests.delta.changelog import replay
from tests.delta.readers import unreferenced_files

SCHEMA = StructType([StructField("id", LongType()), StructField("v", StringType()), StructField("op", StringType()),
                     StructField("seq", LongType())])
UPSERT = {"writeMode": "upsert", "keyColumns": "id", "opColumn": "op", "sequenceColumn": "seq"}


def options(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"path": str(tmp_path / "table"), "checkpointLocation": str(tmp_path / "ck"), **UPSERT, **extra}


def micro_batch(sink: DeltaSink, batch_id: int, tasks: list[list[dict]]) -> None:
    """One micro-batch as Spark's adapter runs it: one task per list of change rows."""
    stream = SinkStreamWriter(sink, query_id="q")
    messages = []
    for partition, rows in enumerate(tasks):
        writer = sink.create_writer(WriterContext(partition_id=partition, attempt_number=0, task_attempt_id=partition,
                                                  job_id=f"job-{batch_id}", batch_id=batch_id, query_id="q"))
        if rows:
            writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=pa.schema(
                [("id", pa.int64()), ("v", pa.string()), ("op", pa.string()), ("seq", pa.int64())])))
        writer.flush()
        messages.append(SinkCommitMessage(partition_id=partition, attempt_number=0, query_id="q",
                                          committables=writer.prepare_commit()))
        writer.close()
    stream.commit(messages, batch_id)


def table_state(path: str) -> dict[int, tuple[str, int]]:
    rows = DeltaTable(path).to_pyarrow_table().to_pylist()
    assert len({r["id"] for r in rows}) == len(rows), "a key twice in the table"
    return {r["id"]: (r["v"], r["seq"]) for r in rows}


def change(key: int, value: str | None, seq: int, op: str = "u") -> dict:
    return {"id": key, "v": value, "op": op, "seq": seq}


BATCHES = [
    [[change(1, "a", 1, "c"), change(2, "b", 1, "c")], [change(3, "c", 1, "c"), change(1, "a2", 2)]],
    # repeated keys in one batch, out of order across tasks; a delete; an update of a key
    # the same batch inserts after deleting it
    [[change(2, "b-late", 5), change(3, None, 2, "d")], [change(2, "b-early", 3), change(4, "d", 1, "c"),
                                                          change(4, "d2", 2)]],
    # older than stored (skipped: key 2 holds seq 5), a delete of a missing key, re-insert of 3
    [[change(2, "b-old", 4), change(9, None, 1, "d")], [change(3, "c-again", 3, "r"), change(1, None, 3, "d")]],
    [[], [change(5, "e", 1, None)]],  # a null op is an upsert; an empty task
]


def test_upsert_micro_batches_equal_a_dict_replay(tmp_path):
    opts = options(tmp_path)
    expected: dict[int, tuple[str, int]] = {}
    for batch_id, tasks in enumerate(BATCHES):
        micro_batch(DeltaSink(opts, SCHEMA), batch_id, tasks)
        replay(expected, [row for rows in tasks for row in rows])
        assert table_state(opts["path"]) == expected, f"after micro-batch {batch_id}"
    table = DeltaTable(opts["path"])
    assert table.schema().to_arrow().names == ["id", "v", "seq"]  # the opColumn is not written
    history = [h for h in table.history() if h["operation"] == "MERGE"]
    assert len(history) == len(BATCHES)  # one MERGE per micro-batch
    app_id = json.loads((tmp_path / "ck" / "sparklink" / "delta-app.json").read_text())["appId"]
    assert table.transaction_version(app_id) == len(BATCHES) - 1
    for version in range(1, table.version() + 1):  # each MERGE's txn is in the MERGE's own commit
        actions = [json.loads(line) for line in (Path(opts["path"]) / "_delta_log" / f"{version:020d}.json")
                   .read_text().splitlines()]
        assert [a["txn"]["version"] for a in actions if "txn" in a] == [version - 1]
    assert unreferenced_files(opts["path"]) == [], "staged changes left behind"
    assert not list((Path(opts["path"]) / "_sparklink" / "staged-changes").glob("*"))


def test_a_tie_of_the_sequence_column_fails_the_batch_naming_the_key(tmp_path):
    opts = options(tmp_path)
    with pytest.raises(ConfigError, match="id=7"):
        micro_batch(DeltaSink(opts, SCHEMA), 0, [[change(7, "x", 1)], [change(7, "y", 1)]])


def _requests(sink: DeltaSink, batch_id: int, rows: list[dict]) -> list[CommitRequest]:
    writer = sink.create_writer(WriterContext(partition_id=0, attempt_number=0, task_attempt_id=0, job_id="j",
                                              batch_id=batch_id, query_id="q"))
    writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=pa.schema(
        [("id", pa.int64()), ("v", pa.string()), ("op", pa.string()), ("seq", pa.int64())])))
    writer.flush()
    return [CommitRequest(committable=c, batch_id=batch_id) for c in writer.prepare_commit()]


def test_a_second_merge_with_a_committed_txn_version_is_refused_by_the_committer_not_by_delta_rs(tmp_path):
    """delta-rs commits a second MERGE carrying txn(app, 0) again (shown first, on a table of
    its own); the sink's committer, given micro-batch 0 again with other values (a replay whose
    source changed), finds txn(app, 0) in the table and commits nothing."""
    raw = str(tmp_path / "raw")
    DeltaTable.create(raw, pa.schema([("id", pa.int64()), ("v", pa.string())]))
    for value in ("first", "second"):
        (DeltaTable(raw).merge(pa.table({"id": [1], "v": [value]}), "t.id = s.id", source_alias="s", target_alias="t",
                               commit_properties=CommitProperties(app_transactions=[Transaction("app", 0)]))
         .when_matched_update_all().when_not_matched_insert_all().execute())
    assert DeltaTable(raw).to_pyarrow_table().column("v").to_pylist() == ["second"], "delta-rs refused it: " \
        "the committer's check may no longer be needed"

    opts = options(tmp_path)
    sink = DeltaSink(opts, SCHEMA)
    requests = _requests(sink, 0, [change(1, "first", 1)])
    sink.create_committer().commit(requests)
    version = DeltaTable(opts["path"]).version()
    replayed = _requests(DeltaSink(opts, SCHEMA), 0, [change(1, "second", 2)])
    DeltaSink(opts, SCHEMA).create_committer().commit(replayed)
    assert DeltaTable(opts["path"]).version() == version
    assert table_state(opts["path"]) == {1: ("first", 1)}
    assert all(r.status.name == "ALREADY_COMMITTED" for r in replayed), [r.status for r in replayed]


def test_compaction_keeps_working_on_a_merged_table(tmp_path):
    """Every micro-batch merges (new keys: a file of its own each; then an update and a delete
    of compacted rows); compaction after every second one rewrites the small files the MERGEs
    left (a dataChange=false commit); the content stays the dict's."""
    opts = options(tmp_path, **{"compaction.everyNCheckpoints": "2"})
    expected: dict[int, tuple[str, int]] = {}
    batches = [[[change(k, f"v{k}", 1) for k in range(10 * b, 10 * b + 5)]] for b in range(4)]
    batches.append([[change(1, "updated", 2), change(32, None, 2, "d")]])
    for batch_id, tasks in enumerate(batches):
        micro_batch(DeltaSink(opts, SCHEMA), batch_id, tasks)
        replay(expected, [row for rows in tasks for row in rows])
        if batch_id == 3:
            table = DeltaTable(opts["path"])
            assert sum(COMPACTION_KEY in h for h in table.history()) == 2
            assert len(table.file_uris()) == 1
    assert table_state(opts["path"]) == expected


def test_not_null_is_checked_on_upserts_and_a_delete_may_carry_only_its_key(tmp_path):
    path = str(tmp_path / "table")
    DeltaTable.create(path, pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string(), False),
                                       pa.field("seq", pa.int64())]))
    opts = options(tmp_path)
    micro_batch(DeltaSink(opts, SCHEMA), 0, [[change(1, "a", 1), change(2, "b", 1)]])
    micro_batch(DeltaSink(opts, SCHEMA), 1, [[change(1, None, 2, "d")]])
    assert table_state(path) == {2: ("b", 1)}
    with pytest.raises(DataError, match="column v violates NOT NULL"):
        micro_batch(DeltaSink(opts, SCHEMA), 2, [[change(3, None, 1)]])
    assert table_state(path) == {2: ("b", 1)}


@pytest.mark.parametrize(("extra", "message"), [
    ({"writeMode": "append", "opColumn": "op"}, "opColumn"),
    ({"writeMode": "upsert", "keyColumns": "nope"}, "keyColumns"),
    ({"writeMode": "upsert", "keyColumns": "id", "partitionColumns": "op", "opColumn": "op"}, "partitionColumns"),
    ({"writeMode": "upsert", "keyColumns": "id", "replaceWhere": "id > 1"}, "replaceWhere"),
])
def test_bad_changelog_options_are_refused_naming_the_option(tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message):
        DeltaSink({"path": str(tmp_path / "t"), **extra}, SCHEMA)


def test_df_write_upsert_with_txn_in_foreach_batch_style(spark, tmp_path):
    """df.write with txnAppId / txnVersion in upsert mode: the second write of version 0 is
    skipped (its changes differ: a replay), version 1 merges."""
    path = str(tmp_path / "table")

    def write(rows, version):
        (spark.createDataFrame(rows, "id long, v string, op string, seq long").write.format("sparklink.delta")
         .option("path", path).options(**UPSERT).option("txnAppId", "fb").option("txnVersion", version)
         .mode("append").save())

    write([(1, "a", "c", 1), (2, "b", "c", 1)], 0)
    write([(1, "zz", "u", 9)], 0)
    write([(2, None, "d", 2), (3, "c", "c", 1), (1, "a2", "u", 2)], 1)
    assert table_state(path) == {1: ("a2", 2), 3: ("c", 1)}
    assert DeltaTable(path).transaction_version("fb") == 1
    assert unreferenced_files(path) == []


def test_upsert_into_a_partitioned_table_moves_a_row_between_partitions(tmp_path):
    """Partitioned by ``v``: the staged changes are unpartitioned, the MERGE writes each row into
    its partition; an update that changes ``v`` leaves the old partition without the key."""
    opts = options(tmp_path, partitionColumns="v")
    micro_batch(DeltaSink(opts, SCHEMA), 0, [[change(1, "x", 1, "c"), change(2, "y", 1, "c")]])
    micro_batch(DeltaSink(opts, SCHEMA), 1, [[change(1, "y", 2), change(3, "x", 1, "c")]])
    assert DeltaTable(opts["path"]).metadata().partition_columns == ["v"]
    assert table_state(opts["path"]) == {1: ("y", 2), 2: ("y", 1), 3: ("x", 1)}
    # a second writer without partitionColumns takes the table's
    micro_batch(DeltaSink(options(tmp_path), SCHEMA), 2, [[change(2, None, 2, "d")]])
    assert table_state(opts["path"]) == {1: ("y", 2), 3: ("x", 1)}
