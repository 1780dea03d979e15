"""Values as Spark's own JSON and CSV writers print them, and rows assembled from them, for
the row encoders (executor side, one record batch at a time, column by column with Arrow
kernels; Python only for rare values).

* doubles and floats as Java's ``Double.toString``: ``1.0``, ``0.001``, ``1.0E7``, ``1.5E-7``;
  NaN and the infinities as ``NaN``, ``Infinity``, ``-Infinity`` (JSON: as strings, as Jackson
  writes them). Arrow prints the shortest digits that read back as the same double; Java 17
  sometimes prints one more digit (``5.6843418860808015E-14``): the values are equal;
* decimals as Java's ``BigDecimal.toString`` (``12.50``, ``1E-9``), which Arrow's cast prints;
* timestamps as ``yyyy-MM-dd'T'HH:mm:ss.SSSXXX`` in UTC (``2023-11-15T03:22:11.123Z``): the
  microseconds are floored to milliseconds and the values formatted as naive ones (Arrow
  formats a zoned timestamp through the time-zone database, about 20x slower, even for UTC);
  timestamps without a time zone (Spark's ``TIMESTAMP_NTZ``) as ``yyyy-MM-dd'T'HH:mm:ss.SSS``;
* dates as ``yyyy-MM-dd``, booleans as ``true`` / ``false``.

Rows are assembled by :class:`RowJoiner`: Arrow's element-wise join of constant texts and
value texts, with the constants given as arrays (the join broadcasts a scalar about 3x slower
than it reads an array).
"""

from __future__ import annotations

import decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

JAVA_PLAIN_MIN = 1e-3   # Double.toString prints |x| in [1e-3, 1e7) as plain digits, others as d.dddE[-]n
JAVA_PLAIN_MAX = 1e7
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_FIXED_LAYOUT_MS = (-30_610_224_000_000, 253_402_300_800_000)  # 1000-01-01 to 10000-01-01 (epoch ms): 4-digit years
_PER_MS = {"us": 1_000, "ns": 1_000_000}


def _java_scientific(value: float) -> str:
    """``Double.toString`` of a finite value outside [1e-3, 1e7): the shortest digits as
    ``d.ddd`` (at least one decimal), ``E`` and the exponent."""
    sign, digits, exponent = decimal.Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)  # a finite value
    text = "".join(map(str, digits))
    power = len(text) + exponent - 1
    text = text.rstrip("0") or "0"
    return ("-" if sign else "") + text[0] + "." + (text[1:] or "0") + "E" + str(power)


def double_text(column: pa.Array, *, non_finite_quoted: bool = False) -> list[pa.Array]:
    """Java's ``Double.toString`` of every value, as one or two string arrays to join (the
    second, where needed, holds ``.0`` for the integral values Arrow prints without a point);
    a null value stays null. ``non_finite_quoted``: NaN and the infinities as JSON strings."""
    text = pc.cast(column, pa.string())
    if column.null_count == len(column):
        return [text]
    integral = pc.equal(pc.floor(column), column)  # NaN: false; infinities: true (replaced below)
    magnitude = pc.abs(column)
    bounds = pc.min_max(magnitude)  # NaN is skipped
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    special = None
    if low is None or high >= JAVA_PLAIN_MAX or 0.0 < low < JAVA_PLAIN_MIN or pc.any(pc.is_nan(column)).as_py() or (
            low == 0.0 and pc.any(pc.and_(pc.less(magnitude, JAVA_PLAIN_MIN), pc.not_equal(magnitude, 0.0))).as_py()):
        special = pc.fill_null(pc.or_(pc.invert(pc.is_finite(column)), pc.and_(pc.not_equal(magnitude, 0.0), pc.or_(
            pc.less(magnitude, JAVA_PLAIN_MIN), pc.greater_equal(magnitude, JAVA_PLAIN_MAX)))), False)
    if special is not None and pc.any(special).as_py():
        words = []
        for value in pc.take(column, pc.indices_nonzero(special)).to_pylist():
            if value != value or value in (float("inf"), float("-inf")):
                word = _NON_FINITE[repr(value)]
                words.append(f'"{word}"' if non_finite_quoted else word)
            else:
                words.append(_java_scientific(value))
        text = pc.replace_with_mask(text, special, pa.array(words, pa.string()))
        integral = pc.and_(integral, pc.invert(special))
    if not pc.any(integral).as_py():
        return [text]
    return [text, pc.if_else(integral, ".0", "")]


def timestamp_text(column: pa.Array) -> list[Any]:
    """``yyyy-MM-dd'T'HH:mm:ss.SSS`` of every value (UTC), followed by ``Z`` for a zoned column:
    an array and, for a zoned column, the constant ``"Z"``; a null value stays null."""
    kind = column.type
    if kind.unit in _PER_MS:  # floored, so 1969-12-31T23:59:59.9999 stays in its millisecond
        count, offset = len(column), column.offset
        raw = np.frombuffer(column.buffers()[1], dtype=np.int64, count=offset + count)
        millis = np.empty(offset + count, dtype=np.int64)
        np.floor_divide(raw[offset:], _PER_MS[kind.unit], out=millis[offset:])
        naive = pa.Array.from_buffers(pa.timestamp("ms"), count, [column.buffers()[0], pa.py_buffer(millis)],
                                      column.null_count, offset)
    else:
        naive = pc.cast(column.view(pa.timestamp(kind.unit)), pa.timestamp("ms"))
    text = pc.cast(naive, pa.string())
    bounds = pc.min_max(naive.view(pa.int64()))
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is not None and _FIXED_LAYOUT_MS[0] <= low and high < _FIXED_LAYOUT_MS[1]:
        text = pc.binary_replace_slice(text, 10, 11, "T")
    else:
        text = pc.replace_substring(text, " ", "T", max_replacements=1)
    return [text, "Z"] if kind.tz is not None else [text]


def string_bytes(column: pa.Array) -> np.ndarray:
    """The bytes of a string array's values, back to back (a view of its data buffer: only the
    bytes between its first and last offsets, as a batch sliced from a larger one shares its buffer)."""
    data = column.buffers()[2]
    if data is None or len(column) == 0:
        return np.zeros(0, np.uint8)
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64 if pa.types.is_large_string(column.type) else np.int32)
    first, last = int(offsets[column.offset]), int(offsets[column.offset + len(column)])
    return np.frombuffer(data, dtype=np.uint8, count=last - first, offset=first)


class RowJoiner:
    """Row-wise concatenation of constant texts and string arrays (one per encoder; the
    constants of the last batch length are kept for the next batch)."""

    def __init__(self) -> None:
        self.length = -1
        self.constants: dict[str, pa.Array] = {}

    def _constant(self, text: str, length: int) -> pa.Array:
        if length != self.length:
            self.length, self.constants = length, {}
        array = self.constants.get(text)
        if array is None:
            array = self.constants[text] = pa.repeat(pa.scalar(text, pa.string()), length)
        return array

    def join(self, pieces: list[Any], length: int, *, nulls_empty: bool) -> pa.Array:
        """``pieces`` (constant texts and string arrays of ``length`` values) joined row by row.
        ``nulls_empty``: a null piece counts as empty; else a row with a null piece is null."""
        merged: list[Any] = []
        for piece in pieces:
            if isinstance(piece, str):
                if not piece:
                    continue
                if merged and isinstance(merged[-1], str):
                    merged[-1] += piece
                    continue
            merged.append(piece)
        arrays = [self._constant(piece, length) if isinstance(piece, str) else piece for piece in merged]
        if not arrays:
            return self._constant("", length)
        if len(arrays) == 1:
            return pc.fill_null(arrays[0], "") if nulls_empty else arrays[0]
        if nulls_empty:
            return pc.binary_join_element_wise(*arrays, "", null_handling="replace", null_replacement="")
        return pc.binary_join_element_wise(*arrays, "")
