"""Output formats: row encoders (text, JSON lines, CSV) and bulk writers (Parquet, Avro, ORC).

A :class:`FormatConfig` is built on the driver from the ``format``, ``compression``,
``rowGroupSize``, ``writeBufferSize`` and ``header`` options and validated against the input
schema there. On executors, row encoders turn an Arrow record batch into bytes that are
appended to a part file (so a file can be carried across micro-batches and concatenated by
compaction), and bulk writers stream record batches into one self-contained file.

Encoding is done by Arrow compute kernels (JSON lines, text), pyarrow (Parquet, ORC, CSV) and
fastavro (Avro). Bulk files are sized the way Spark's writers size them, whatever the size of
the Arrow batches Spark hands over (``spark.sql.execution.arrow.maxRecordsPerBatch`` rows,
10,000 by default): a Parquet row group is written once the rows buffered for it reach
``rowGroupSize`` (128 MiB by default, parquet-mr's ``parquet.block.size``), an ORC stripe once
pyarrow's ORC writer holds ``rowGroupSize`` bytes (64 MiB, ``orc.stripe.size``), an Avro block
once fastavro holds ``rowGroupSize`` bytes (64,000, Avro's sync interval).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.orc as pa_orc
import pyarrow.parquet as pq

from sparklink.errors import ConfigError, DataError
from sparklink.options import parse_size

OPTION_FORMAT = "format"
OPTION_COMPRESSION = "compression"
OPTION_ROW_GROUP_SIZE = "rowGroupSize"
OPTION_HEADER = "header"
OPTION_WRITE_BUFFER_SIZE = "writeBufferSize"
ROW_FORMATS = ("text", "json", "csv")
BULK_FORMATS = ("parquet", "avro", "orc")
FORMATS = ROW_FORMATS + BULK_FORMATS
EXTENSIONS = {"text": ".txt", "json": ".json", "csv": ".csv", "parquet": ".parquet", "avro": ".avro", "orc": ".orc"}
SUFFIX_ALIASES = {".jsonl": "json"}  # suffixes users give with partSuffix that still name a format


def format_of_suffix(suffix: str) -> str | None:
    """The format a file suffix names (``.parquet`` -> parquet), None for a suffix of no format."""
    suffix = suffix.lower()
    by_suffix = {extension: name for name, extension in EXTENSIONS.items()}
    return by_suffix.get(suffix) or SUFFIX_ALIASES.get(suffix)

COMPRESSIONS = {
    "parquet": ("snappy", "zstd", "gzip", "lz4", "brotli", "none"),
    "orc": ("snappy", "zstd", "zlib", "lz4", "none"),
    "avro": ("null", "deflate", "bzip2", "xz", "snappy", "zstandard"),
}
DEFAULT_COMPRESSION = {"parquet": "snappy", "orc": "snappy", "avro": "deflate"}
# Spark's own defaults: parquet.block.size, orc.stripe.size, Avro's DataFileWriter sync interval.
DEFAULT_ROW_GROUP_BYTES = {"parquet": 128 * 1024 * 1024, "orc": 64 * 1024 * 1024, "avro": 64_000}
DEFAULT_WRITE_BUFFER_SIZE = 256 * 1024 * 1024
WRITE_BUFFER = 1024 * 1024  # bytes buffered in Arrow before they reach a Python file object (S3 upload)
_ROWS = re.compile(r"^\s*(\d+)\s*rows?\s*$", re.IGNORECASE)


def parse_row_group_size(value: str | int) -> tuple[int | None, int | None]:
    """``rowGroupSize`` -> (bytes, rows): ``"128MB"`` or a bare number is bytes, ``"1000000rows"`` rows."""
    match = _ROWS.match(str(value))
    if match:
        return None, int(match.group(1))
    try:
        return parse_size(OPTION_ROW_GROUP_SIZE, value), None
    except ConfigError:
        raise ConfigError(OPTION_ROW_GROUP_SIZE, f"'{value}' is not a size or a number of rows",
                          "bytes with an optional unit (128MB) or rows (1000000rows)") from None


@dataclass(frozen=True, kw_only=True)
class FormatConfig:
    """Which format, and its settings.

    ``row_group_bytes`` / ``row_group_rows`` (at most one; neither: the format's default bytes)
    size Parquet row groups, ORC stripes (bytes only) and Avro blocks (bytes only).
    ``write_buffer_size`` bounds the Arrow bytes one write task buffers for all its open bulk
    files together.
    """

    name: str
    compression: str | None = None
    row_group_bytes: int | None = None
    row_group_rows: int | None = None
    write_buffer_size: int = DEFAULT_WRITE_BUFFER_SIZE
    header: bool = False

    def __post_init__(self) -> None:
        if self.name not in FORMATS:
            raise ConfigError(OPTION_FORMAT, f"unknown format '{self.name}'", ", ".join(FORMATS))
        if self.compression is not None:
            allowed = COMPRESSIONS.get(self.name)
            if allowed is None:
                raise ConfigError(OPTION_COMPRESSION, f"format '{self.name}' is written uncompressed",
                                  "compression applies to " + ", ".join(COMPRESSIONS))
            if self.compression not in allowed:
                raise ConfigError(OPTION_COMPRESSION, f"'{self.compression}' is not a {self.name} codec", ", ".join(allowed))
        if self.row_group_bytes is not None and self.row_group_rows is not None:
            raise ConfigError(OPTION_ROW_GROUP_SIZE, "is either bytes or rows, not both")
        if (self.row_group_bytes is not None or self.row_group_rows is not None) and not self.bulk:
            raise ConfigError(OPTION_ROW_GROUP_SIZE, f"applies to formats parquet, orc, avro, not '{self.name}'")
        for value in (self.row_group_bytes, self.row_group_rows):
            if value is not None and value < 1:
                raise ConfigError(OPTION_ROW_GROUP_SIZE, f"must be at least 1, got {value}")
        if self.row_group_rows is not None and self.name != "parquet":
            raise ConfigError(OPTION_ROW_GROUP_SIZE, f"rows apply to format 'parquet'; {self.name} "
                              f"{'stripes' if self.name == 'orc' else 'blocks'} are sized in bytes", "e.g. 64MB")
        if self.write_buffer_size < 1:
            raise ConfigError(OPTION_WRITE_BUFFER_SIZE, f"must be at least 1 byte, got {self.write_buffer_size}")
        if self.name == "avro" and self.codec in ("snappy", "zstandard"):
            _check_avro_codec(self.codec)

    @property
    def bulk(self) -> bool:
        return self.name in BULK_FORMATS

    @property
    def codec(self) -> str:
        return self.compression or DEFAULT_COMPRESSION.get(self.name, "none")

    @property
    def extension(self) -> str:
        return EXTENSIONS[self.name]

    @property
    def block_bytes(self) -> int | None:
        """Bytes per row group / stripe / block (None when Parquet row groups count rows)."""
        if self.row_group_rows is not None:
            return None
        return self.row_group_bytes if self.row_group_bytes is not None else DEFAULT_ROW_GROUP_BYTES.get(self.name)

    def validate(self, schema: pa.Schema) -> None:
        """Check that the input schema can be written in this format (driver, query start)."""
        if self.name == "text":
            if len(schema) != 1 or not pa.types.is_string(schema.field(0).type):
                raise ConfigError(OPTION_FORMAT, f"format 'text' writes one string column; the input has "
                                  f"{', '.join(f'{f.name}: {f.type}' for f in schema)}",
                                  "select a single string column, e.g. df.selectExpr('to_json(struct(*)) AS value')")
        elif self.name == "csv":
            for field in schema:
                if pa.types.is_nested(field.type) or pa.types.is_binary(field.type):
                    raise ConfigError(OPTION_FORMAT, f"format 'csv' cannot write column '{field.name}' of type {field.type}",
                                      "flat columns (strings, numbers, booleans, dates, timestamps)")
        elif self.name == "avro":
            avro_schema(schema)

    def row_encoder(self, schema: pa.Schema) -> "RowEncoder":
        if self.name == "text":
            return TextEncoder()
        if self.name == "json":
            return JsonLinesEncoder(schema)
        if self.name == "csv":
            return CsvEncoder(header=self.header, schema=schema)
        raise ConfigError(OPTION_FORMAT, f"format '{self.name}' is a bulk format, not a row format")

    def bulk_writer(self, path: Path | BinaryIO, schema: pa.Schema) -> "BulkWriter":
        """A writer of a new bulk file at ``path`` (local disk), or into ``path`` when it is a
        binary file object (an S3 multipart upload: closing the writer closes the object)."""
        if self.name == "parquet":
            return ParquetBulkWriter(path, schema, self.codec, row_group_bytes=self.block_bytes,
                                     row_group_rows=self.row_group_rows)
        if self.name == "orc":
            return OrcBulkWriter(path, schema, self.codec, stripe_bytes=self.block_bytes or 0)
        if self.name == "avro":
            return AvroBulkWriter(path, schema, self.codec, block_bytes=self.block_bytes or 0)
        raise ConfigError(OPTION_FORMAT, f"format '{self.name}' is a row format, not a bulk format")

    def to_options(self) -> dict[str, str]:
        options = {OPTION_FORMAT: self.name}
        if self.compression is not None:
            options[OPTION_COMPRESSION] = self.compression
        if self.row_group_bytes is not None:
            options[OPTION_ROW_GROUP_SIZE] = str(self.row_group_bytes)
        if self.row_group_rows is not None:
            options[OPTION_ROW_GROUP_SIZE] = f"{self.row_group_rows}rows"
        if self.write_buffer_size != DEFAULT_WRITE_BUFFER_SIZE:
            options[OPTION_WRITE_BUFFER_SIZE] = str(self.write_buffer_size)
        if self.name == "csv":
            options[OPTION_HEADER] = str(self.header).lower()
        return options


# ---------------------------------------------------------------------------------- row formats


class RowEncoder(ABC):
    """Arrow record batch -> bytes to append to a row-format part file (executor side)."""

    def header(self) -> bytes:
        """Bytes that start every new file (CSV header line), empty otherwise."""
        return b""

    @abstractmethod
    def encode(self, batch: pa.RecordBatch) -> bytes: ...


def _joined_bytes(lines: pa.Array | pa.ChunkedArray) -> bytes:
    """The bytes of a string array's values, back to back (its data buffer, sliced)."""
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    if len(lines) == 0:
        return b""
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)
    first, last = int(offsets[lines.offset]), int(offsets[lines.offset + len(lines)])
    return lines.buffers()[2].slice(first, last - first).to_pybytes()


class TextEncoder(RowEncoder):
    """One line per row: the string value and a newline (a null is an empty line)."""

    def encode(self, batch: pa.RecordBatch) -> bytes:
        column = pc.fill_null(batch.column(0), "")
        return _joined_bytes(pc.binary_join_element_wise(column, pa.scalar("", pa.string()), "\n"))


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


def _is_utc_timestamp(kind: pa.DataType) -> bool:
    return pa.types.is_timestamp(kind) and kind.tz in (None, "UTC", "+00:00", "Z")


def _timestamp_text(column: pa.Array) -> pa.Array:
    """``YYYY-MM-DD HH:MM:SS.ffffff`` of a UTC or naive timestamp column. The values are viewed
    as naive microseconds first: Arrow formats a zoned timestamp through the time-zone
    database, 20x slower, even for UTC."""
    kind = column.type
    if kind.unit != "us":
        column = pc.cast(column, pa.timestamp("us", tz=kind.tz))
    return pc.cast(column.view(pa.timestamp("us")), pa.string())


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
    if _is_utc_timestamp(kind):
        text = _iso_separator(_timestamp_text(column))
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
        return _joined_bytes(pc.binary_join_element_wise(*pieces, ""))


def _csv_text(column: pa.Array, kind: pa.DataType) -> pa.Array | None:
    """CSV text of one column as pyarrow's CSV writer formats it (strings always quoted), or
    None for a type left to pyarrow's writer."""
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind) \
            or pa.types.is_date32(kind) or pa.types.is_decimal(kind):
        return pc.cast(column, pa.string())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        if pc.any(pc.match_substring(column, '"')).as_py():
            column = pc.replace_substring(column, '"', '""')
        return pc.binary_join_element_wise('"', column, '"', "")
    if _is_utc_timestamp(kind) and kind.unit == "us":  # pyarrow prints the unit's digits
        text = _timestamp_text(column)
        return pc.binary_join_element_wise(text, "Z", "") if kind.tz else text
    return None


class CsvEncoder(RowEncoder):
    """RFC 4180 CSV as pyarrow writes it; the header line (option ``header``) starts each file once.

    Numbers (decimals too), booleans, strings, dates and UTC timestamps are formatted
    column-wise by Arrow kernels (pyarrow's writer formats zoned timestamps through the time-zone database, which
    made it the slowest step); a batch with other types goes through pyarrow's writer.
    """

    def __init__(self, *, header: bool, schema: pa.Schema):
        self.with_header = header
        self.schema = schema

    def header(self) -> bytes:
        if not self.with_header:
            return b""
        sink = io.BytesIO()
        pa_csv.write_csv(self.schema.empty_table(), sink, pa_csv.WriteOptions(include_header=True))
        return sink.getvalue()

    def encode(self, batch: pa.RecordBatch) -> bytes:
        if batch.num_rows == 0:
            return b""
        texts = [_csv_text(column, field.type) for column, field in zip(batch.columns, batch.schema, strict=False)]
        if batch.num_columns == 0 or any(text is None for text in texts):
            sink = io.BytesIO()
            pa_csv.write_csv(batch, sink, pa_csv.WriteOptions(include_header=False))
            return sink.getvalue()
        pieces: list[Any] = []
        for text in texts:
            pieces += [pc.fill_null(text, ""), ","]
        pieces[-1] = "\n"
        return _joined_bytes(pc.binary_join_element_wise(*pieces, ""))


# ---------------------------------------------------------------------------------- bulk formats


class BulkWriter(ABC):
    """Writes record batches into one self-contained file (executor side, one per open file).

    Writers buffer: :meth:`buffered_bytes` says how much memory the not-yet-written rows hold,
    :meth:`release` writes them out early when the task's buffer budget is exceeded.
    """

    @abstractmethod
    def write_batch(self, batch: pa.RecordBatch) -> None: ...

    @abstractmethod
    def size(self) -> int:
        """Bytes the file will have so far: written plus an estimate for buffered rows."""

    @abstractmethod
    def buffered_bytes(self) -> int:
        """Memory held for rows not yet written to the file (an upper bound)."""

    @abstractmethod
    def release(self) -> bool:
        """Write the buffered rows out now (a smaller row group or block); False when the
        format cannot, and the file has to be closed to free them (ORC)."""

    @abstractmethod
    def close(self) -> int:
        """Finish the file, fsync it and return its length."""


class _NativeFileWriter(BulkWriter):
    def __init__(self, path: Path | BinaryIO):
        if isinstance(path, Path):
            self.path: Path | None = path
            self.output: BinaryIO | None = None
            self.sink = pa.OSFile(str(path), "wb")
        else:
            self.path, self.output = None, path
            # buffered: pyarrow's many small writes reach the Python file object in 1 MiB pieces
            self.sink = pa.BufferedOutputStream(pa.PythonFile(path, mode="w"), buffer_size=WRITE_BUFFER)

    def _finish_sink(self) -> int:
        self.sink.close()
        if self.output is not None:
            self.output.close()  # the object's last bytes go out (an S3 upload's last part)
            return self.output.tell()
        assert self.path is not None  # a local file: synced here, as pyarrow's OSFile does not
        with open(self.path, "rb+") as handle:
            os.fsync(handle.fileno())
        return self.path.stat().st_size


# parquet-mr decides on a column's dictionary after its first page (1 MiB, 131,072 longs)
DICTIONARY_SAMPLE_ROWS = 131_072


def dictionary_columns(table: pa.Table) -> list[str] | bool:
    """The columns worth a dictionary, judged on the first rows as parquet-mr judges its first
    page: a column whose dictionary plus indices would not be smaller than its plain values
    (mostly distinct ids, measurements) is written plain. pyarrow alone keeps a dictionary
    until it reaches 1 MiB, which made such columns 10-40 % larger than Spark's. With a
    nested column every column keeps its dictionary (pyarrow names nested leaves by path)."""
    if any(pa.types.is_nested(field.type) for field in table.schema):
        return True
    sample = table.slice(0, DICTIONARY_SAMPLE_ROWS)
    chosen = []
    for name, column in zip(sample.column_names, sample.columns, strict=False):
        kind = column.type
        values = len(column) - column.null_count
        if values == 0 or not (pa.types.is_primitive(kind) or pa.types.is_decimal(kind) or pa.types.is_string(kind)
                               or pa.types.is_binary(kind) or pa.types.is_large_string(kind)
                               or pa.types.is_large_binary(kind)) or pa.types.is_boolean(kind):
            chosen.append(name)
            continue
        distinct = pc.unique(column.drop_null())
        if pa.types.is_primitive(kind) or pa.types.is_decimal(kind):
            width = max(1, kind.bit_width // 8)
            plain, dictionary = values * width, len(distinct) * width
        else:
            plain = (pc.sum(pc.binary_length(column)).as_py() or 0) + 4 * values
            dictionary = (pc.sum(pc.binary_length(distinct)).as_py() or 0) + 4 * len(distinct)
        indices = values * max(1, (len(distinct) - 1).bit_length()) / 8
        if dictionary + indices < plain:
            chosen.append(name)
    return chosen


class ParquetBulkWriter(_NativeFileWriter):
    """Parquet through pyarrow, one row group per ``row_group_bytes`` of buffered Arrow data
    (or per ``row_group_rows`` rows).

    Record batches are kept as they arrive (no copy); a full row group is handed to pyarrow
    as one table, which encodes its chunks into one row group with one dictionary per column
    chunk. Settings follow parquet-mr as Spark uses it: dictionaries where they pay
    (:func:`dictionary_columns`, decided at the file's first row group), 1 MiB dictionary and
    data pages, statistics, v1 data pages.
    """

    def __init__(self, path: Path | BinaryIO, schema: pa.Schema, codec: str, *, row_group_bytes: int | None,
                 row_group_rows: int | None):
        super().__init__(path)
        self.schema = schema
        self.codec = codec
        self.row_group_bytes = row_group_bytes
        self.row_group_rows = row_group_rows
        self.writer: pq.ParquetWriter | None = None  # opened at the first row group
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.pending_bytes = 0
        self.written_arrow_bytes = 0
        self.row_groups = 0

    def _open(self, dictionary: list[str] | bool) -> pq.ParquetWriter:
        return pq.ParquetWriter(self.sink, self.schema, compression=self.codec, use_dictionary=dictionary,
                                write_statistics=True, data_page_size=1024 * 1024,
                                dictionary_pagesize_limit=1024 * 1024)

    def write_batch(self, batch: pa.RecordBatch) -> None:
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        self.pending_bytes += batch.nbytes
        if self.row_group_rows is not None:
            if self.pending_rows >= self.row_group_rows:
                self._write_full_row_groups(self.row_group_rows)
        elif self.row_group_bytes is not None and self.pending_bytes >= self.row_group_bytes:
            self.release()

    def _write_full_row_groups(self, row_group_rows: int) -> None:
        table = pa.Table.from_batches(self.pending)
        full = self.pending_rows - self.pending_rows % row_group_rows
        self._write(table.slice(0, full), row_group_rows)
        self.pending = table.slice(full).to_batches()
        self.pending_rows = self.pending_rows - full
        self.pending_bytes = sum(b.nbytes for b in self.pending)

    def _write(self, table: pa.Table, rows_per_group: int) -> None:
        if self.writer is None:
            self.writer = self._open(dictionary_columns(table))
        self.writer.write_table(table, row_group_size=rows_per_group)
        self.written_arrow_bytes += table.nbytes
        self.row_groups += -(-table.num_rows // rows_per_group)

    def release(self) -> bool:
        if self.pending_rows:
            self._write(pa.Table.from_batches(self.pending), self.pending_rows)
        self.pending, self.pending_rows, self.pending_bytes = [], 0, 0
        return True

    def buffered_bytes(self) -> int:
        return self.pending_bytes

    def size(self) -> int:
        """Bytes written, plus the buffered Arrow bytes scaled by this file's encoded/Arrow
        ratio so far (1:1 before its first row group, so the estimate errs high)."""
        written = self.sink.tell()
        ratio = written / self.written_arrow_bytes if self.written_arrow_bytes else 1.0
        return written + int(self.pending_bytes * ratio)

    def close(self) -> int:
        self.release()
        if self.writer is None:  # no rows: a valid file with the schema and no row group
            self.writer = self._open(True)
        self.writer.close()
        return self._finish_sink()


class OrcBulkWriter(_NativeFileWriter):
    """ORC through pyarrow; its writer cuts a stripe once it holds ``stripe_bytes``."""

    def __init__(self, path: Path | BinaryIO, schema: pa.Schema, codec: str, *, stripe_bytes: int):
        super().__init__(path)
        self.stripe_bytes = stripe_bytes
        self.writer = pa_orc.ORCWriter(self.sink, compression="uncompressed" if codec == "none" else codec,
                                       stripe_size=stripe_bytes)
        self.arrow_bytes = 0

    def write_batch(self, batch: pa.RecordBatch) -> None:
        self.writer.write(pa.Table.from_batches([batch]))
        self.arrow_bytes += batch.nbytes

    def buffered_bytes(self) -> int:
        return min(self.arrow_bytes, self.stripe_bytes)

    def size(self) -> int:
        return self.sink.tell() + self.buffered_bytes()

    def release(self) -> bool:
        return False  # pyarrow cannot cut a stripe on demand: the file is rolled instead

    def close(self) -> int:
        self.writer.close()
        return self._finish_sink()


def _avro_type(field: pa.Field, path: str) -> Any:
    kind = field.type
    if pa.types.is_boolean(kind):
        base: Any = "boolean"
    elif pa.types.is_int8(kind) or pa.types.is_int16(kind) or pa.types.is_int32(kind):
        base = "int"
    elif pa.types.is_int64(kind):
        base = "long"
    elif pa.types.is_float32(kind):
        base = "float"
    elif pa.types.is_float64(kind):
        base = "double"
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        base = "string"
    elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        base = "bytes"
    elif pa.types.is_date32(kind):
        base = {"type": "int", "logicalType": "date"}
    elif pa.types.is_timestamp(kind):
        base = {"type": "long", "logicalType": "timestamp-micros" if kind.tz else "local-timestamp-micros"}
    elif pa.types.is_decimal(kind):
        base = {"type": "bytes", "logicalType": "decimal", "precision": kind.precision, "scale": kind.scale}
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        base = {"type": "array", "items": _avro_type(kind.value_field, f"{path}.element")}
    elif pa.types.is_struct(kind):
        base = {"type": "record", "name": "r_" + path.replace(".", "_"),
                "fields": [{"name": kind.field(i).name, "type": _avro_type(kind.field(i), f"{path}.{kind.field(i).name}")}
                           for i in range(kind.num_fields)]}
    elif pa.types.is_map(kind) and pa.types.is_string(kind.key_type):
        base = {"type": "map", "values": _avro_type(kind.item_field, f"{path}.value")}
    else:
        raise ConfigError(OPTION_FORMAT, f"format 'avro' cannot write column '{path}' of type {kind}",
                          "booleans, integers, floats, strings, binary, dates, timestamps, decimals, arrays, structs, "
                          "maps with string keys")
    return ["null", base] if field.nullable else base


def avro_schema(schema: pa.Schema) -> dict[str, Any]:
    """The Avro record schema for an Arrow schema (every nullable field is a union with null)."""
    return {"type": "record", "name": "sparklink_record",
            "fields": [{"name": f.name, "type": _avro_type(f, f.name)} for f in schema]}


def _check_avro_codec(codec: str) -> None:
    import fastavro

    try:
        fastavro.writer(io.BytesIO(), {"type": "record", "name": "probe", "fields": []}, [{}], codec=codec)
    except (ValueError, ImportError) as exc:
        raise ConfigError(OPTION_COMPRESSION, f"Avro codec '{codec}' is not available here ({exc})",
                          "null, deflate, bzip2, xz (snappy needs cramjam, zstandard needs zstandard)") from None


class AvroBulkWriter(BulkWriter):
    """Avro object container file via fastavro (records pass through Python: fastavro's API);
    a block is written once it holds ``block_bytes`` (Avro's sync interval)."""

    def __init__(self, path: Path | BinaryIO, schema: pa.Schema, codec: str, *, block_bytes: int):
        from fastavro.write import Writer

        self.path = path if isinstance(path, Path) else None
        self.block_bytes = block_bytes
        self.handle: BinaryIO = open(path, "wb") if isinstance(path, Path) else path  # noqa: SIM115 - closed in close()
        self.writer = Writer(self.handle, avro_schema(schema), codec=codec, sync_interval=block_bytes)
        self.arrow_bytes_since_flush = 0

    def write_batch(self, batch: pa.RecordBatch) -> None:
        for record in batch.to_pylist():
            self.writer.write(record)
        self.arrow_bytes_since_flush += batch.nbytes

    def buffered_bytes(self) -> int:
        return min(self.arrow_bytes_since_flush, self.block_bytes)

    def size(self) -> int:
        return self.handle.tell() + self.buffered_bytes()

    def release(self) -> bool:
        self.writer.flush()
        self.arrow_bytes_since_flush = 0
        return True

    def close(self) -> int:
        self.writer.flush()
        self.handle.flush()
        if self.path is None:  # a file object (an S3 upload): closing it sends its last part
            self.handle.close()
            return self.handle.tell()
        os.fsync(self.handle.fileno())
        self.handle.close()
        return self.path.stat().st_size


# ---------------------------------------------------------------------------------- reading back


def read_bulk_batches(config: FormatConfig, source: Any, *,
                      name: str) -> Iterator[pa.RecordBatch] | Iterator[dict[str, Any]]:
    """Records of a bulk file: Arrow batches (Parquet, ORC) or dicts (Avro). Used by compaction.
    ``source`` is an open random-access file (a local file or an S3 object); ``name`` names it
    in errors."""
    try:
        if config.name == "parquet":
            yield from pq.ParquetFile(source).iter_batches()
        elif config.name == "orc":
            yield from pa_orc.ORCFile(source).read().to_batches()
        elif config.name == "avro":
            import fastavro

            yield from fastavro.reader(source)
        else:
            raise ConfigError(OPTION_FORMAT, f"format '{config.name}' is not a bulk format")
    except (pa.ArrowInvalid, OSError, ValueError) as exc:
        raise DataError(f"{name}: cannot read {config.name} part file: {exc}") from exc
