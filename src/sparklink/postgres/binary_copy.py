"""Arrow record batches as PostgreSQL's binary ``COPY`` format, built with numpy, not per row.

PostgreSQL spends about half as much CPU reading binary COPY as reading CSV (no number,
date or timestamp parsing): measured here, 500,000 rows of (bigint, text, double precision,
timestamptz) take 0.22 s instead of 0.42 s into a plain table. On a machine where the server
shares cores with Spark, that time is throughput.

Binary input must match the column's type exactly (eight bytes for ``bigint``, four for
``integer``), so :func:`binary_encoder` only returns an encoder when every Arrow column has
an exact counterpart in the target's column types (``pg_type.typname``, read on the driver).
Anything else (numeric, json, arrays, domains, an Arrow ``int64`` into an ``integer``
column ...) goes as CSV, which PostgreSQL converts with its usual casts and error messages.
Runs on executors (sink writers) and on the driver (write-ahead commit).

The format: a signature and two zero words; per row a 16-bit field count, then per field a
32-bit length (-1 for NULL) and the value's bytes, all big-endian; a 16-bit -1 at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags, header extension length
TRAILER = b"\xff\xff"
_DAYS_1970_TO_2000 = 10_957
_MICROS_1970_TO_2000 = _DAYS_1970_TO_2000 * 86_400 * 1_000_000


class _Column:
    """One column of a batch, ready to lay out: which rows are NULL, and either fixed-width
    big-endian values (``fixed``: rows x width bytes) or variable-length bytes (``data`` and
    ``offsets``, NULL rows empty)."""

    def __init__(self, valid: np.ndarray, *, fixed: np.ndarray | None = None,
                 data: np.ndarray | None = None, offsets: np.ndarray | None = None):
        self.valid = valid
        self.fixed = fixed
        self.data = data
        self.offsets = offsets

    def lengths(self) -> np.ndarray:
        if self.fixed is not None:
            return np.where(self.valid, self.fixed.shape[1], 0)
        assert self.offsets is not None  # not fixed-width: data and offsets are set
        return np.diff(self.offsets)


def _validity(column: pa.Array) -> np.ndarray:
    if column.null_count == 0:
        return np.ones(len(column), dtype=bool)
    return column.is_valid().to_numpy(zero_copy_only=False)


def _fixed(big_endian: str, to_numbers: Callable[[pa.Array], pa.Array] = lambda c: c) -> Callable[[pa.Array], _Column]:
    def encode(column: pa.Array) -> _Column:
        valid = _validity(column)
        numbers = to_numbers(column).fill_null(0).to_numpy(zero_copy_only=False)
        values = numbers.astype(big_endian)
        return _Column(valid, fixed=values.view(np.uint8).reshape(len(column), values.dtype.itemsize))
    return encode


def _bool(column: pa.Array) -> _Column:
    values = column.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)
    return _Column(_validity(column), fixed=values.reshape(len(column), 1))


def _variable(column: pa.Array) -> _Column:
    """Strings (UTF-8, as PostgreSQL's text receive expects) and binary values."""
    valid = _validity(column)
    filled = column.fill_null(b"" if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type) else "")
    offset_type = np.int64 if pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type) else np.int32
    _, offset_buffer, data_buffer = filled.buffers()
    offsets = np.frombuffer(offset_buffer, dtype=offset_type)[filled.offset:filled.offset + len(filled) + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    return _Column(valid, data=data, offsets=offsets.astype(np.int64))


def _micros_since_2000(column: pa.Array) -> pa.Array:
    micros = column.cast(pa.timestamp("us", column.type.tz)).cast(pa.int64())
    return pc.subtract(micros, _MICROS_1970_TO_2000)


def _days_since_2000(column: pa.Array) -> pa.Array:
    return pc.subtract(column.cast(pa.int32()), _DAYS_1970_TO_2000)


def _encoder_for(arrow_type: pa.DataType, pg_type: str) -> Callable[[pa.Array], _Column] | None:
    """How a column of ``arrow_type`` is sent to a column of type ``pg_type`` (typname), or
    None when only the text (CSV) form is safe."""
    checks: list[tuple[bool, Callable[[pa.Array], _Column]]] = [
        (pg_type == "int8" and pa.types.is_int64(arrow_type), _fixed(">i8")),
        (pg_type == "int4" and pa.types.is_int32(arrow_type), _fixed(">i4")),
        (pg_type == "int2" and (pa.types.is_int16(arrow_type) or pa.types.is_int8(arrow_type)), _fixed(">i2")),
        (pg_type == "float8" and pa.types.is_float64(arrow_type), _fixed(">f8")),
        (pg_type == "float4" and pa.types.is_float32(arrow_type), _fixed(">f4")),
        (pg_type == "bool" and pa.types.is_boolean(arrow_type), _bool),
        (pg_type in ("text", "varchar") and (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)),
         _variable),
        (pg_type == "bytea" and (pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type)), _variable),
        (pg_type == "date" and pa.types.is_date32(arrow_type), _fixed(">i4", _days_since_2000)),
        # nanoseconds would have to be rounded: the CSV path leaves that to PostgreSQL
        (pa.types.is_timestamp(arrow_type) and arrow_type.unit != "ns"
         and pg_type == ("timestamptz" if arrow_type.tz is not None else "timestamp"),
         _fixed(">i8", _micros_since_2000)),
    ]
    return next((encode for matches, encode in checks if matches), None)


class BinaryEncoder:
    """Encodes record batches of one Arrow schema as binary COPY rows (no header or trailer)."""

    def __init__(self, encoders: list[Callable[[pa.Array], _Column]]):
        self._encoders = encoders

    def encode(self, batch: pa.RecordBatch) -> bytes:
        rows = batch.num_rows
        field_count = np.frombuffer(len(self._encoders).to_bytes(2, "big"), dtype=np.uint8)
        segments: list[np.ndarray | _Column] = [np.broadcast_to(field_count, (rows, 2))]
        for encode, array in zip(self._encoders, batch.columns, strict=False):
            segments.extend(_segments(encode(array), rows))
        # a run of fixed-width segments is one block per row: one scatter instead of several
        merged: list[np.ndarray | _Column] = []
        for segment in segments:
            if isinstance(segment, np.ndarray) and merged and isinstance(merged[-1], np.ndarray):
                merged[-1] = np.concatenate([merged[-1], segment], axis=1)
            else:
                merged.append(segment)
        row_sizes = np.zeros(rows, dtype=np.int64)
        for segment in merged:
            row_sizes += segment.shape[1] if isinstance(segment, np.ndarray) else segment.lengths()
        position = np.zeros(rows, dtype=np.int64)
        np.cumsum(row_sizes[:-1], out=position[1:])
        out = np.empty(int(row_sizes.sum()), dtype=np.uint8)
        for segment in merged:
            if isinstance(segment, np.ndarray):
                out[position[:, None] + np.arange(segment.shape[1])] = segment
                position = position + segment.shape[1]
            else:
                lengths = segment.lengths()
                offsets, data = segment.offsets, segment.data
                assert offsets is not None and data is not None  # a segment not merged above is variable-length
                first, last = int(offsets[0]), int(offsets[-1])
                if last > first:
                    out[np.repeat(position - offsets[:-1], lengths) + np.arange(first, last)] = data[first:last]
                position = position + lengths
        return out.tobytes()


def _segments(column: _Column, rows: int) -> list[np.ndarray | _Column]:
    """A column as laid out in each row: the 32-bit length, then the value's bytes, as
    fixed-width blocks (rows x width) where every row has the same width."""
    lengths = column.lengths()
    length_field = np.where(column.valid, lengths, -1).astype(">i4").view(np.uint8).reshape(rows, 4)
    if column.fixed is not None:
        if column.valid.all():
            return [length_field, column.fixed]
        # NULL rows carry no value bytes: lay the values out as variable-length
        offsets = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return [length_field, _Column(column.valid, data=column.fixed[column.valid].reshape(-1), offsets=offsets)]
    return [length_field, column]


def binary_encoder(schema: pa.Schema, pg_types: Sequence[str] | None) -> BinaryEncoder | None:
    """An encoder when every field of ``schema`` matches its column type in ``pg_types``
    exactly (same order), else None (send CSV)."""
    if pg_types is None or len(pg_types) != len(schema):
        return None
    encoders = [_encoder_for(field.type, pg_type) for field, pg_type in zip(schema, pg_types, strict=False)]
    if any(encode is None for encode in encoders):
        return None
    return BinaryEncoder(encoders)  # type: ignore[arg-type]
