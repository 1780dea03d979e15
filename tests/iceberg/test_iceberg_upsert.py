"""``writeMode=upsert`` into ``sparklink.iceberg`` without Spark (seconds): micro-batches driven
as Spark's adapter drives them (tasks write the changes, the stream writer commits), against a
sqlite SQL catalog and a local warehouse; every table read back with pyiceberg's scan and
compared with a plain dict replaying the changelog. Two writers on one table try to break the
compare-and-swap the merge rests on."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sparklink.errors import ConfigError
from sparklink.iceberg import merge as merge_module
from sparklink.iceberg.identity import SUMMARY_BATCH_ID
from sparklink.iceberg.sink import IcebergSink
from sparklink.iceberg.sweep import referenced_files
from sparklink.sink import WriterContext
from sparklink.sink.changelog import Changelog
from sparklink.spark.sink_adapter import SinkCommitMessage, SinkStreamWriter
from tests.iceberg.iceberg_readers import catalog_options, load_table, sparklink_snapshots

SCHEMA = StructType([StructField("id", LongType()), StructField("v", StringType()),
                     StructField("seq", LongType()), StructField("op", StringType())])
UPSERT = {"writeMode": "upsert", "keyColumns": "id", "opColumn": "op", "sequenceColumn": "seq"}


@pytest.fixture
def options(tmp_path):
    return dict(catalog_options(tmp_path / "iceberg"), **UPSERT)


def changes(rows: list[tuple]) -> pa.RecordBatch:
    ids, values, seqs, ops = zip(*rows, strict=True) if rows else ((), (), (), ())
    return pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64()), "v": pa.array(values, pa.string()),
                                       "seq": pa.array(seqs, pa.int64()), "op": pa.array(ops, pa.string())})


def micro_batch(options: dict, checkpoint, batch_id: int, tasks: list[list[tuple]]) -> None:
    """One micro-batch: task ``p`` writes ``tasks[p]`` (rows ``(id, v, seq, op)``), then the commit."""
    sink = IcebergSink(dict(options, checkpointLocation=str(checkpoint)), SCHEMA)
    messages = []
    for partition, rows in enumerate(tasks):
        context = WriterContext(partition_id=partition, attempt_number=0, task_attempt_id=partition,
                                job_id=f"job-{batch_id}", batch_id=batch_id, query_id="upsert-test")
        writer = sink.create_writer(context)
        writer.write_batch(changes(rows))
        writer.flush()
        messages.append(SinkCommitMessage(partition_id=partition, attempt_number=0, query_id="upsert-test",
                                          committables=writer.prepare_commit()))
        writer.close()
    SinkStreamWriter(sink, query_id="upsert-test").commit(messages, batch_id)


def replay(expected: dict, rows: list[tuple]) -> None:
    """The reference, written from the contract: one batch's changes reduced to the greatest
    sequence value per key, a change older than the stored row skipped, a delete removes the row
    (no tombstone: a later change of the key applies whatever its sequence value)."""
    last: dict = {}
    for key, value, seq, op in rows:
        if key not in last or last[key][1] < seq:
            last[key] = (value, seq, op)
    for key, (value, seq, op) in last.items():
        stored = expected.get(key)
        if stored is not None and stored[1] > seq:
            continue
        if op == "d":
            expected.pop(key, None)
        else:
            expected[key] = (value, seq)


def table_state(options: dict) -> dict:
    table = load_table(options).scan().to_arrow()
    keys = table.column("id").to_pylist()
    assert len(keys) == len(set(keys)), "a key is stored twice"
    return dict(zip(keys, zip(table.column("v").to_pylist(), table.column("seq").to_pylist(), strict=True),
                    strict=True))


def test_a_generated_changelog_ends_as_the_dict_replaying_it(options, tmp_path):
    """Inserts, updates, deletes, a key changed several times in one batch (across tasks), out-of-order
    sequence values (an older change arriving after a newer one is skipped), re-inserts after a
    delete; after each batch the table equals the dict, every batch one snapshot."""
    rng = random.Random(7)
    expected: dict = {}
    seq = 0
    for batch_id in range(4):
        rows = []
        for _ in range(60):
            seq += 1
            key = rng.randrange(40)
            op = "d" if rng.random() < 0.25 else rng.choice(["c", "u", "r", None])
            late = seq - rng.randrange(30) if rng.random() < 0.2 else seq  # out of order, older
            rows.append((key, f"b{batch_id}-{seq}", late, op))
        # one sequence value per key per batch: ties are refused by the contract
        seen: set = set()
        rows = [r for r in rows if (r[0], r[2]) not in seen and not seen.add((r[0], r[2]))]
        micro_batch(options, tmp_path / "ck", batch_id, [rows[0::3], rows[1::3], rows[2::3]])
        replay(expected, rows)
        got = table_state(options)
        assert got == expected, f"after batch {batch_id}"
    assert [s[SUMMARY_BATCH_ID] for s in sparklink_snapshots(options)] == [str(b) for b in range(4)]


def test_a_replayed_batch_is_not_applied_twice(options, tmp_path):
    micro_batch(options, tmp_path / "ck", 0, [[(1, "a", 1, "c"), (2, "b", 1, "c")]])
    micro_batch(options, tmp_path / "ck", 1, [[(1, "a2", 2, "u"), (2, None, 2, "d")]])
    micro_batch(options, tmp_path / "ck", 1, [[(1, "a2", 2, "u"), (2, None, 2, "d")]])  # replay
    assert table_state(options) == {1: ("a2", 2)}
    assert len(sparklink_snapshots(options)) == 2
    data = tmp_path / "iceberg" / "warehouse"
    staged = [p for p in data.rglob("*.parquet") if "-changes-" in p.name]
    assert staged == []  # staged changes removed once committed (or found committed)


def test_ties_and_null_keys_are_refused_naming_the_key(options, tmp_path):
    with pytest.raises(Exception, match="two changes of key id=5"):
        micro_batch(options, tmp_path / "ck", 0, [[(5, "a", 1, "c")], [(5, "b", 1, "u")]])


def test_upsert_options_are_parsed_through_the_option_table(tmp_path):
    base = catalog_options(tmp_path / "iceberg")
    with pytest.raises(ConfigError, match="keyColumns"):
        IcebergSink(dict(base, writeMode="upsert"), SCHEMA)
    with pytest.raises(ConfigError, match="opColumn.*writeMode=upsert"):
        IcebergSink(dict(base, opColumn="op"), SCHEMA)
    with pytest.raises(ConfigError, match="did you mean 'keyColumns'"):
        IcebergSink(dict(base, writeMode="upsert", keyColumn="id"), SCHEMA)
    with pytest.raises(ConfigError, match="'nope'"):
        IcebergSink(dict(base, writeMode="upsert", keyColumns="nope"), SCHEMA)
    with pytest.raises(ConfigError, match="writeMode"):
        IcebergSink(dict(base, writeMode="merge"), SCHEMA)


def _arrow_changes(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_batches([changes(rows)])


def test_two_writers_on_one_table_never_duplicate_or_lose_a_row(tmp_path):
    """Writer A plans its merge; before A commits, writer B commits a merge that inserts keys A
    also upserts and deletes a key A updates. A's compare-and-swap must fail, A must merge again
    on B's snapshot: one row per key, every change of both applied in sequence order. Then the
    same with B committing an append of a key A upserts (pyiceberg's own append)."""
    options = dict(catalog_options(tmp_path / "iceberg"), **UPSERT)
    load = lambda: load_table(options)  # noqa: E731
    changelog = Changelog(key_columns=("id",), op_column="op", sequence_column="seq")
    micro_batch(options, tmp_path / "ck", 0, [[(k, f"v{k}", 1, "c") for k in range(10)]])
    a_rows = [(1, "A1", 3, "u"), (2, "A2", 3, "u"), (20, "A20", 3, "c"), (21, "A21", 3, "c")]
    b_rows = [(1, "B1", 2, "u"), (2, None, 4, "d"), (20, "B20", 2, "c"), (22, "B22", 2, "c")]
    interleaved = []

    def b_commits_first() -> None:
        if interleaved:
            return
        interleaved.append(merge_module.merge_with_retries(
            load, changelog.reduce(_arrow_changes(b_rows)), summary={"writer": "B"}, branch="main",
            already_committed=lambda t: False, owner_tag="bbbbbbbb"))

    stats = merge_module.merge_with_retries(load, changelog.reduce(_arrow_changes(a_rows)),
                                            summary={"writer": "A"}, branch="main",
                                            already_committed=lambda t: False, owner_tag="aaaaaaaa",
                                            before_commit=b_commits_first)
    assert interleaved and stats is not None
    expected: dict = {}
    replay(expected, [(k, f"v{k}", 1, "c") for k in range(10)])
    replay(expected, b_rows)
    replay(expected, a_rows)  # after B's: key 2 deleted by B (seq 4), then A's update (seq 3) inserts it again
    assert table_state(options) == expected
    operations = [s["operation"] for s in sparklink_snapshots(options)]
    writers = [s.get("writer") for s in sparklink_snapshots(options)]
    assert writers[-2:] == ["B", "A"], operations
    # a plain append by another writer (pyiceberg) between A's plan and A's commit
    appended = []

    def other_appends() -> None:
        if not appended:
            table = load()
            table.append(pa.table({"id": pa.array([30], pa.int64()), "v": ["other"], "seq": pa.array([9], pa.int64())},
                                  schema=table.schema().as_arrow()))
            appended.append(True)

    merge_module.merge_with_retries(load, changelog.reduce(_arrow_changes([(30, "A30", 10, "u")])),
                                    summary={"writer": "A"}, branch="main", already_committed=lambda t: False,
                                    owner_tag="aaaaaaaa", before_commit=other_appends)
    assert table_state(options)[30] == ("A30", 10)
    # no file of a lost attempt is left behind
    referenced = {f.split("/")[-1] for f in referenced_files(load())}
    written = {p.name for p in (tmp_path / "iceberg" / "warehouse").rglob("*.parquet")}
    assert written - referenced == set()
