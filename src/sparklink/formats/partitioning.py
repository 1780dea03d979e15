"""Hive-style partitioning, shared by every connector that lays files out by column values
(the file sink's bucket assigners and the file source's partition discovery; Delta's and
Iceberg's data-file writers are to follow): Hive's spelling of a null value, Hive's escaping
of a value in a directory name, and the split of a record batch by a key column, sorted once
(executor side; Spark-free).
"""

from __future__ import annotations

from collections.abc import Callable
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
