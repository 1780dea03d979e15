"""The partition split and Hive's null spelling every sink shares (``sparklink.formats.partitioning``):
the file sink's bucket assigners, Delta's and Iceberg's data-file writers. Spark-free, under a second."""

from __future__ import annotations

import datetime
import math

import pyarrow as pa

import sparklink
from sparklink.delta.files import partition_directory
from sparklink.delta.partition_values import partition_value_text
from sparklink.formats.partitioning import HIVE_NULL, split_by_columns
from sparklink.iceberg.writer import partition_folder, split_by_partition


def _batch() -> pa.RecordBatch:
    return pa.record_batch({
        "s": pa.array(["a", None, "", "a", "x/y", None, "", "a"]),
        "f": pa.array([0.0, -0.0, math.nan, 0.0, math.nan, None, -0.0, 0.0]),
        "d": pa.array([datetime.date(2024, 1, 1), None] * 4),
        "row": pa.array(range(8)),
    })


def test_rows_are_split_by_several_columns_in_first_seen_order_keeping_their_order():
    batch = _batch()
    parts = split_by_columns(batch, ["s"])
    assert [p.column("row").to_pylist() for p in parts] == [[0, 3, 7], [1, 5], [2, 6], [4]]  # "" and null apart
    parts = split_by_columns(batch, ["f"])  # by bits: NaN rows together, 0.0 and -0.0 apart, null its own
    assert [p.column("row").to_pylist() for p in parts] == [[0, 3, 7], [1, 6], [2, 4], [5]]
    parts = split_by_columns(batch, ["s", "d"])
    assert [p.column("row").to_pylist() for p in parts] == [[0], [1, 5], [2, 6], [3, 7], [4]]
    assert sum(p.num_rows for p in split_by_columns(batch, ["s", "f", "d"])) == batch.num_rows
    one = batch.slice(0, 1)
    assert split_by_columns(one, ["s", "f"]) == [one]  # one partition: the batch itself, no copy
    assert split_by_columns(batch.slice(0, 0), ["s"]) == []


def test_delta_and_iceberg_name_partition_directories_as_before():
    """Delta: Hive's null spelling, a directory only where every value is plain (its readers
    take values from the log); Iceberg: its own spelling (``null``, URL escaping)."""
    batch = _batch()
    delta = [partition_directory(("s", "d"), tuple(partition_value_text(p.column(c)[0].as_py(), c) for c in ("s", "d")))
             for p in split_by_columns(batch, ["s", "d"])]
    assert delta == ["s=a/d=2024-01-01/", f"s={HIVE_NULL}/d={HIVE_NULL}/", "", "s=a/d=__HIVE_DEFAULT_PARTITION__/", ""]
    iceberg = [partition_folder(["s", "f"], key) for key, _ in split_by_partition(batch, ["s", "f"])]
    assert iceberg == ["s=a/f=0x0.0p%2B0", "s=null/f=-0x0.0p%2B0", "s=/f=nan", "s=x%2Fy/f=nan", "s=null/f=null",
                       "s=/f=-0x0.0p%2B0"]


def test_hive_null_is_spelled_once_in_the_package():
    from pathlib import Path

    root = Path(sparklink.__file__).parent
    literal = (f'"{HIVE_NULL}"', f"'{HIVE_NULL}'")  # in code; docstrings may name it
    spelling = [str(p.relative_to(root)) for p in root.rglob("*.py")
                if any(text in p.read_text(encoding="utf-8") for text in literal)]
    assert spelling == ["formats/partitioning.py"], spelling
