"""Partition values as Delta's log spells them (text in ``partitionValues``), both ways: the
sink writes a value's text (executor side, :mod:`sparklink.delta.files`; driver side for
compaction), the source turns the text back into a typed column (executor side). Kept apart
from the writer's module so that the source's planning process does not import the writer.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, time

import pyarrow as pa

from sparklink.arrow_arrays import repeated
from sparklink.errors import DataError


def partition_value_text(value: object, column: str = "") -> str | None:
    """A partition value as Delta's log spells it (None for null), exactly: a reader that parses
    the text back into the column's type gets the same value. Doubles keep their sign (``-0.0``)
    and spell NaN and infinities as Java does (``NaN``, ``Infinity``, ``-Infinity``), which Spark's
    Delta reader and delta-rs both parse; a binary value is the string whose UTF-8 bytes it is
    (what both readers take back), so a value that is not UTF-8 is refused, naming ``column``.
    Delta reads an empty string (and so an empty binary value) back as null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise DataError(f"partition column '{column}': the binary value {bytes(value)[:32]!r} is not UTF-8 text, "
                            "and Delta's log keeps a binary partition value as the text whose UTF-8 bytes it is "
                            "(partition by another column, or encode the value, e.g. hex())") from None
    if isinstance(value, (datetime, time)):  # what Arrow gives for timestamp and time columns
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    return str(value)


_ZONE = re.compile(r"(Z|[+-]\d\d:?\d\d)$")


def partition_column(value: str | None, kind: pa.DataType, rows: int) -> pa.Array:
    """A partition value as the log spells it (Delta's partition value serialization), repeated
    ``rows`` times as a column of ``kind``. A TIMESTAMP value without a zone is UTC."""
    text = repeated(value, pa.string(), rows)
    if pa.types.is_string(kind):
        return text
    if value is not None and pa.types.is_timestamp(kind) and kind.tz is not None and not _ZONE.search(value):
        return text.cast(pa.timestamp(kind.unit)).cast(kind)  # read as UTC wall time, then labelled UTC
    return text.cast(kind)
