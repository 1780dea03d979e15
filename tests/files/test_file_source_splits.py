"""Split planning and batch sizing for Parquet (driver / executor code, no Spark)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparklink.files.source.config import FileSourceConfig
from sparklink.formats.options import DEFAULT_BATCH_ROWS, MAX_AUTO_BATCH_ROWS
from sparklink.formats.parquet import auto_batch_rows
from sparklink.files.source.listing import DirectoryFileEnumerator
from sparklink.files.source.splits import plan


@pytest.mark.parametrize("groups,partitions,expected", [
    (12, 2, [6, 6]),
    (12, 3, [4, 4, 4]),
    (3, 2, [1, 2]),       # fewer row groups than a balanced cut needs: each still read once
    (1, 2, [1]),
    (5, 8, [1, 1, 1, 1, 1]),
], ids=["12-by-2", "12-by-3", "3-by-2", "1-group", "more-cores-than-groups"])
def test_parquet_row_groups_are_cut_into_balanced_ranges(tmp_path, groups, partitions, expected):
    rows_per_group = 20_000
    table = pa.table({"id": pa.array(range(groups * rows_per_group), pa.int64())})
    pq.write_table(table, tmp_path / "big.parquet", row_group_size=rows_per_group)
    files = list(DirectoryFileEnumerator().enumerate_files([str(tmp_path)], None))
    config = FileSourceConfig(paths=(str(tmp_path),), format="parquet", max_split_bytes=os.path.getsize(
        tmp_path / "big.parquet") // partitions + 1)
    splits = plan(files, config, default_partitions=partitions, split_prefix="t", schema_file=None)
    ranges = [(s["start"], s["end"]) for split in splits for s in split.state["segments"]]
    if expected == [1] and groups == 1:
        assert [s["unit"] for split in splits for s in split.state["segments"]] == ["file"]
        return
    assert [end - start for start, end in ranges] == expected
    assert [g for start, end in ranges for g in range(start, end)] == list(range(groups))  # each group once


def test_auto_batch_rows_follow_the_decoded_size(tmp_path):
    narrow = pa.table({"id": pa.array(range(300_000), pa.int64())})
    wide = pa.table({f"c{i}": pa.array(range(300_000), pa.int64()) for i in range(40)})
    pq.write_table(narrow, tmp_path / "narrow.parquet")
    pq.write_table(wide, tmp_path / "wide.parquet")
    narrow_meta = pq.ParquetFile(tmp_path / "narrow.parquet").metadata
    wide_meta = pq.ParquetFile(tmp_path / "wide.parquet").metadata
    assert auto_batch_rows(narrow_meta, ["id"], [0]) == MAX_AUTO_BATCH_ROWS  # 8 bytes a row: capped by rows
    wide_rows = auto_batch_rows(wide_meta, [f"c{i}" for i in range(40)], [0])
    assert DEFAULT_BATCH_ROWS <= wide_rows < MAX_AUTO_BATCH_ROWS  # 320 bytes a row: about 16 MB a batch
    assert auto_batch_rows(wide_meta, ["c0"], [0]) > wide_rows  # only the columns read count
