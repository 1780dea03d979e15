"""CSV (executor side).

Writing (:class:`CsvEncoder`): as Spark's CSV writer (quoted only where needed, ``\\`` as the
escape), the header line (the sink's option ``header``) once at the start of each file.

Reading (:class:`CsvFormat`): pyarrow's vectorised reader, with Python's ``csv`` module as the
record-by-record fallback that locates malformed records. Options: ``header`` (columns are then matched to the schema by name), ``delimiter``,
``quote``, ``escape``, ``multiLine`` (quoted values may contain newlines; such files are not
split). Empty values are null.

Escapes: with ``escape`` unset (the default) the reader follows Spark's CSV reader, whose
escape ``\\`` acts only INSIDE quoted values: ``"x\\"y"`` is ``x"y``, ``"C:\\\\d"`` is ``C:\\d``,
an unquoted ``C:\\path`` stays as it is (Spark's writer leaves such values bare). See
:func:`spark_unescape`. An explicit ``escape`` is pyarrow's / Python's escape, active everywhere.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from sparklink.errors import DataError
from sparklink.formats.bad_records import location
from sparklink.formats.base import FileFormat, RowEncoder, SegmentInput, joined_bytes
from sparklink.formats.compression import codec_for, read_whole
from sparklink.formats.options import MAX_AUTO_BATCH_ROWS
from sparklink.formats.read_config import CsvOptions, ReadConfig
from sparklink.formats.records import RawRecord, lines_with_offsets, records_to_batch, with_null_corrupt_column
from sparklink.formats.spark_text import RowJoiner, double_text, string_bytes, timestamp_text
from sparklink.formats.text import segment_bytes
from sparklink.storage.file_input import open_binary
from sparklink.storage.s3_config import S3Config

INFER_BYTES = 4 * 1024 * 1024
HEADER_BYTES = 1024 * 1024

# ---------------------------------------------------------------------------------- writing


_CSV_QUOTED = (0x2C, 0x22, 0x0A, 0x0D, 0x5C)  # bytes that make a value quoted: ',', '"', line breaks, '\'


def csv_field(column: pa.Array) -> pa.Array:
    """CSV fields of a string column as Spark's CSV writer writes them: bare, or quoted when the
    value holds a ``,``, a ``"``, a line break or a ``\\``, starts with ``#`` or is empty; inside
    quotes ``"`` and ``\\`` are escaped with ``\\``. (Spark leaves a value whose only special
    character is ``\\`` bare; quoting it lets a reader whose escape is ``\\`` read it back.)"""
    raw = string_bytes(column)
    quoted = any(bool((raw == byte).any()) for byte in _CSV_QUOTED)
    empty = pc.min_max(pc.binary_length(column))["min"].as_py() == 0
    comment = bool((raw == 0x23).any()) and bool(pc.any(pc.starts_with(column, "#")).as_py())
    if not (quoted or empty or comment):
        return column
    escaped = pc.replace_substring(pc.replace_substring(column, "\\", "\\\\"), '"', '\\"')
    needs = pc.or_(pc.or_(pc.match_substring_regex(column, r'[,"\r\n\\]'), pc.equal(pc.binary_length(column), 0)),
                   pc.starts_with(column, "#"))
    return pc.if_else(needs, pc.binary_join_element_wise('"', escaped, '"', ""), column)


def _csv_text(column: pa.Array, kind: pa.DataType) -> list[Any] | None:
    """One column's CSV fields as pieces to join (null where the value is null), in Spark's
    conventions (:mod:`~sparklink.formats.spark_text`), or None for a type left to
    pyarrow's writer."""
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_decimal(kind) \
            or pa.types.is_date32(kind):
        return [pc.cast(column, pa.string())]
    if pa.types.is_floating(kind):
        return double_text(column)
    if pa.types.is_timestamp(kind):
        return timestamp_text(column)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return [csv_field(column)]
    return None


class CsvEncoder(RowEncoder):
    """CSV as Spark's CSV writer writes it (see :func:`csv_field`; nulls are empty fields); the
    header line (option ``header``) starts each file once.

    Numbers (decimals too), booleans, strings, dates and timestamps are formatted column-wise by
    Arrow kernels; a batch with other types goes through pyarrow's writer.
    """

    def __init__(self, *, header: bool, schema: pa.Schema):
        self.with_header = header
        self.schema = schema
        self.joiner = RowJoiner()

    def header(self) -> bytes:
        if not self.with_header:
            return b""
        names = csv_field(pa.array(self.schema.names, pa.string()))
        return (",".join(names.to_pylist()) + "\n").encode("utf-8")

    def encode(self, batch: pa.RecordBatch) -> bytes | memoryview:
        count = batch.num_rows
        if count == 0:
            return b""
        texts = [_csv_text(column, field.type) for column, field in zip(batch.columns, batch.schema, strict=False)]
        if batch.num_columns == 0 or any(text is None for text in texts):
            sink = io.BytesIO()
            pacsv.write_csv(batch, sink, pacsv.WriteOptions(include_header=False))
            return sink.getvalue()
        pieces: list[Any] = []
        for column, text in zip(batch.columns, texts, strict=True):
            assert text is not None
            if column.null_count and len(text) > 1:  # a null value is an empty field, its constant parts too
                text = [self.joiner.join(text, count, nulls_empty=False)]
            pieces += [*text, ","]
        pieces[-1] = "\n"
        return joined_bytes(self.joiner.join(pieces, count, nulls_empty=True))


def read_table(source: BinaryIO, name: str) -> pa.Table:
    """A whole CSV file with its header line, types inferred (``sparklink verify``); ``\\``
    escapes inside quotes only, as the sink writes them and Spark reads them (:func:`spark_unescape`)."""
    data = source.read()
    data = spark_unescape(data, CsvOptions(multi_line=True)) or data
    return pacsv.read_csv(io.BytesIO(data), parse_options=pacsv.ParseOptions(newlines_in_values=True))


# ---------------------------------------------------------------------------------- reading


_BACKSLASH = 0x5C


def spark_unescape(data: bytes, options: CsvOptions) -> bytes | None:
    """``data`` rewritten so that a reader without an escape character (doubled quotes mean a
    quote) reads it as Spark's CSV reader does with its default escape ``\\``, which acts only
    inside quoted values: there ``\\"`` becomes ``""`` and ``\\\\`` becomes ``\\`` (a ``\\`` before
    any other character stays, as Spark keeps it); outside quotes nothing changes. None when
    nothing changes: the user set ``escape`` (their escape then acts everywhere, as before), there
    is no quoting, or no ``\\`` lies inside quotes (files without any ``\\`` cost one byte search).

    Executor side (and the driver for headers and inference). Vectorised over the positions of
    the quote and backslash bytes: a quote after an odd run of backslashes never opens or closes
    a value (inside quotes it is escaped, outside it is not at a field's start), every other
    quote toggles (a doubled quote toggles twice), so a backslash is inside quotes when an odd
    number of such quotes precede it. That holds when every opening quote starts a field, as in
    any file Spark or the sink writes; otherwise :func:`_unescape_scan` decides quote by quote.
    ``data`` starts outside quotes (at a record's start).
    """
    if options.escape is not None or not options.quote or b"\\" not in data:
        return None
    quote, delimiter = ord(options.quote), ord(options.delimiter)
    if _BACKSLASH in (quote, delimiter):
        return None
    raw = np.frombuffer(data, dtype=np.uint8)
    size = len(raw)
    quotes = np.flatnonzero(raw == quote)
    if len(quotes) == 0:
        return None
    slashes = np.flatnonzero(raw == _BACKSLASH)
    starts = np.ones(len(slashes), dtype=bool)  # first backslash of its run
    starts[1:] = np.diff(slashes) != 1
    ends = np.ones(len(slashes), dtype=bool)  # last backslash of its run
    ends[:-1] = starts[1:]
    run = np.cumsum(starts) - 1
    run_start = slashes[starts]
    odd_run = ((slashes[ends] - run_start + 1) % 2 == 1)[run]
    before_quote = raw[np.minimum(slashes + 1, size - 1)] == quote
    before_quote &= slashes + 1 < size
    escaping = ends & odd_run & before_quote  # the backslash that escapes the quote after it
    escaped = slashes[escaping] + 1
    if len(escaped):
        found = escaped[np.minimum(np.searchsorted(escaped, quotes), len(escaped) - 1)] == quotes
        toggles = quotes[~found]
    else:
        toggles = quotes
    opening = toggles[0::2]
    previous = np.full(len(opening), -2, dtype=np.int64)
    previous[1:] = toggles[1::2][: len(opening) - 1]
    byte_before = raw[np.maximum(opening - 1, 0)]
    at_field_start = (byte_before == delimiter) | (byte_before == 0x0A) | (byte_before == 0x0D) | (opening == 0)
    if not bool((at_field_start | (previous == opening - 1)).all()):
        return _unescape_scan(data, quote, delimiter)
    inside = np.searchsorted(toggles, slashes) % 2 == 1
    if not bool(inside.any()):
        return None
    quoting = slashes[inside & escaping]
    dropped = slashes[inside & ((slashes - run_start[run]) % 2 == 1)]  # the second of each \\\\ pair
    if len(quoting) == 0 and len(dropped) == 0:
        return None
    out = raw.copy()
    out[quoting] = quote
    if len(dropped):
        keep = np.ones(size, dtype=bool)
        keep[dropped] = False
        out = out[keep]
    return out.tobytes()


def _unescape_scan(data: bytes, quote: int, delimiter: int) -> bytes | None:
    """:func:`spark_unescape` quote by quote (a quote opens a value only at a field's start, as
    pyarrow reads it): for files with stray quotes inside unquoted values."""
    raw = np.frombuffer(data, dtype=np.uint8)
    positions = np.flatnonzero((raw == quote) | (raw == _BACKSLASH)).tolist()
    size, view = len(data), memoryview(data)
    pieces: list[bytes | memoryview] = []
    last, skip, quoted = 0, -1, False
    for at in positions:
        if at <= skip:
            continue
        byte = data[at]
        if not quoted:
            if byte == quote and (at == 0 or data[at - 1] in (delimiter, 0x0A, 0x0D)):
                quoted = True
            continue
        after = data[at + 1] if at + 1 < size else -1
        if byte == quote:
            if after == quote:  # a doubled quote inside quotes: a quote, the value goes on
                skip = at + 1
            else:
                quoted = False
            continue
        if after == quote:  # \" inside quotes: a quote
            pieces += [view[last:at], b'""']
        elif after == _BACKSLASH:  # \\ inside quotes: a backslash
            pieces.append(view[last:at + 1])
        else:
            continue
        last, skip = at + 2, at + 1  # both bytes consumed
    if not pieces:
        return None
    pieces.append(view[last:])
    return b"".join(pieces)


def _spark_text(text: str, options: CsvOptions) -> str:
    """:func:`spark_unescape` of one record's text."""
    rewritten = spark_unescape(text.encode("utf-8"), options) if "\\" in text else None
    return text if rewritten is None else rewritten.decode("utf-8")


def _dialect(options: CsvOptions) -> dict:
    return {"delimiter": options.delimiter, "quotechar": options.quote, "escapechar": options.escape,
            "doublequote": True, "strict": True, "quoting": csv.QUOTE_MINIMAL if options.quote else csv.QUOTE_NONE}


def _first_record(body: bytes, options: CsvOptions, path: str) -> tuple[list[str] | None, int, int]:
    """The first non-empty record of ``body``: (fields, bytes consumed, lines consumed)."""
    for index, offset, line in lines_with_offsets(body):
        if not line:
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{path}: the header (line {index + 1}) is not valid UTF-8: {exc}") from None
        try:
            fields = next(csv.reader([_spark_text(text, options)], **_dialect(options)))
        except csv.Error as exc:
            raise DataError(f"{path}: the header (line {index + 1}) is malformed: {exc}") from None
        end = body.find(b"\n", offset)
        consumed = len(body) if end < 0 else end + 1
        return fields, consumed, index + 1
    return None, len(body), 0


def read_header(path: str, options: CsvOptions, compression: str, s3: S3Config | None = None) -> list[str] | None:
    """The header names of ``path`` (reads only its beginning when uncompressed)."""
    codec = codec_for(path, compression)
    if codec is None:
        with open_binary(path, s3) as handle:
            head = handle.read(HEADER_BYTES)
    else:
        head = read_whole(path, codec, s3)
    return _first_record(head, options, path)[0]


class CsvFormat(FileFormat):
    name = "csv"

    def infer_schema(self, path: str, config: ReadConfig) -> pa.Schema:
        options = config.csv
        with open_binary(path, config.s3) as handle:
            head = handle.read(INFER_BYTES) if codec_for(path, config.compression) is None else None
        if head is None:
            head = read_whole(path, codec_for(path, config.compression), config.s3)[:INFER_BYTES]
        if len(head) == INFER_BYTES and not options.multi_line:
            head = head[: head.rfind(b"\n") + 1]
        head = spark_unescape(head, options) or head
        read_options = pacsv.ReadOptions(autogenerate_column_names=not options.header)
        table = pacsv.read_csv(io.BytesIO(head), read_options=read_options, parse_options=self._parse_options(options),
                               convert_options=pacsv.ConvertOptions(strings_can_be_null=True))
        if not options.header:  # Spark's names for header-less files
            table = table.rename_columns([f"_c{i}" for i in range(table.num_columns)])
        return table.schema

    @staticmethod
    def _parse_options(options: CsvOptions) -> pacsv.ParseOptions:
        return pacsv.ParseOptions(delimiter=options.delimiter, quote_char=options.quote or False,
                                  escape_char=options.escape or False, double_quote=True,
                                  newlines_in_values=options.multi_line, ignore_empty_lines=True)

    def read(self, source: SegmentInput) -> Iterator[pa.RecordBatch]:
        options = source.config.csv
        body, base = segment_bytes(source)
        line_base: int | None = 0 if base == 0 else None
        wanted = list(source.data_schema.names)
        if options.header:
            if base == 0:
                header, consumed, lines = _first_record(body, options, source.path)
                body, base, line_base = body[consumed:], consumed, lines
            else:
                header = read_header(source.path, options, source.config.compression, source.config.s3)
            if header is None:
                return
            missing = [name for name in wanted if name not in header]
            if missing:
                raise DataError(self._drift_message(source, header, missing))
            columns = header
        else:
            columns = wanted
        if not body.strip():
            return
        try:
            table = pacsv.read_csv(
                io.BytesIO(spark_unescape(body, options) or body),
                read_options=pacsv.ReadOptions(column_names=columns, block_size=max(1 << 20, min(len(body) + 1, 1 << 24))),
                parse_options=self._parse_options(options),
                convert_options=pacsv.ConvertOptions(column_types={f.name: f.type for f in source.data_schema},
                                                     include_columns=wanted, strings_can_be_null=True,
                                                     quoted_strings_can_be_null=True),
            )
            if not options.multi_line and options.quote and options.quote.encode() in body \
                    and self._has_line_breaks(table):
                raise pa.ArrowInvalid("a quoted value spans lines but multiLine is off (unbalanced quote)")
        except pa.ArrowInvalid:
            yield records_to_batch(self._records(body, base, line_base, columns, source), source, from_text=True)
            return
        for batch in table.select(wanted).to_batches(max_chunksize=source.config.batch_size or MAX_AUTO_BATCH_ROWS):
            yield with_null_corrupt_column(batch, source)

    @staticmethod
    def _has_line_breaks(table: pa.Table) -> bool:
        """pyarrow lets a quote run across lines even without multiLine; such a record is malformed."""
        for column in table.columns:
            if pa.types.is_string(column.type) and pc.any(pc.match_substring(column, "\n")).as_py():
                return True
        return False

    @staticmethod
    def _drift_message(source: SegmentInput, header: list[str], missing: list[str]) -> str:
        text = f"schema drift: {source.path} has no column {', '.join(repr(m) for m in missing)} in its header {header}"
        reference = source.schema_file
        if reference and reference != source.path:
            try:
                other = read_header(reference, source.config.csv, source.config.compression) or []
            except (OSError, DataError):
                other = []
            if all(name in other for name in missing):
                text += f", but the first file {reference} has: header {other}"
        return text

    @staticmethod
    def _records(body: bytes, base: int, line_base: int | None, columns: list[str],
                 source: SegmentInput) -> list[RawRecord]:
        """Record-by-record parse of a segment that pyarrow refused (slow path, bad data only)."""
        options = source.config.csv
        dialect = _dialect(options)
        lines = list(lines_with_offsets(body))
        records: list[RawRecord] = []

        def where(index: int) -> str:
            return location(byte_offset=base + lines[index][1], line=None if line_base is None else line_base + index + 1)

        def record(fields: list[str], text: str, first: int) -> RawRecord:
            if len(fields) != len(columns):
                return RawRecord(values=None, text=text, where=where(first),
                                 parse_error=f"expected {len(columns)} fields, found {len(fields)}")
            return RawRecord(values={name: (value if value != "" else None) for name, value in zip(columns, fields, strict=False)},
                             text=text, where=where(first))

        index = 0
        while index < len(lines):
            _, _, raw = lines[index]
            if not raw:
                index += 1
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                records.append(RawRecord(values=None, text=raw.decode("utf-8", errors="replace"), where=where(index),
                                         parse_error=f"not valid UTF-8 ({exc.reason} at column {exc.start + 1})"))
                index += 1
                continue
            first = index
            pieces = [text]
            while True:
                try:
                    fields = next(csv.reader([_spark_text("\n".join(pieces), options)], **dialect))
                    records.append(record(fields, "\n".join(pieces), first))
                    break
                except csv.Error as exc:
                    # an open quote: in multi-line mode the record continues on the next line
                    if options.multi_line and "unexpected end of data" in str(exc) and index + 1 < len(lines):
                        index += 1
                        pieces.append(lines[index][2].decode("utf-8", errors="replace"))
                        continue
                    records.append(RawRecord(values=None, text="\n".join(pieces), where=where(first),
                                             parse_error=f"unbalanced quotes or bad escaping ({exc})"))
                    break
            index += 1
        return records
