"""The row-level fallback shared by the text formats' readers (executor side).

Text formats first parse a segment with pyarrow's vectorised readers; only when that fails (a
malformed record somewhere) do they fall back to record-by-record parsing, to find which
records are bad and apply the parse mode.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparklink.formats.base import SegmentInput


@dataclass(kw_only=True)
class RawRecord:
    """One record found by a row-level parser: its field values (or why it failed to parse)."""

    values: dict[str, Any] | None
    text: str
    where: str
    parse_error: str | None = None


def _convert_one(value: Any, arrow_type: pa.DataType, from_text: bool) -> Any:
    if value is None:
        return None
    if isinstance(value, str) and (from_text or not (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type))):
        return pc.cast(pa.scalar(value, pa.string()), arrow_type)
    return pa.scalar(value, type=arrow_type)


def _convert_column(values: list[Any], field: pa.Field, from_text: bool) -> tuple[pa.Array, dict[int, str]]:
    """Values -> an Arrow array of the field's type; failed positions become null, with reasons."""
    try:
        if from_text:
            return pc.cast(pa.array(values, pa.string()), field.type), {}
        return pa.array(values, type=field.type), {}
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError):
        pass  # some value does not convert: find which, one by one
    converted: list[Any] = []
    failures: dict[int, str] = {}
    for index, value in enumerate(values):
        try:
            scalar = _convert_one(value, field.type, from_text)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError,
                OverflowError) as exc:
            failures[index] = f"column '{field.name}': cannot convert {value!r} to {field.type} ({exc})"
            converted.append(None)
            continue
        converted.append(scalar.as_py() if isinstance(scalar, pa.Scalar) else scalar)
    return pa.array(converted, type=field.type), failures


def records_to_batch(records: Sequence[RawRecord], source: SegmentInput, *, from_text: bool) -> pa.RecordBatch:
    """Apply the parse mode to row-parsed records and build one batch of the data schema
    (plus the corrupt-record column in PERMISSIVE mode)."""
    policy = source.bad_records()
    schema = source.data_schema
    columns: dict[str, list[Any]] = {name: [] for name in schema.names}
    for record in records:
        for name in schema.names:
            columns[name].append(None if record.values is None else record.values.get(name))
    failures: dict[int, str] = {}
    arrays: list[pa.Array] = []
    for field in schema:
        array, failed = _convert_column(columns[field.name], field, from_text)
        arrays.append(array)
        for index, reason in failed.items():
            failures.setdefault(index, reason)
    keep: list[int] = []
    corrupt_text: list[str | None] = []
    for index, record in enumerate(records):
        problem = record.parse_error or failures.get(index)
        if problem is None:
            keep.append(index)
            corrupt_text.append(None)
        elif policy.malformed(where=record.where, reason=problem):
            keep.append(index)
            corrupt_text.append(record.text)
    take = pa.array(keep, pa.int64())
    arrays = [array.take(take) for array in arrays]
    names = list(schema.names)
    if source.corrupt_column is not None:
        arrays.append(pa.array(corrupt_text, pa.string()))
        names.append(source.corrupt_column)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def with_null_corrupt_column(batch: pa.RecordBatch, source: SegmentInput) -> pa.RecordBatch:
    """A batch that parsed cleanly: its corrupt-record column (if wanted) is all null."""
    if source.corrupt_column is None:
        return batch
    return pa.RecordBatch.from_arrays(list(batch.columns) + [pa.nulls(batch.num_rows, pa.string())],
                                      names=list(batch.schema.names) + [source.corrupt_column])


def lines_with_offsets(body: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(line index, byte offset, line without its end-of-line) for each line of ``body``."""
    offset = 0
    index = 0
    length = len(body)
    while offset < length:
        end = body.find(b"\n", offset)
        if end < 0:
            end = length
        line = body[offset:end]
        if line.endswith(b"\r"):
            line = line[:-1]
        yield index, offset, line
        index += 1
        offset = end + 1
