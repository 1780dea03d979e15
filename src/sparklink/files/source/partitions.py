"""Hive-style partition directories: ``.../country=fr/day=2024-01-02/file`` -> partition columns.

Runs on the driver while listing (parsing the directory names) and on executors (turning a
segment's values into constant Arrow columns, once per record batch).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import LongType, StringType, StructField

from sparklink.errors import DataError
from sparklink.formats.partitioning import HIVE_NULL

Partition = tuple[tuple[str, str | None], ...]


def parse_partition(relative_dirs: Iterable[str]) -> Partition:
    """The ``key=value`` pairs of the directories between the root and a file, outermost first.

    Directories without ``=`` are ordinary directories and contribute nothing.
    """
    pairs: list[tuple[str, str | None]] = []
    for name in relative_dirs:
        key, sep, value = name.partition("=")
        if not sep or not key:
            continue
        # As Spark's reader: the raw name marks null; an escaped one (``%5F_HIVE...``, what the
        # file sink writes for that string value) is the string itself.
        pairs.append((unquote(key), None if value == HIVE_NULL else unquote(value)))
    return tuple(pairs)


def _is_int(value: str) -> bool:
    text = value.strip()
    if text.startswith(("+", "-")):
        text = text[1:]
    return text.isdigit() and len(text) < 19


def infer_partition_fields(partitions: Iterable[Partition]) -> list[StructField]:
    """Partition columns in first-seen order: long if every value is an integer, else string."""
    values: dict[str, list[str]] = {}
    for partition in partitions:
        for key, value in partition:
            bucket = values.setdefault(key, [])
            if value is not None:
                bucket.append(value)
    return [StructField(key, LongType() if seen and all(_is_int(v) for v in seen) else StringType(), True)
            for key, seen in values.items()]


def partition_column(value: str | None, arrow_type: pa.DataType, rows: int, *, column: str, path: str) -> pa.Array:
    """A constant column of ``rows`` copies of a partition value, cast to the column's type."""
    if value is None:
        return pa.nulls(rows, arrow_type)
    try:
        scalar = pc.cast(pa.scalar(value, pa.string()), arrow_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DataError(f"{path}: partition directory '{column}={value}' does not convert to {arrow_type}: {exc}") from None
    return pa.repeat(scalar, rows)
