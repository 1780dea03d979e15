"""JSON lines (executor side): one JSON object per line.

Writing (:class:`JsonLinesEncoder`): timestamps ISO-8601, binary base64, decimals as strings,
formatted column-wise by Arrow kernels.

Reading (:class:`JsonLinesFormat`): with ``pyarrow.json`` and, for segments holding a malformed
line, record by record with Python's ``json`` to locate it. Fields of an object that are not in
the schema are ignored; missing fields are null.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
from collections.abc import Iterator
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from sparklink.errors import DataError
from sparklink.files.formats.base import (
    FileFormat,
    RowEncoder,
    SegmentInput,
    is_utc_timestamp,
    joined_bytes,
    timestamp_text,
)
from sparklink.files.formats.records import RawRecord, lines_with_offsets, records_to_batch, with_null_corrupt_column
from sparklink.files.formats.text import read_lines, segment_bytes
from sparklink.files.source.bad_records import location
from sparklink.files.source.compression import codec_for, read_whole
from sparklink.files.source.config import MAX_AUTO_BATCH_ROWS, FileSourceConfig
from sparklink.files.source.file_input import open_binary

INFER_BYTES = 4 * 1024 * 1024

# ---------------------------------------------------------------------------------- writing


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


_JSON_DUMPS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_json_default).encode
_JSON_SHORT_ESCAPES = (("\\", "\\\\"), ("\"", "\\\""), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"),
                       ("\b", "\\b"), ("\f", "\\f"))
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _may_need_escapes(column: pa.Array) -> bool:
    """Whether the string data of this array's values holds a backslash, a quote or a control
    character. Only the bytes between the array's first and last offsets are scanned: a
    record batch sliced from a larger table shares its data buffer, and scanning all of it for
    every slice made the check cost as much as the whole table."""
    data = column.buffers()[2]
    if data is None or len(column) == 0:
        return False
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64 if pa.types.is_large_string(column.type) else np.int32)
    first, last = int(offsets[column.offset]), int(offsets[column.offset + len(column)])
    raw = np.frombuffer(data, dtype=np.uint8, count=last - first, offset=first)
    return bool((raw < 0x20).any() or (raw == 0x22).any() or (raw == 0x5C).any())


def _integral_floats(column: pa.Array) -> bool:
    """Whether any value is integral or not finite: only those can print without a '.' (a
    finite value with a fraction always prints one), so the text check can be skipped."""
    return bool(pc.any(pc.equal(pc.floor(column), column)).as_py())


def _iso_separator(text: pa.Array) -> pa.Array:
    """``YYYY-MM-DD HH:MM:SS...`` -> ``YYYY-MM-DDTHH:MM:SS...``: a slice replace at byte 10
    when every value has a four-digit year (a fixed layout), else the first space."""
    lengths = pc.min_max(pc.binary_length(text))
    if lengths["min"].as_py() is not None and lengths["min"].as_py() == lengths["max"].as_py() == 26:
        return pc.binary_replace_slice(text, 10, 11, "T")
    return pc.replace_substring(text, " ", "T", max_replacements=1)


def _json_text(column: pa.Array, kind: pa.DataType) -> pa.Array:
    """JSON text of every value of one column, as Python's ``json`` writes it (nulls stay null).

    Integers, floats, decimals, booleans, strings, dates and UTC or naive timestamps are
    formatted by Arrow kernels; other types (binary, nested, times) value by value in Python.
    """
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        return pc.cast(column, pa.string())
    if pa.types.is_floating(kind):
        text = pc.cast(column, pa.string())
        if not _integral_floats(column):
            return text
        # Arrow writes 1.0 as "1"; json writes "1.0" (and readers infer a double from it)
        integral = pc.invert(pc.or_(pc.or_(pc.match_substring(text, "."), pc.match_substring(text, "e")),
                                    pc.match_substring(text, "n")))
        text = pc.if_else(integral, pc.binary_join_element_wise(text, ".0", ""), text)
        if not pc.all(pc.is_finite(column), skip_nulls=True).as_py():
            for arrow, python in _NON_FINITE.items():
                text = pc.if_else(pc.equal(text, arrow), python, text)
        return text
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = column
        if _may_need_escapes(column):
            for raw, escaped in _JSON_SHORT_ESCAPES:
                text = pc.replace_substring(text, raw, escaped)
            if pc.any(pc.match_substring_regex(text, r"[\x00-\x1f]")).as_py():  # \u00XX escapes: rare, in Python
                return pa.array([None if v is None else _JSON_DUMPS(v) for v in column.to_pylist()], pa.string())
        return pc.binary_join_element_wise('"', text, '"', "")
    if pa.types.is_date32(kind) or pa.types.is_decimal(kind):  # decimals as strings, digits as str(Decimal)
        return pc.binary_join_element_wise('"', pc.cast(column, pa.string()), '"', "")
    if is_utc_timestamp(kind):
        text = _iso_separator(timestamp_text(column))
        text = pc.if_else(pc.ends_with(text, ".000000"), pc.utf8_slice_codeunits(text, 0, -7), text)  # as isoformat()
        return pc.binary_join_element_wise('"', text, '+00:00"' if kind.tz else '"', "")
    return pa.array([None if v is None else _JSON_DUMPS(v) for v in column.to_pylist()], pa.string())


class JsonLinesEncoder(RowEncoder):
    """One JSON object per line (timestamps ISO-8601, binary base64, decimals as strings).

    A line is assembled column-wise by Arrow kernels: each column's values are formatted as
    JSON text once per batch, then joined with the ``"name":`` keys; no per-row Python.
    """

    def __init__(self, schema: pa.Schema):
        self.keys = [("{" if i == 0 else ",") + _JSON_DUMPS(field.name) + ":" for i, field in enumerate(schema)]

    def encode(self, batch: pa.RecordBatch) -> bytes:
        if batch.num_rows == 0:
            return b""
        if batch.num_columns == 0:
            return b"{}\n" * batch.num_rows
        pieces: list[Any] = []
        for key, column, field in zip(self.keys, batch.columns, batch.schema, strict=False):
            pieces += [key, pc.fill_null(_json_text(column, field.type), "null")]
        pieces.append("}\n")
        return joined_bytes(pc.binary_join_element_wise(*pieces, ""))


def read_table(source: BinaryIO, name: str) -> pa.Table:
    """A whole JSON lines file (``sparklink verify``); a line that is not JSON is a DataError
    naming the file and the line."""
    return pa.Table.from_pylist(_json_rows(name, read_lines(source)))


def _json_rows(name: str, lines: list[str]) -> list[dict]:
    rows = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{name}, line {number}: not valid JSON: {exc}") from None
    return rows


# ---------------------------------------------------------------------------------- reading



class JsonLinesFormat(FileFormat):
    name = "json"

    def infer_schema(self, path: str, config: FileSourceConfig) -> pa.Schema:
        codec = codec_for(path, config.compression)
        if codec is None:
            with open_binary(path, config.s3) as handle:
                head = handle.read(INFER_BYTES)
        else:
            head = read_whole(path, codec, config.s3)[:INFER_BYTES]
        if len(head) == INFER_BYTES:
            head = head[: head.rfind(b"\n") + 1]
        return pajson.read_json(io.BytesIO(head)).schema

    def read(self, source: SegmentInput) -> Iterator[pa.RecordBatch]:
        body, base = segment_bytes(source)
        if not body.strip():
            return
        wanted = list(source.data_schema.names)
        try:
            table = pajson.read_json(
                io.BytesIO(body),
                read_options=pajson.ReadOptions(block_size=max(1 << 20, min(len(body) + 1, 1 << 24))),
                parse_options=pajson.ParseOptions(explicit_schema=source.data_schema,
                                                  unexpected_field_behavior="ignore"),
            )
        except pa.ArrowInvalid:
            yield records_to_batch(self._records(body, base, source), source, from_text=False)
            return
        for batch in table.select(wanted).to_batches(max_chunksize=source.config.batch_size or MAX_AUTO_BATCH_ROWS):
            yield with_null_corrupt_column(batch, source)

    @staticmethod
    def _records(body: bytes, base: int, source: SegmentInput) -> list[RawRecord]:
        line_base = 0 if base == 0 else None
        records: list[RawRecord] = []
        for index, offset, raw in lines_with_offsets(body):
            if not raw.strip():
                continue
            where = location(byte_offset=base + offset, line=None if line_base is None else index + 1)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                records.append(RawRecord(values=None, text=raw.decode("utf-8", errors="replace"), where=where,
                                         parse_error=f"not valid UTF-8 ({exc.reason} at column {exc.start + 1})"))
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                records.append(RawRecord(values=None, text=text, where=where, parse_error=f"invalid JSON: {exc}"))
                continue
            if not isinstance(value, dict):
                records.append(RawRecord(values=None, text=text, where=where,
                                         parse_error=f"expected a JSON object, found {type(value).__name__}"))
                continue
            records.append(RawRecord(values=value, text=text, where=where))
        return records
