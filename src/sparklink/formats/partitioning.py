"""Partitioning by column values, shared by every connector that lays files out by them (the
file sink's bucket assigners, the file source's partition discovery, Delta's and Iceberg's
data-file writers): Hive's spelling of a null value, Hive's escaping of a value in a directory
name, and the split of a record batch by a key column or by several columns, sorted once
(executor side; Spark-free).

The directory names stay each writer's: the file sink escapes as Hive does, Delta writes a
directory only where every value is plain (its readers take the values from the log), Iceberg
spells a path as Iceberg's ``PartitionSpec.partitionToPath`` does (``null``, URL escaping).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

#: Hive's directory spelling of a null (or, for strings, empty) partition value: ``col=__HIVE_DEFAULT_PARTITION__``.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_HIVE_ESCAPED = set('"#%\'*/:=?\\\x7f{[]^') | {chr(c) for c in range(0x20)}


def escape_path_name(value: str) -> str:
    """Hive's escaping of a partition value, plus a leading '.'/'_' (hidden names)."""
    escaped = "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPED else c for c in value)
    if escaped and escaped[0] in "._":
        escaped = f"%{ord(escaped[0]):02X}" + escaped[1:]
    return escaped


def split_by_key(batch: pa.RecordBatch, keys: pa.Array, to_bucket: Callable[[Any], str]) -> list[tuple[str, pa.RecordBatch]]:
    """Split ``batch`` by the values of ``keys`` (same length; nulls are a value of their own);
    ``to_bucket`` maps a value to a bucket id, and values of one bucket are one batch. The
    values are dictionary-encoded and the rows sorted once (O(rows log rows), whatever the
    number of buckets), not filtered once per value."""
    encoded = pc.dictionary_encode(keys, null_encoding="encode")
    dictionary = encoded.dictionary.to_pylist()
    if len(dictionary) == 1:
        return [(to_bucket(dictionary[0]), batch)]
    indices = encoded.indices
    order = pc.sort_indices(indices)
    counts = pc.value_counts(pc.take(indices, order))
    groups: dict[str, list[pa.RecordBatch]] = {}
    offset = 0
    for item in counts:  # value_counts keeps first-seen order, which is sorted order here
        index, count = item["values"].as_py(), item["counts"].as_py()
        # a take per group, not slices of one sorted copy: each group owns its memory, so a
        # writer that buffers one bucket's rows does not keep the other buckets' rows alive
        groups.setdefault(to_bucket(dictionary[index]), []).append(batch.take(order.slice(offset, count)))
        offset += count
    return [(bucket, parts[0] if len(parts) == 1 else pa.Table.from_batches(parts).combine_chunks().to_batches()[0])
            for bucket, parts in groups.items()]


def float_bits(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A floating column as its bit patterns (one NaN for all), so grouping tells ``0.0`` from
    ``-0.0`` and keeps NaN rows together (an equality filter drops NaN and mixes the zeros)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if array.type == pa.float16():
        array = array.cast(pa.float32())
    nan = pa.scalar(math.nan, array.type)
    canonical = pc.if_else(pc.is_nan(array), nan, array)
    return canonical.view(pa.int64() if array.type == pa.float64() else pa.int32())


def group_key(batch: pa.RecordBatch, columns: Sequence[str]) -> pa.Array:
    """One ``int64`` per row of ``batch``, equal for the rows whose ``columns`` hold the same
    values and different otherwise: a null is a value of its own, floats are compared by their
    bits (:func:`float_bits`: NaN rows together, ``0.0`` and ``-0.0`` apart). Each column is
    dictionary-encoded once and the codes combined (re-encoded after each column, so the key
    stays below the number of rows)."""
    combined: pa.Array | None = None
    for column in columns:
        values = batch.column(column)
        encoded = pc.dictionary_encode(float_bits(values) if pa.types.is_floating(values.type) else values,
                                       null_encoding="encode")
        codes = encoded.indices.cast(pa.int64())
        if combined is None:
            combined = codes
        else:
            joined = pc.add(pc.multiply(combined, len(encoded.dictionary)), codes)
            combined = pc.dictionary_encode(joined).indices.cast(pa.int64())
    return combined if combined is not None else pa.nulls(batch.num_rows, pa.int64())


def split_by_columns(batch: pa.RecordBatch, columns: Sequence[str]) -> list[pa.RecordBatch]:
    """The rows of ``batch`` grouped by the values of ``columns`` (:func:`group_key`), one batch
    per distinct combination, in the order each one first occurs and with its rows in their
    order: :func:`split_by_key`'s single sort, whatever the number of partitions."""
    return [part for _, part in split_by_key(batch, group_key(batch, columns), str)]
