"""The Delta source reading changes: ``readChangeFeed=true`` on a table that sparklink's upsert
sink MERGEs into (delta-rs writes the cdc files), checked against delta-rs's own change data
feed reader (``DeltaTable.load_cdf``), in a stream and in a batch read (``spark.read`` of
versions ``startingVersion`` to ``endingVersion``). Spark-free (the enumerator and the reader
called as Spark's adapters call them) but for one ``spark.read``. Deletion vectors are read in
tests/peers/test_delta_connector.py (a table written by Delta's own Spark connector)."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from sparklink.delta.sink import DeltaSink
from sparklink.delta.source import DeltaSource
from sparklink.errors import ConfigError, DataError
from sparklink.source import READ_ALL, ReadLimit
from tests.delta.test_delta_upsert import SCHEMA, change, micro_batch, options

CHANGE_COLUMNS = ["id", "v", "seq", "_change_type", "_commit_version"]


def read_all(source_options: dict[str, str], *, streaming: bool = True) -> list[dict]:
    """Every row a stream of the source reads now (one micro-batch of everything), or with
    ``streaming=False`` every row a ``spark.read`` of it reads (as Spark's batch adapter plans it)."""
    source = DeltaSource(source_options)
    enumerator = source.create_enumerator(streaming=streaming)
    start = enumerator.initial_offset()
    end = enumerator.latest_offset(start, ReadLimit() if streaming else READ_ALL)
    reader = source.create_reader(source.schema())
    rows = [row for split in enumerator.plan_splits(start, end) for batch in reader.read(split)
            for row in pa.Table.from_batches([batch]).to_pylist()]
    return rows


def key(row: dict) -> tuple:
    return tuple(str(row[c]) for c in CHANGE_COLUMNS)


TABLE_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("seq", pa.int64())])


def merged_table(tmp_path) -> str:
    """A table with the change data feed on (version 0) that the upsert sink merges into three
    times (versions 1 to 3: inserts, updates, a delete); delta-rs writes their cdc files."""
    path = str(tmp_path / "table")
    DeltaTable.create(path, TABLE_SCHEMA, configuration={"delta.enableChangeDataFeed": "true"})
    opts = options(tmp_path)
    micro_batch(DeltaSink(opts, SCHEMA), 0, [[change(1, "a", 1, "c"), change(2, "b", 1, "c"), change(3, "c", 1)]])
    micro_batch(DeltaSink(opts, SCHEMA), 1, [[change(1, "a2", 2), change(2, None, 2, "d"), change(4, "d", 1, "c")]])
    micro_batch(DeltaSink(opts, SCHEMA), 2, [[change(1, "a3", 3)], [change(5, "e", 1, "c")]])
    log_actions = (tmp_path / "table" / "_delta_log").glob("*.json")
    assert any('"cdc"' in entry.read_text() for entry in log_actions), "delta-rs wrote no cdc file"
    return path


def test_change_feed_of_merges_equals_delta_rs_load_cdf(tmp_path):
    path = merged_table(tmp_path)
    ours = read_all({"path": path, "readChangeFeed": "true", "startingVersion": "1"})
    theirs = pa.table(DeltaTable(path).load_cdf(starting_version=1)).to_pylist()
    assert sorted(map(key, ours)) == sorted(map(key, theirs))
    kinds = {row["_change_type"] for row in ours}
    assert kinds == {"insert", "update_preimage", "update_postimage", "delete"}
    assert all(row["_commit_timestamp"] is not None for row in ours)

    # without a starting version: the latest snapshot as inserts of its version
    snapshot = read_all({"path": path, "readChangeFeed": "true"})
    latest = DeltaTable(path).version()
    assert sorted((r["id"], r["v"], r["_change_type"], r["_commit_version"]) for r in snapshot) == \
        [(1, "a3", "insert", latest), (3, "c", "insert", latest), (4, "d", "insert", latest),
         (5, "e", "insert", latest)]


def test_a_merge_fails_a_plain_stream_naming_read_change_feed(tmp_path):
    opts = options(tmp_path)
    micro_batch(DeltaSink(opts, SCHEMA), 0, [[change(1, "a", 1, "c")]])
    micro_batch(DeltaSink(opts, SCHEMA), 1, [[change(1, "b", 2)]])
    with pytest.raises(DataError, match="readChangeFeed=true"):
        read_all({"path": opts["path"], "startingVersion": "1"})


def test_read_change_feed_needs_the_table_property(tmp_path):
    opts = options(tmp_path)
    micro_batch(DeltaSink(opts, SCHEMA), 0, [[change(1, "a", 1, "c")]])
    with pytest.raises(ConfigError, match="readChangeFeed.*delta.enableChangeDataFeed"):
        DeltaSource({"path": opts["path"], "readChangeFeed": "true"})
    with pytest.raises(ConfigError, match="readChangeFeed.*delta.enableChangeDataFeed"):  # spark.read: the same check
        DeltaSource({"path": opts["path"], "readChangeFeed": "true", "startingVersion": "0"})


def load_cdf(path: str, first: int, last: int) -> list[dict]:
    """delta-rs's change data feed of versions ``first`` to ``last`` (inclusive)."""
    return pa.table(DeltaTable(path).load_cdf(starting_version=first, ending_version=last)).to_pylist()


def test_batch_read_of_changes_equals_delta_rs_load_cdf(spark, tmp_path):
    """``spark.read`` with ``readChangeFeed`` of versions [a, b]: the rows delta-rs's ``load_cdf``
    returns for [a, b], on merges (cdc files), an append (adds as inserts), a delete and a
    compaction (``dataChange=false``: no change)."""
    path = merged_table(tmp_path)                                        # versions 0 to 3
    write_deltalake(path, pa.table({"id": [6, 7], "v": ["f", "g"], "seq": [1, 1]}, schema=TABLE_SCHEMA),
                    mode="append")                                       # version 4
    DeltaTable(path).delete("id = 3")                                    # version 5
    DeltaTable(path).optimize.compact()                                  # version 6
    latest = DeltaTable(path).version()
    assert latest == 6, latest
    log = [(tmp_path / "table" / "_delta_log" / f"{v:020d}.json").read_text() for v in range(latest + 1)]
    assert '"cdc"' not in log[4] and '"dataChange":false' in log[6].replace(" ", ""), "not an append / a compaction"

    def batch(first: int, last: int | None = None) -> list[dict]:
        bounds = {"startingVersion": str(first)} | ({"endingVersion": str(last)} if last is not None else {})
        return read_all({"path": path, "readChangeFeed": "true", **bounds}, streaming=False)

    for first, last in ((1, 6), (2, 2), (4, 5), (1, 3), (6, 6)):
        ours, theirs = batch(first, last), load_cdf(path, first, last)
        assert sorted(map(key, ours)) == sorted(map(key, theirs)), (first, last)
    assert {row["_change_type"] for row in batch(1)} == {"insert", "update_preimage", "update_postimage", "delete"}
    assert sorted(map(key, batch(4))) == sorted(map(key, load_cdf(path, 4, latest)))  # no end: the latest
    assert sorted(map(key, batch(1, 99))) == sorted(map(key, batch(1)))  # an end past the latest: up to it, as Delta
    assert batch(6) == []                                                # a compaction changes nothing

    frame = (spark.read.format("sparklink.delta").option("path", path).option("readChangeFeed", "true")
             .option("startingVersion", 2).option("endingVersion", 5).load())
    assert frame.columns == ["id", "v", "seq", "_change_type", "_commit_version", "_commit_timestamp"]
    rows = [row.asDict() for row in frame.collect()]
    assert sorted(map(key, rows)) == sorted(map(key, load_cdf(path, 2, 5)))
    assert all(isinstance(row["_commit_timestamp"], datetime) for row in rows)


def test_batch_read_of_changes_between_two_times(tmp_path):
    """``startingTimestamp``: the first version committed at or after it; ``endingTimestamp``:
    the last committed at or before it (as Delta's connector); both between the same two
    commits: nothing; an end before the start, or after the latest commit, refused."""
    path = merged_table(tmp_path)
    base = datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp()
    for version in range(4):                                             # commits at 12:00, 12:01, 12:02, 12:03
        os.utime(tmp_path / "table" / "_delta_log" / f"{version:020d}.json", (base + 60 * version,) * 2)

    def versions(start: str, end: str) -> tuple[int, int]:
        source = DeltaSource({"path": path, "readChangeFeed": "true", "startingTimestamp": start,
                              "endingTimestamp": end})
        return source.create_enumerator(streaming=False).change_range()

    assert versions("2026-03-01T12:00:30", "2026-03-01T12:02:00") == (1, 2)
    assert versions("2026-03-01", "2026-03-01T14:03:00+02:00") == (0, 3)
    assert versions("2026-03-01T12:01:10", "2026-03-01T12:01:50") == (2, 1)  # no commit between: nothing
    ours = read_all({"path": path, "readChangeFeed": "true", "startingTimestamp": "2026-03-01T12:00:30",
                     "endingTimestamp": "2026-03-01T12:02:00"}, streaming=False)
    assert sorted(map(key, ours)) == sorted(map(key, load_cdf(path, 1, 2)))
    assert read_all({"path": path, "readChangeFeed": "true", "startingTimestamp": "2026-03-01T12:01:10",
                     "endingTimestamp": "2026-03-01T12:01:50"}, streaming=False) == []
    with pytest.raises(ConfigError, match="option 'endingTimestamp': .* is before the starting version 2"):
        versions("2026-03-01T12:01:30", "2026-03-01T12:00:30")
    with pytest.raises(ConfigError, match="option 'endingTimestamp': .* is after the latest commit .*version 3"):
        versions("2026-03-01T12:00:30", "2026-03-01T12:04:00")
    with pytest.raises(ConfigError, match="option 'endingTimestamp': .* is before the first commit"):
        versions("2026-03-01", "2026-03-01T11:00:00")


def test_batch_read_of_changes_refusals(tmp_path):
    """Refused as Delta's connector refuses them, each naming its option: no start, an end
    before the start, a start past the latest version, ``versionAsOf``, a start before the change
    data feed was on; the range options on a stream or a snapshot read."""
    path = merged_table(tmp_path)                                        # versions 0 to 3

    def plan(**extra: str):
        source = DeltaSource({"path": path, "readChangeFeed": "true", **extra})
        return source.create_enumerator(streaming=False).change_range()

    with pytest.raises(ConfigError, match="option 'startingVersion': spark.read with readChangeFeed=true needs the "
                                          "first version to read: set startingVersion or startingTimestamp"):
        plan()
    with pytest.raises(ConfigError, match="option 'endingVersion': version 1 is before the starting version 2"):
        plan(startingVersion="2", endingVersion="1")
    with pytest.raises(ConfigError, match="option 'startingVersion': version 4 of .* does not exist yet: the table's "
                                          "latest version is 3"):
        plan(startingVersion="4")
    with pytest.raises(ConfigError, match="option 'versionAsOf': is exclusive with readChangeFeed"):
        plan(startingVersion="1", versionAsOf="1")
    with pytest.raises(ConfigError, match="option 'endingTimestamp': is exclusive with endingVersion"):
        plan(startingVersion="1", endingVersion="2", endingTimestamp="2026-03-01")
    with pytest.raises(ConfigError, match="option 'maxFilesPerTrigger': applies to spark.readStream"):
        plan(startingVersion="1", maxFilesPerTrigger="1")
    with pytest.raises(ConfigError, match="option 'endingVersion': applies to spark.read with readChangeFeed=true"):
        DeltaSource({"path": path, "readChangeFeed": "true", "endingVersion": "1"}).create_enumerator(streaming=True)
    with pytest.raises(ConfigError, match="option 'endingVersion': applies to spark.read with readChangeFeed=true"):
        DeltaSource({"path": path, "endingVersion": "1"}).create_enumerator(streaming=False)

    # the change data feed turned on at version 2: reading from version 1 is refused, from 2 served
    plain = str(tmp_path / "plain")
    for ids in ([1], [2]):                                               # versions 0, 1
        write_deltalake(plain, pa.table({"id": ids, "v": ["x"], "seq": [1]}, schema=TABLE_SCHEMA), mode="append")
    DeltaTable(plain).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})  # version 2
    write_deltalake(plain, pa.table({"id": [3], "v": ["x"], "seq": [1]}, schema=TABLE_SCHEMA), mode="append")
    with pytest.raises(ConfigError, match="option 'startingVersion': the Delta table .* has no change data feed at "
                                          "version 1"):
        read_all({"path": plain, "readChangeFeed": "true", "startingVersion": "1"}, streaming=False)
    ours = read_all({"path": plain, "readChangeFeed": "true", "startingVersion": "2"}, streaming=False)
    assert [(row["id"], row["_change_type"], row["_commit_version"]) for row in ours] == [(3, "insert", 3)]
