"""The Arrow side of equality deletes without Spark or a table (milliseconds): key types cast to
the batch's, nulls equal to nulls on one column and on several, the batch's order kept, and a
key tuple whose values each occur in the delete file but never together left alone."""

from __future__ import annotations

import datetime

import pyarrow as pa

from sparklink.iceberg.equality import EqualityDeletes


def test_one_column_matches_nulls_and_casts_key_types():
    deletes = EqualityDeletes([(["name"], pa.table({"name": pa.array(["b", None], pa.string())}))])
    batch = pa.RecordBatch.from_pydict({"id": [1, 2, 3, 4], "name": pa.array(["a", "b", None, "c"], pa.large_string())})
    kept = deletes.apply(batch)
    assert kept.column("id").to_pylist() == [1, 4] and kept.schema == batch.schema


def test_several_columns_match_as_tuples_with_nulls_in_the_batch_order():
    day = datetime.date(2026, 11, 27)
    keys = pa.table({"id": pa.array([1, 2, 3], pa.int32()), "day": pa.array([day, None, day], pa.date32())})
    deletes = EqualityDeletes([(["id", "day"], keys)])
    for _ in range(2):  # a second batch reuses what the first prepared
        batch = pa.RecordBatch.from_pydict({
            "id": pa.array([3, 1, 2, 2, 1, 4], pa.int64()),
            "day": pa.array([day, day, None, day, None, day], pa.date32())})
        kept = deletes.apply(batch)
        # (3, day), (1, day), (2, null) deleted; (2, day) and (1, null): each value in the file, never together
        assert list(zip(kept.column("id").to_pylist(), kept.column("day").to_pylist(), strict=True)) == [
            (2, day), (1, None), (4, day)]


def test_groups_apply_one_after_the_other_and_an_empty_file_removes_nothing():
    deletes = EqualityDeletes([(["id"], pa.table({"id": pa.array([], pa.int64())})),
                               (["id"], pa.table({"id": pa.array([2], pa.int64())})),
                               (["label"], pa.table({"label": pa.array(["x"], pa.string())}))])
    batch = pa.RecordBatch.from_pydict({"id": [1, 2, 3], "label": ["x", "y", "z"]})
    assert deletes.apply(batch).column("id").to_pylist() == [3]
