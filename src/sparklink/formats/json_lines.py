"""JSON lines (executor side): one JSON object per line.

Writing (:class:`JsonLinesEncoder`): as Spark's JSON writer (null fields left out, timestamps
``yyyy-MM-dd'T'HH:mm:ss.SSSXXX``, decimals as numbers), formatted column-wise by Arrow kernels.

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
import re
from collections.abc import Iterator
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from sparklink.errors import DataError
from sparklink.formats.bad_records import location
from sparklink.formats.base import FileFormat, RowEncoder, SegmentInput, joined_bytes
from sparklink.formats.compression import codec_for, read_whole
from sparklink.formats.options import MAX_AUTO_BATCH_ROWS
from sparklink.formats.read_config import ReadConfig
from sparklink.formats.records import RawRecord, lines_with_offsets, records_to_batch, with_null_corrupt_column
from sparklink.formats.spark_text import RowJoiner, double_text, string_bytes, timestamp_text
from sparklink.formats.text import read_lines, segment_bytes
from sparklink.storage.file_input import open_binary

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
_UNICODE_ESCAPE = re.compile(r"\\u00([0-9a-f]{2})")


def _jackson_string(value: str) -> str:
    """A JSON string as Jackson (Spark's JSON writer) writes it: control characters without a
    short escape as ``\\u00XX``, upper-case hex."""
    return _UNICODE_ESCAPE.sub(lambda match: "\\u00" + match.group(1).upper(), _JSON_DUMPS(value))


def _may_need_escapes(column: pa.Array) -> bool:
    """Whether the string data of this array's values holds a backslash, a quote or a control
    character (only the bytes of its own values are scanned; see :func:`string_bytes`)."""
    raw = string_bytes(column)  # comparisons, not a lookup table: numpy compares 8x faster than it gathers
    return bool((raw < 0x20).any() or (raw == 0x22).any() or (raw == 0x5C).any())


def _json_text(column: pa.Array, kind: pa.DataType) -> list[Any]:
    """One column's JSON values as pieces to join (constant texts and string arrays), null
    where the value is null (the field is then left out, as Spark's writer does).

    Integers, floats, decimals, booleans, strings, dates and timestamps are formatted by Arrow
    kernels in Spark's conventions (:mod:`~sparklink.formats.spark_text`); other types
    (binary, nested, times) value by value in Python."""
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_decimal(kind):
        return [pc.cast(column, pa.string())]
    if pa.types.is_floating(kind):
        return double_text(column, non_finite_quoted=True)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = column
        if _may_need_escapes(column):
            for raw, escaped in _JSON_SHORT_ESCAPES:
                text = pc.replace_substring(text, raw, escaped)
            if pc.any(pc.match_substring_regex(text, r"[\x00-\x1f]")).as_py():  # \u00XX escapes: rare, in Python
                return [pa.array([None if v is None else _jackson_string(v) for v in column.to_pylist()], pa.string())]
        return ['"', text, '"']
    if pa.types.is_date32(kind):
        return ['"', pc.cast(column, pa.string()), '"']
    if pa.types.is_timestamp(kind):
        return ['"', *timestamp_text(column), '"']
    return [pa.array([None if v is None else _JSON_DUMPS(v) for v in column.to_pylist()], pa.string())]


class JsonLinesEncoder(RowEncoder):
    """One JSON object per line, as Spark's JSON writer writes it: null fields left out,
    timestamps ``yyyy-MM-dd'T'HH:mm:ss.SSSXXX`` (UTC), decimals as numbers, doubles as Java
    prints them, binary base64.

    A line is assembled column-wise by Arrow kernels: each column's values are formatted as
    JSON text once per batch, then joined with the ``"name":`` keys; no per-row Python. A
    column with nulls is joined with its key first, so that a null drops the whole field.
    """

    def __init__(self, schema: pa.Schema):
        self.keys = [_JSON_DUMPS(field.name) + ":" for field in schema]
        self.joiner = RowJoiner()

    def encode(self, batch: pa.RecordBatch) -> bytes | memoryview:
        count = batch.num_rows
        if count == 0:
            return b""
        pieces: list[Any] = ["{"]
        omitted = False
        for index, (key, column, field) in enumerate(zip(self.keys, batch.columns, batch.schema, strict=False)):
            field_pieces = [("," if index else "") + key, *_json_text(column, field.type)]
            if column.null_count:
                pieces.append(self.joiner.join(field_pieces, count, nulls_empty=False))
                omitted = True
            else:
                pieces += field_pieces
        pieces.append("}\n")
        lines = self.joiner.join(pieces, count, nulls_empty=omitted)
        if omitted and batch.column(0).null_count:  # a line whose first field is left out starts with "{,"
            lines = pc.if_else(batch.column(0).is_null(), pc.replace_substring(lines, "{,", "{", max_replacements=1),
                               lines)
        return joined_bytes(lines)


def read_table(source: BinaryIO, name: str) -> pa.Table:
    """A whole JSON lines file (``sparklink verify``); a line that is not JSON is a DataError
    naming the file and the line. Its columns are every field any line has (the sink leaves null
    fields out, as Spark does), in the order they first appear."""
    rows = _json_rows(name, read_lines(source))
    names = dict.fromkeys(key for row in rows for key in row)
    return pa.table({key: [row.get(key) for row in rows] for key in names})


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

    def infer_schema(self, path: str, config: ReadConfig) -> pa.Schema:
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
