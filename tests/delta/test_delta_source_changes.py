"""The Delta source reading changes: ``readChangeFeed=true`` on a table that sparklink's upsert
sink MERGEs into (delta-rs writes the cdc files), checked against delta-rs's own change data
feed reader (``DeltaTable.load_cdf``). Spark-free: the enumerator and the reader called as
Spark's adapter calls them. Deletion vectors are read in tests/peers/test_delta_connector.py
(a table written by Delta's own Spark connector)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sparklink.delta.sink import DeltaSink
from sparklink.delta.source import DeltaSource
from sparklink.errors import ConfigError, DataError
from sparklink.source import ReadLimit
from tests.delta.test_delta_upsert import SCHEMA, change, micro_batch, options

CHANGE_COLUMNS = ["id", "v", "seq", "_change_type", "_commit_version"]


def read_all(source_options: dict[str, str]) -> list[dict]:
    """Every row a stream of the source reads now (one micro-batch of everything)."""
    source = DeltaSource(source_options)
    enumerator = source.create_enumerator(streaming=True)
    start = enumerator.initial_offset()
    end = enumerator.latest_offset(start, ReadLimit())
    reader = source.create_reader(source.schema())
    rows = [row for split in enumerator.plan_splits(start, end) for batch in reader.read(split)
            for row in pa.Table.from_batches([batch]).to_pylist()]
    return rows


def key(row: dict) -> tuple:
    return tuple(str(row[c]) for c in CHANGE_COLUMNS)


def test_change_feed_of_merges_equals_delta_rs_load_cdf(tmp_path):
    path = str(tmp_path / "table")
    DeltaTable.create(path, pa.schema([("id", pa.int64()), ("v", pa.string()), ("seq", pa.int64())]),
                      configuration={"delta.enableChangeDataFeed": "true"})
    opts = options(tmp_path)
    micro_batch(DeltaSink(opts, SCHEMA), 0, [[change(1, "a", 1, "c"), change(2, "b", 1, "c"), change(3, "c", 1)]])
    micro_batch(DeltaSink(opts, SCHEMA), 1, [[change(1, "a2", 2), change(2, None, 2, "d"), change(4, "d", 1, "c")]])
    micro_batch(DeltaSink(opts, SCHEMA), 2, [[change(1, "a3", 3)], [change(5, "e", 1, "c")]])
    log_actions = (tmp_path / "table" / "_delta_log").glob("*.json")
    assert any('"cdc"' in entry.read_text() for entry in log_actions), "delta-rs wrote no cdc file"

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
